//go:build linux

package ibudp

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net"
	"testing"
	"time"

	"github.com/rnicd/rnicd/wire/bth"
)

// The eight-bytes-at-a-time sum folds to what RFC 1071's word-by-word sum
// gives, at every length and alignment of the tail, carries included.
func TestOnesSum(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for n := 0; n < 300; n++ {
		for _, fill := range []func() byte{func() byte { return 0xff }, func() byte { return byte(rng.Uint32()) }} {
			b := make([]byte, n, n+1)
			for i := range b {
				b[i] = fill()
			}
			want := refOnesSum(append(b, 0)) // padded to whole words
			if got := fold(onesSum(0, b)); got != want && !(got == 0xffff && want == 0 || got == 0 && want == 0xffff) {
				t.Fatalf("%d bytes: %#04x, want %#04x", n, got, want)
			}
		}
	}
}

// A packet's checksum, once filled in, sums to 0xffff; a flipped bit or a
// changed address fails it; 0 means none.
func TestUDP6Checksum(t *testing.T) {
	env := bth.Envelope{Src: addr(nsAddr6A), Dst: addr(nsAddr6B), SrcPort: 0xc001, DstPort: bth.UDPPort, TTL: 64}
	b := NewBuf()
	fillPacket(t, b, 0x11, 9, 333)
	var hdr [bth.IPv6HeaderLen + bth.UDPHeaderLen]byte
	env.Put(hdr[:], b.N)
	if !udp6ChecksumOK(hdr[:], b.RoCE()) {
		t.Fatal("checksum 0 (none) refused")
	}
	putUDP6Checksum(hdr[:], b.RoCE())
	sum := binary.BigEndian.Uint16(hdr[46:])
	if sum == 0 || !udp6ChecksumOK(hdr[:], b.RoCE()) {
		t.Fatalf("checksum %#04x does not verify", sum)
	}
	b.RoCE()[100] ^= 4
	if udp6ChecksumOK(hdr[:], b.RoCE()) {
		t.Fatal("a flipped payload bit passes")
	}
	b.RoCE()[100] ^= 4
	hdr[39] ^= 1 // destination address, in the pseudo-header only
	if udp6ChecksumOK(hdr[:], b.RoCE()) {
		t.Fatal("another destination passes")
	}
}

// What ModePacket sends over IPv6 carries a checksum the kernel accepts:
// an ordinary UDP socket, which drops IPv6 datagrams with checksum 0 or a
// wrong one, receives it. A packet with a wrong checksum sent to a
// ModePacket port is dropped and counted; with 0 (as rxe sends) it is
// taken.
func TestUDP6ChecksumOnTheWire(t *testing.T) {
	withNetns(t, func(ns *testNetns) {
		var plain *net.UDPConn
		ns.run(t, ns.b, func() (err error) {
			plain, err = net.ListenUDP("udp6", &net.UDPAddr{IP: net.ParseIP(nsAddr6B), Port: bth.UDPPort})
			return err
		})
		if t.Failed() {
			t.FailNow()
		}
		defer plain.Close()
		a := ns.open(t, ns.a, Config{Addr: addr(nsAddr6A), Mode: ModePacket})
		sent := sendBatch(t, a, addr(nsAddr6B), 3, 5, []int{0, 1, 1024}, 0xc003, 0)
		buf := make([]byte, MaxRoCELen)
		plain.SetReadDeadline(time.Now().Add(3 * time.Second))
		for i := range sent {
			n, from, err := plain.ReadFromUDP(buf)
			if err != nil {
				t.Fatalf("packet %d: %v (the kernel dropped it: UDP checksum?)", i, err)
			}
			if string(buf[:n]) != string(sent[i].roce) || from.Port != 0xc003 {
				t.Fatalf("packet %d differs or comes from port %d", i, from.Port)
			}
		}
		plain.Close()

		b := ns.open(t, ns.b, Config{Addr: addr(nsAddr6B), Mode: ModePacket})
		rb := startReceiver(b)
		env := bth.Envelope{Src: addr(nsAddr6A), Dst: addr(nsAddr6B), SrcPort: 0xc004, DstPort: bth.UDPPort, TTL: 64}
		pkt := NewBuf()
		fillPacket(t, pkt, 0x11, 77, 64)
		sealEnvelope(&env, pkt.RoCE())
		ns.run(t, ns.a, func() error { return sendRawSum(&env, pkt.RoCE(), 0x1234) })
		waitStats(t, b, "a UDP checksum error", func(s Stats) bool { return s.RxUDPChecksum == 1 })
		ns.run(t, ns.a, func() error { return sendRaw(&env, pkt.RoCE()) })
		if g := rb.get(t, 1, 3*time.Second)[0]; bth.BTH(g.roce).PSN() != 77 || g.icrc != ICRCVerified {
			t.Fatalf("the packet with checksum 0: %+v", g)
		}
		if s := b.Stats(); s.RxUDPChecksum != 1 || s.RxICRCErrors != 0 {
			t.Fatalf("stats %v", s)
		}
	})
}

// A ModeUDP sender's IPv6 packets reach a ModePacket port with their
// checksum left to an offload that never runs on a veth
// (TP_STATUS_CSUMNOTREADY): taken, not counted as checksum errors. GSO
// runs included.
func TestUDPToPacketIPv6(t *testing.T) {
	withNetns(t, func(ns *testNetns) {
		u := ns.open(t, ns.a, Config{Addr: addr(nsAddr6A), Mode: ModeUDP})
		p := ns.open(t, ns.b, Config{Addr: addr(nsAddr6B), Mode: ModePacket})
		rp := startReceiver(p)
		sent := sendBatch(t, u, p.Addr(), 40, 1, []int{1024, 1024, 1024, 1024, 1024, 7, 0}, 0, 0)
		got := rp.get(t, 40, 5*time.Second)
		matchAll(t, sent, got)
		for _, g := range got {
			if g.icrc != ICRCVerified || g.peer != u.Addr() {
				t.Fatalf("%+v", g)
			}
		}
		if s := p.Stats(); s.RxDropped() != 0 {
			t.Fatalf("stats %v", s)
		}
	})
}

// The UDP checksum ModePacket computes for every IPv6 packet it sends.
func BenchmarkUDP6Checksum(b *testing.B) {
	for _, payload := range benchPayloads {
		b.Run(fmt.Sprintf("%dB", payload+58), func(b *testing.B) {
			env := bth.Envelope{Src: addr(nsAddr6A), Dst: addr(nsAddr6B), SrcPort: 0xc001, DstPort: bth.UDPPort, TTL: 64}
			buf := NewBuf()
			fillPacket(b, buf, 0x11, 1, payload)
			var hdr [bth.IPv6HeaderLen + bth.UDPHeaderLen]byte
			env.Put(hdr[:], buf.N)
			b.SetBytes(int64(buf.N))
			b.ReportAllocs()
			for b.Loop() {
				hdr[46], hdr[47] = 0, 0
				putUDP6Checksum(hdr[:], buf.RoCE())
			}
		})
	}
}
