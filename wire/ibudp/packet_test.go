//go:build linux

package ibudp

import (
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rnicd/rnicd/internal/looptest"
	"github.com/rnicd/rnicd/wire/bth"
	"github.com/rnicd/rnicd/wire/netif"
)

// Two ModePacket ports exchange batches both ways: byte for byte, ICRC
// verified over the real IP header, per-packet source port honoured,
// incrementing IPv4 IDs, TOS carried.
func TestPacketExchange(t *testing.T) { eachWait(t, testPacketExchange) }

func testPacketExchange(t *testing.T, waitInKernel bool) {
	ipA, ipB := looptest.Get(t), looptest.Get(t)
	needRoot(t)
	a := openPort(t, Config{Addr: ipA, Mode: ModePacket, WaitInKernel: waitInKernel})
	b := openPort(t, Config{Addr: ipB, Mode: ModePacket, WaitInKernel: waitInKernel})
	ra, rb := startReceiver(a), startReceiver(b)

	sent := sendBatch(t, a, b.Addr(), 64, 100, testSizes, 0xc121, 0x03)
	got := rb.get(t, 64, 3*time.Second)
	matchAll(t, sent, got)
	ids := map[uint16]bool{}
	for _, g := range got {
		if g.peer != a.Addr() || g.peerPort != 0xc121 || g.tos != 0x03 || g.icrc != ICRCVerified || g.ipid == 0 {
			t.Fatalf("metadata: %v:%d tos %#x icrc %v id %d", g.peer, g.peerPort, g.tos, g.icrc, g.ipid)
		}
		ids[g.ipid] = true
	}
	if len(ids) != 64 {
		t.Fatalf("%d distinct IPv4 IDs in 64 packets", len(ids))
	}

	sent = sendBatch(t, b, a.Addr(), 300, 7000, testSizes, 0, 0)
	got = ra.get(t, 300, 3*time.Second)
	matchAll(t, sent, got)
	if got[0].peerPort != bth.UDPPort {
		t.Fatalf("SrcPort 0 should send from the bound port, got %d", got[0].peerPort)
	}
	ra.none(t, 50*time.Millisecond) // each packet once, though lo shows it twice
	sa, sb := a.Stats(), b.Stats()
	if sa.RxPackets != 300 || sb.RxPackets != 64 || sa.RxDropped()+sb.RxDropped() != 0 {
		t.Fatalf("stats a: %v; b: %v", sa, sb)
	}
}

// IPv6 ModePacket on ::1 (AF_INET6 raw socket with IPV6_HDRINCL).
func TestPacketExchangeIPv6(t *testing.T) {
	needRoot(t)
	// Ports of this test's own: ::1 is the one IPv6 loopback address.
	pa, pb := uint16(looptest.Port(t)), uint16(looptest.Port(t))
	a, err := Open(Config{Addr: addr("::1"), Port: pa, RemotePort: pb, Mode: ModePacket})
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	defer a.Close()
	b := openPort(t, Config{Addr: addr("::1"), Port: pb, RemotePort: pa, Mode: ModePacket})
	ra, rb := startReceiver(a), startReceiver(b)
	sent := sendBatch(t, a, addr("::1"), 64, 10, testSizes, 0xd000, 0x02)
	got := rb.get(t, 64, 3*time.Second)
	matchAll(t, sent, got)
	if g := got[0]; g.peerPort != 0xd000 || g.tos != 0x02 || g.icrc != ICRCVerified {
		t.Fatalf("metadata %+v", g)
	}
	sent = sendBatch(t, b, addr("::1"), 64, 20, testSizes, 0, 0)
	matchAll(t, sent, ra.get(t, 64, 3*time.Second))
}

// A ModeUDP sender and a ModePacket receiver agree: the packet path checks
// all 32 bits of an ID-0 packet. The other way, ModeUDP needs the any-ID
// check for ModePacket's nonzero IDs.
func TestUDPToPacketAndBack(t *testing.T) {
	ipA, ipB := looptest.Get(t), looptest.Get(t)
	needRoot(t)
	u := openPort(t, Config{Addr: ipA, Mode: ModeUDP})
	p := openPort(t, Config{Addr: ipB, Mode: ModePacket})
	ru, rp := startReceiver(u), startReceiver(p)
	sent := sendBatch(t, u, p.Addr(), 64, 1, testSizes, 0, 0)
	got := rp.get(t, 64, 3*time.Second)
	matchAll(t, sent, got)
	if got[0].ipid != 0 || got[0].icrc != ICRCVerified {
		t.Fatalf("ModeUDP's packets should carry IPv4 ID 0: %+v", got[0])
	}

	sent = sendBatch(t, p, u.Addr(), 16, 1, testSizes, 0xc005, 0)
	got = ru.get(t, 16, 3*time.Second)
	matchAll(t, sent, got)
	for _, g := range got {
		if g.icrc != ICRCVerifiedAnyID || g.ipid == 0 || g.peerPort != 0xc005 {
			t.Fatalf("%+v", g)
		}
	}
	if s := u.Stats(); s.RxICRCAnyID != 16 || s.RxICRCErrors != 0 {
		t.Fatalf("stats %v", s)
	}
}

// A packet sent in ModeUDP, captured off lo, has IPv4 ID 0, DF, UDP
// destination port 4791, UDP checksum 0 and an ICRC that bth.ParseIP
// accepts.
func TestUDPOnTheWire(t *testing.T) {
	ipA, ipB := looptest.Get(t), looptest.Get(t)
	needRoot(t)
	src, dst := ipA, ipB
	capt := openCapture(t, dst)
	u := openPort(t, Config{Addr: src, Mode: ModeUDP, NoGSO: true})
	openPort(t, Config{Addr: dst, Mode: ModeUDP})
	sent := sendBatch(t, u, dst, 1, 42, []int{300}, 0, 0x02)
	frame := capt.next(t, func(b []byte) bool {
		return len(b) >= 28 && b[0]>>4 == 4 && netip.AddrFrom4([4]byte(b[12:16])) == src && b[9] == 17
	})
	if id := binary.BigEndian.Uint16(frame[4:]); id != 0 {
		t.Errorf("IPv4 ID %#x, want 0", id)
	}
	if ff := binary.BigEndian.Uint16(frame[6:]); ff != 0x4000 {
		t.Errorf("flags/fragment %#x, want DF only (0x4000)", ff)
	}
	if frame[1] != 0x02 {
		t.Errorf("TOS %#x, want 0x02", frame[1])
	}
	ip, err := bth.ParseIP(frame)
	if err != nil {
		t.Fatalf("bth.ParseIP: %v", err)
	}
	if ip.Envelope.DstPort != 4791 || ip.Envelope.SrcPort != 4791 || ip.Envelope.TTL != 64 {
		t.Errorf("envelope %+v", ip.Envelope)
	}
	if sum := binary.BigEndian.Uint16(frame[26:]); sum != 0 {
		t.Errorf("UDP checksum %#x, want 0 as rxe sends", sum)
	}
	if string(ip.Packet.Bytes()) != string(sent[0].roce) {
		t.Errorf("captured RoCE part differs from the one sent")
	}
}

// The same for ModePacket: IDs nonzero and incrementing, DF, chosen source
// port, UDP checksum 0, ICRC per bth.ParseIP.
func TestPacketOnTheWire(t *testing.T) {
	ipA, ipB := looptest.Get(t), looptest.Get(t)
	needRoot(t)
	src, dst := ipA, ipB
	capt := openCapture(t, dst)
	p := openPort(t, Config{Addr: src, Mode: ModePacket})
	openPort(t, Config{Addr: dst, Mode: ModeUDP})
	sendBatch(t, p, dst, 2, 42, []int{300}, 0xc0de, 0)
	fromSrc := func(b []byte) bool {
		return len(b) >= 28 && b[0]>>4 == 4 && netip.AddrFrom4([4]byte(b[12:16])) == src && b[9] == 17
	}
	f1 := capt.next(t, fromSrc)
	f2 := capt.next(t, func(b []byte) bool {
		return fromSrc(b) && binary.BigEndian.Uint16(b[4:]) != binary.BigEndian.Uint16(f1[4:])
	})
	id1, id2 := binary.BigEndian.Uint16(f1[4:]), binary.BigEndian.Uint16(f2[4:])
	if id1 == 0 || id2 != id1+1 {
		t.Errorf("IPv4 IDs %d, %d: want nonzero, incrementing", id1, id2)
	}
	for _, f := range [][]byte{f1, f2} {
		ip, err := bth.ParseIP(f)
		if err != nil {
			t.Fatalf("bth.ParseIP: %v", err)
		}
		if binary.BigEndian.Uint16(f[6:]) != 0x4000 || ip.Envelope.SrcPort != 0xc0de || ip.Envelope.TTL != 64 || binary.BigEndian.Uint16(f[26:]) != 0 {
			t.Errorf("header % x", f[:28])
		}
	}
}

// ModePacket drops and counts a packet with a bad ICRC, one with a bad IP
// header checksum, and garbage, all injected with a raw socket; the good
// packet after them arrives.
func TestPacketDropsBadICRC(t *testing.T) {
	ipA, ipB := looptest.Get(t), looptest.Get(t)
	needRoot(t)
	src, dst := ipA, ipB
	p := openPort(t, Config{Addr: dst, Mode: ModePacket})
	r := startReceiver(p)
	mk := func(psn uint32, id uint16) []byte {
		b := NewBuf()
		fillPacket(t, b, 9, psn, 64)
		env := bth.Envelope{Src: src, Dst: dst, SrcPort: 0xc001, DstPort: 4791, TTL: 64, ID: id}
		frame := b.Data[Headroom-28 : Headroom+b.N]
		env.Put(frame, b.N)
		sealICRC(frame[:28], frame[28:])
		return frame
	}
	bad := mk(1, 0x1234)
	bad[len(bad)-1] ^= 0x80 // ICRC
	short := mk(2, 0x1235)
	short = short[:28+10]
	binary.BigEndian.PutUint16(short[2:], uint16(len(short)))
	binary.BigEndian.PutUint16(short[24:], uint16(len(short)-20))
	wrongPort := mk(3, 0x1236)
	binary.BigEndian.PutUint16(wrongPort[22:], 4792) // the filter never lets it in
	rawInject(t, dst, bad, short, wrongPort, mk(4, 0x1237))
	got := r.get(t, 1, 2*time.Second)
	if bth.BTH(got[0].roce).PSN() != 4 || got[0].ipid != 0x1237 || got[0].peerPort != 0xc001 {
		t.Fatalf("got %+v", got[0])
	}
	s := waitStats(t, p, "drops", func(s Stats) bool { return s.RxICRCErrors == 1 && s.RxShort == 1 })
	if s.RxPackets != 1 || s.RxDropped() != 2 {
		t.Fatalf("stats %v", s)
	}
}

// rxe sends nonzero IPv4 IDs; a ModeUDP port accepts such a packet through
// bth's any-ID ICRC check and reports the ID.
func TestUDPAcceptsNonzeroID(t *testing.T) {
	ipA, ipB := looptest.Get(t), looptest.Get(t)
	needRoot(t)
	src, dst := ipA, ipB
	p := openPort(t, Config{Addr: dst, Mode: ModeUDP})
	r := startReceiver(p)
	b := NewBuf()
	fillPacket(t, b, 9, 5, 1000)
	env := bth.Envelope{Src: src, Dst: dst, SrcPort: 0xc121, DstPort: 4791, TTL: 64, ID: 0xbeef}
	frame := b.Data[Headroom-28 : Headroom+b.N]
	env.Put(frame, b.N)
	sealICRC(frame[:28], frame[28:])
	rawInject(t, dst, frame)
	got := r.get(t, 1, 2*time.Second)
	if got[0].icrc != ICRCVerifiedAnyID || got[0].ipid != 0xbeef {
		t.Fatalf("got %+v", got[0])
	}
}

func TestPacketCloseUnblocksRecv(t *testing.T) {
	ipA := looptest.Get(t)
	needRoot(t)
	eachWait(t, func(t *testing.T, waitInKernel bool) {
		testCloseUnblocks(t, openPort(t, Config{Addr: ipA, Mode: ModePacket, WaitInKernel: waitInKernel}))
	})
}

// rawInject sends whole IPv4 datagrams with a raw socket, as rxe would.
func rawInject(t *testing.T, dst netip.Addr, frames ...[]byte) {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_RAW)
	if err != nil {
		t.Fatalf("raw socket: %v", err)
	}
	defer unix.Close(fd)
	for _, f := range frames {
		if err := unix.Sendto(fd, f, 0, &unix.SockaddrInet4{Addr: dst.As4()}); err != nil {
			t.Fatalf("sendto: %v", err)
		}
	}
}

// capture reads IPv4 packets off lo with an AF_PACKET socket.
type capture struct{ fd int }

func openCapture(t *testing.T, dst netip.Addr) *capture {
	t.Helper()
	lo, err := netif.LoopbackIndex()
	if err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM, int(htons(unix.ETH_P_IP)))
	if err != nil {
		t.Fatalf("AF_PACKET socket: %v", err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	// Only packets to dst: the rest of lo's traffic (other tests) would
	// fill the socket's queue and push ours out.
	prog, err := packetFilter(dst, 4791, []int{lo})
	if err == nil {
		err = attachFilter(fd, prog)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_IP), Ifindex: lo}); err != nil {
		t.Fatal(err)
	}
	tv := unix.Timeval{Sec: 0, Usec: 200000}
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		t.Fatal(err)
	}
	return &capture{fd: fd}
}

// next returns the next packet that match accepts.
func (c *capture) next(t *testing.T, match func([]byte) bool) []byte {
	t.Helper()
	buf := make([]byte, 65536)
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		n, _, err := unix.Recvfrom(c.fd, buf, 0)
		if err != nil {
			continue
		}
		if match(buf[:n]) {
			return append([]byte(nil), buf[:n]...)
		}
	}
	t.Fatal("no matching packet captured")
	return nil
}
