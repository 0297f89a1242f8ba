//go:build linux

package ibudp

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/rnicd/rnicd/wire/bth"
)

// frame builds an IPv4 (or IPv6) datagram carrying a sealed RoCE packet
// from src to dst, with opts bytes of IPv4 options.
func frame(t testing.TB, src, dst netip.Addr, id uint16, payload, opts int) []byte {
	b := NewBuf()
	fillPacket(t, b, 3, 9, payload)
	env := bth.Envelope{Src: src, Dst: dst, SrcPort: 0xc000, DstPort: 4791, TTL: 64, ID: id}
	h := make([]byte, env.Len()+opts)
	env.Put(h, b.N)
	if opts > 0 { // move the UDP header back and put NOP options in front of it
		copy(h[20+opts:], h[20:28])
		for i := 20; i < 20+opts; i++ {
			h[i] = 1
		}
		h[0] = 0x40 | byte((20+opts)/4)
		binary.BigEndian.PutUint16(h[2:], uint16(len(h)+b.N))
		h[10], h[11] = 0, 0
		binary.BigEndian.PutUint16(h[10:], ipChecksum(h[:20+opts]))
	}
	sealICRC(h, b.RoCE())
	return append(h, b.RoCE()...)
}

// An IPv4 header with options puts the RoCE part past Headroom; check moves
// it back and still verifies the ICRC over the real header.
func TestPacketCheckIPv4Options(t *testing.T) {
	p := &packetPort{sockPort: sockPort{cfg: Config{Port: 4791}}, local: addr("127.0.0.2"), hl: 28, runs: newRuns(1)}
	for _, opts := range []int{0, 4, 12, 40} {
		f := frame(t, addr("127.0.0.1"), p.local, 77, 100, opts)
		b := NewBuf()
		n := copy(b.Data[Headroom-p.hl:], f)
		var tl tally
		if !p.check(b, rxInfo{n: n}, &tl) {
			t.Fatalf("opts %d: dropped, %v", opts, tl)
		}
		want := f[20+opts+8:]
		if !bytes.Equal(b.RoCE(), want) || b.IPID != 77 || b.Peer != addr("127.0.0.1") {
			t.Fatalf("opts %d: RoCE part or metadata wrong", opts)
		}
	}
}

func TestParseIPHeaderRejects(t *testing.T) {
	local := addr("127.0.0.2")
	good := frame(t, addr("127.0.0.1"), local, 1, 10, 0)
	if _, ok := parseIPHeader(good, local, 4791); !ok {
		t.Fatal("good frame rejected")
	}
	for name, mod := range map[string]func([]byte){
		"checksum":     func(b []byte) { b[10] ^= 1 },
		"fragment":     func(b []byte) { b[6] |= 0x20; fixSum(b) },
		"offset":       func(b []byte) { b[7] = 1; fixSum(b) },
		"protocol":     func(b []byte) { b[9] = 6; fixSum(b) },
		"destination":  func(b []byte) { b[19] = 3; fixSum(b) },
		"port":         func(b []byte) { b[23]++ },
		"udp length":   func(b []byte) { b[25]++ },
		"total length": func(b []byte) { b[3] += 100; fixSum(b) },
		"ihl":          func(b []byte) { b[0] = 0x44; fixSum(b) },
		"version":      func(b []byte) { b[0] = 0x65 },
	} {
		b := bytes.Clone(good)
		mod(b)
		if _, ok := parseIPHeader(b, local, 4791); ok {
			t.Errorf("%s: accepted", name)
		}
	}
	// Link padding after the datagram is ignored.
	if h, ok := parseIPHeader(append(bytes.Clone(good), 0, 0), local, 4791); !ok || h.end != len(good) {
		t.Error("padded frame rejected")
	}
}

func fixSum(b []byte) {
	b[10], b[11] = 0, 0
	binary.BigEndian.PutUint16(b[10:], ipChecksum(b[:20]))
}

// The receive check of ModePacket never panics, and what it accepts is a
// RoCEv2 packet whose ICRC bth.ParseIP agrees with.
func FuzzPacketCheck(f *testing.F) {
	local := addr("127.0.0.2")
	f.Add(frame(f, addr("127.0.0.1"), local, 5, 64, 0))
	f.Add(frame(f, addr("127.0.0.1"), local, 0, 0, 8))
	f.Add(frame(f, addr("127.0.0.1"), local, 0xffff, 4096, 0))
	f.Add([]byte{0x45})
	f.Fuzz(func(t *testing.T, data []byte) {
		p := &packetPort{sockPort: sockPort{cfg: Config{Port: 4791}}, local: local, hl: 28, runs: newRuns(1)}
		b := NewBuf()
		n := copy(b.Data[Headroom-p.hl:], data)
		var tl tally
		if !p.check(b, rxInfo{n: n}, &tl) {
			return
		}
		ip, err := bth.ParseIP(data[:n])
		if err != nil {
			t.Fatalf("accepted, but bth.ParseIP says %v", err)
		}
		if !bytes.Equal(ip.Packet.Bytes(), b.RoCE()) || b.ICRC != ICRCVerified {
			t.Fatal("accepted RoCE part differs from bth.ParseIP's")
		}
	})
}

// The same over IPv6: never a panic, and what it accepts is a RoCEv2
// packet bth.ParseIP agrees with, whose UDP checksum is 0 (none, as rxe
// sends) or right by RFC 1071's word-by-word sum.
func FuzzPacketCheck6(f *testing.F) {
	src, local := addr("2001:db8::1"), addr("2001:db8::2")
	good := frame(f, src, local, 0, 64, 0)
	f.Add(good, false)
	f.Add(good, true)
	f.Add(frame(f, src, local, 0, 4096, 0), true)
	f.Add([]byte{0x60}, false)
	f.Fuzz(func(t *testing.T, data []byte, sum bool) {
		if sum && len(data) >= 48 && len(data) <= MaxRoCELen+48 {
			data = bytes.Clone(data)
			data[46], data[47] = 0, 0
			putUDP6Checksum(data[:48], data[48:])
		}
		p := &packetPort{sockPort: sockPort{cfg: Config{Port: 4791}}, local: local, v6: true, hl: 48, runs: newRuns(1)}
		b := NewBuf()
		n := copy(b.Data[Headroom-p.hl:], data)
		var tl tally
		if !p.check(b, rxInfo{n: n}, &tl) {
			return
		}
		ip, err := bth.ParseIP(data[:n])
		if err != nil {
			t.Fatalf("accepted, but bth.ParseIP says %v", err)
		}
		if !bytes.Equal(ip.Packet.Bytes(), b.RoCE()) || b.ICRC != ICRCVerified {
			t.Fatal("accepted RoCE part differs from bth.ParseIP's")
		}
		udp := data[40 : 40+8+b.N]
		if binary.BigEndian.Uint16(udp[6:]) != 0 {
			pseudo := append(append(bytes.Clone(data[8:40]), 0, 0, byte(len(udp)>>8), byte(len(udp)), 0, 0, 0, 17), udp...)
			if refOnesSum(append(pseudo, 0)) != 0xffff {
				t.Fatal("accepted a wrong UDP checksum")
			}
		}
	})
}

// The receive check of ModeUDP never panics, and accepts only packets whose
// ICRC matches the envelope of an ID-0 datagram.
func FuzzUDPCheck(f *testing.F) {
	good := NewBuf()
	fillPacket(f, good, 1, 2, 40)
	env := bth.Envelope{Src: addr("127.0.0.1"), Dst: addr("127.0.0.2"), SrcPort: 4791, DstPort: 4791, TTL: 64}
	sealEnvelope(&env, good.RoCE())
	name := make([]byte, nameLen)
	putSockaddr(name, addr("127.0.0.1"), 4791, 0)
	f.Add(good.RoCE(), name[:sizeofSockaddrInet4], []byte{})
	f.Add([]byte{0x11}, []byte{2, 0}, []byte{16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 2})
	f.Fuzz(func(t *testing.T, roce, name, ctrl []byte) {
		u := &udpPort{sockPort: sockPort{cfg: Config{Addr: addr("127.0.0.2"), Port: 4791}}}
		b := NewBuf()
		n := copy(b.Data[Headroom:], roce)
		var tl tally
		if !u.check(b, rxInfo{n: len(roce), name: name, ctrl: parseRxCtrl(ctrl)}, &tl) {
			return
		}
		if n != len(roce) || b.N != n {
			t.Fatalf("accepted %d bytes of %d", b.N, len(roce))
		}
		p, err := bth.Parse(b.RoCE())
		if err != nil {
			t.Fatal(err)
		}
		e := bth.Envelope{Src: b.Peer, Dst: u.cfg.Addr, SrcPort: b.PeerPort, DstPort: 4791}
		if b.ICRC == ICRCVerified && !p.CheckICRC(&e) {
			t.Fatal("accepted with a bad ICRC")
		}
	})
}

// Control messages: never a panic, and what putTOSCmsg writes reads back.
func FuzzParseRxCtrl(f *testing.F) {
	var b [64]byte
	n := putTOSCmsg(b[:], false, 0x02)
	f.Add(b[:n])
	n = putTOSCmsg(b[:], true, 0xb8)
	f.Add(b[:n])
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		_ = parseRxCtrl(data)
		if len(data) == 0 {
			return
		}
		var buf [64]byte
		for _, v6 := range []bool{false, true} {
			n := putTOSCmsg(buf[:], v6, data[0])
			if c := parseRxCtrl(buf[:n]); !v6 && (!c.haveTOS || c.tos != data[0]) {
				t.Fatalf("IP_TOS %#x read back as %+v", data[0], c)
			} else if v6 && (!c.haveTOS || c.tos != data[0]) {
				t.Fatalf("IPV6_TCLASS %#x read back as %+v", data[0], c)
			}
		}
	})
}

// Socket addresses: never a panic, and what putSockaddr writes reads back.
func FuzzParseSockaddr(f *testing.F) {
	f.Add([]byte{2, 0, 0x12, 0xb7, 127, 0, 0, 1}, uint16(4791))
	f.Add(make([]byte, 28), uint16(0))
	f.Fuzz(func(t *testing.T, data []byte, port uint16) {
		parseSockaddr(data)
		parsePktType(data)
		var a netip.Addr
		if len(data) >= 16 {
			a = netip.AddrFrom16([16]byte(data[:16]))
		} else if len(data) >= 4 {
			a = netip.AddrFrom4([4]byte(data[:4]))
		} else {
			return
		}
		var b [nameLen]byte
		n := putSockaddr(b[:], a, port, 0)
		got, gotPort, ok := parseSockaddr(b[:n])
		if !ok || got != a || gotPort != port {
			t.Fatalf("%v:%d read back as %v:%d %v", a, port, got, gotPort, ok)
		}
	})
}

// The port's allocation-free ICRC equals bth.ComputeICRC, for IPv4 (with
// and without options) and IPv6 headers.
func FuzzICRCMatchesBTH(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, uint16(1), uint8(0), false, uint8(0))
	f.Add(make([]byte, 300), uint16(0xffff), uint8(0xff), true, uint8(0))
	f.Add(make([]byte, 40), uint16(7), uint8(3), false, uint8(10))
	f.Fuzz(func(t *testing.T, roce []byte, id uint16, tos uint8, v6 bool, opts uint8) {
		if len(roce) < minRoCELen || len(roce) > MaxRoCELen {
			return
		}
		e := bth.Envelope{Src: addr("198.18.0.2"), Dst: addr("198.18.0.3"), SrcPort: id ^ 0xc000, DstPort: 4791, TOS: tos, TTL: tos, ID: id}
		if v6 {
			e.Src, e.Dst, e.FlowLabel = addr("fe80::1"), addr("2001:db8::2"), uint32(id)*17
		}
		var h [bth.MaxEnvelopeLen]byte
		hdr := h[:e.Put(h[:], len(roce))]
		if !v6 && opts%11 != 0 { // IPv4 options: 4..40 bytes
			o := int(opts%11) * 4
			hdr = h[:28+o]
			copy(hdr[20+o:], h[20:28])
			for i := 20; i < 20+o; i++ {
				hdr[i] = byte(i)
			}
			hdr[0] = 0x40 | byte((20+o)/4)
		}
		want, err := bth.ComputeICRC(hdr, roce[:len(roce)-bth.ICRCLen])
		if err != nil {
			t.Fatal(err)
		}
		var c icrc
		if got := c.compute(hdr, roce); got != want {
			t.Fatalf("icrc %#x, bth %#x", got, want)
		}
	})
}
