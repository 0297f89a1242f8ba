//go:build linux

package ibudp

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/rnicd/rnicd/wire/bth"
)

// runPacket builds a sealed-later RC packet: a WRITE ONLY (with its RETH)
// or a SEND MIDDLE to qpn with psn and payload bytes derived from psn.
func runPacket(t testing.TB, op bth.Opcode, qpn, psn uint32, payload int) []byte {
	t.Helper()
	b := make([]byte, bth.PacketLen(op, payload))
	p, err := bth.Build(b, op, payload)
	if err != nil {
		t.Fatal(err)
	}
	p.BTH().Encode(&bth.BTHFields{Opcode: op, PadCount: bth.PadFor(payload), PKey: bth.DefaultPKey, DestQP: qpn, PSN: psn})
	if op.Has(bth.HdrRETH) {
		p.RETH().Encode(0x1000+uint64(psn)*64, 0x77, uint32(payload))
	}
	for i, pl := 0, p.Payload(); i < len(pl); i++ {
		pl[i] = byte(psn*13 + uint32(i))
	}
	return b
}

// runFrame lays out a run as the kernel hands it to an AF_PACKET socket
// before cutting it (udp4_ufo_fragment / __udp_gso_segment): the headers of
// the whole run, with the first packet's IPv4 ID, then the packets, each
// sealed under the headers it gets once cut: its own lengths and, for
// IPv4, the run's ID plus its index.
func runFrame(src, dst netip.Addr, id uint16, pkts [][]byte) []byte {
	env := bth.Envelope{Src: src, Dst: dst, SrcPort: 0xc001, DstPort: 4791, TTL: 64}
	total := 0
	for k, p := range pkts {
		env.ID = id + uint16(k)
		sealEnvelope(&env, p)
		total += len(p)
	}
	env.ID = id
	h := make([]byte, env.Len())
	env.Put(h, total)
	for _, p := range pkts {
		h = append(h, p...)
	}
	return h
}

// checkFrame hands f to p.check as recvmmsg would: the part that fits in
// the Buf there, the rest in the slot's overflow room.
func checkFrame(p *packetPort, f []byte) (bool, tally) {
	b := NewBuf()
	n := copy(b.Data[Headroom-p.hl:], f)
	copy(p.runs.over[0], f[n:])
	var tl tally
	return p.check(b, rxInfo{n: len(f)}, &tl), tl
}

// ModePacket cuts a run it sees whole into its packets whatever their
// size: full-MTU packets, 64-byte WRITEs, the smallest packets there are,
// packets of several QPs and opcodes that share a length, a shorter last
// one; each byte for byte with its own IPv4 ID, and a corrupted one dropped
// and counted without taking the others with it.
func TestPacketCutsRuns(t *testing.T) {
	many := func(k int, op bth.Opcode, payload int) [][]byte {
		var out [][]byte
		for i := range k {
			out = append(out, runPacket(t, op, 0x11, uint32(100+i), payload))
		}
		return out
	}
	mixed := func() [][]byte { // 96 bytes each: WRITE ONLY of 64, SEND MIDDLE of 80
		var out [][]byte
		for i := range 30 {
			if i%3 == 0 {
				out = append(out, runPacket(t, bth.RCSendMiddle, 0x200+uint32(i), uint32(i), 80))
			} else {
				out = append(out, runPacket(t, bth.RCRDMAWriteOnly, 0x300+uint32(i), uint32(i), 64))
			}
		}
		return out
	}
	cases := []struct {
		name    string
		pkts    [][]byte
		corrupt int // index of a packet to corrupt, -1 for none
	}{
		{"full MTU, shorter last", append(many(10, bth.RCSendMiddle, 1024), runPacket(t, bth.RCSendMiddle, 0x11, 110, 300)), -1},
		{"64-byte WRITEs", many(48, bth.RCRDMAWriteOnly, 64), -1},
		{"64-byte WRITEs, one corrupted", many(48, bth.RCRDMAWriteOnly, 64), 17},
		{"first corrupted", many(8, bth.RCRDMAWriteOnly, 64), 0},
		{"smallest packets", many(64, bth.RCSendMiddle, 1), -1},
		{"two packets", many(2, bth.RCSendMiddle, 2), -1},
		{"several QPs and opcodes", mixed(), -1},
		{"odd size, shorter last", append(many(20, bth.RCSendMiddle, 37), runPacket(t, bth.RCSendMiddle, 0x11, 120, 3)), -1},
		{"largest run", many(maxRxGSOSegs, bth.RCRDMAWriteOnly, 100), -1},
	}
	for _, c := range cases {
		for _, v6 := range []bool{false, true} {
			src, dst, hl := addr("198.18.0.1"), addr("198.18.0.2"), 28
			if v6 {
				src, dst, hl = addr("2001:db8::1"), addr("2001:db8::2"), 48
			}
			p := &packetPort{sockPort: sockPort{cfg: Config{Port: 4791}}, local: dst, v6: v6, hl: hl, runs: newRuns(1)}
			f := runFrame(src, dst, 500, c.pkts)
			var want [][]byte
			for i, pk := range c.pkts {
				if i == c.corrupt {
					f[hl+i*len(c.pkts[0])+bth.BTHLen] ^= 0x40 // after sealing
					continue
				}
				want = append(want, pk)
			}
			if ok, tl := checkFrame(p, f); ok || tl[cRxICRCErrors] != uint64(len(c.pkts)-len(want)) {
				t.Errorf("%s, v6 %v: check %v, %d ICRC errors, want the run taken apart and %d", c.name, v6, ok, tl[cRxICRCErrors], len(c.pkts)-len(want))
				continue
			}
			bufs := make([]*Buf, maxRxGSOSegs+1)
			for i := range bufs {
				bufs[i] = NewBuf()
			}
			n := p.runs.deliver(bufs, nil)
			if n != len(want) {
				t.Errorf("%s, v6 %v: %d packets, want %d", c.name, v6, n, len(want))
				continue
			}
			for i, b := range bufs[:n] {
				k := uint16(bth.BTH(b.RoCE()).PSN() - bth.BTH(c.pkts[0]).PSN())
				if c.name == "several QPs and opcodes" {
					k = uint16(bth.BTH(b.RoCE()).PSN())
				}
				wantID := uint16(500) + k
				if v6 {
					wantID = 0
				}
				if !bytes.Equal(b.RoCE(), want[i]) || b.IPID != wantID || b.ICRC != ICRCVerified || b.Peer != src {
					t.Errorf("%s, v6 %v: packet %d: ID %d (want %d), ICRC %v, peer %v, bytes equal %v",
						c.name, v6, i, b.IPID, wantID, b.ICRC, b.Peer, bytes.Equal(b.RoCE(), want[i]))
				}
			}
		}
	}
}

// A frame that is not a run stays a single bad packet: a packet with a bad
// ICRC, and a frame of well-formed headers at every cut whose first packet's
// ICRC fails under every size.
func TestPacketRunNotTaken(t *testing.T) {
	src, dst := addr("198.18.0.1"), addr("198.18.0.2")
	p := &packetPort{sockPort: sockPort{cfg: Config{Port: 4791}}, local: dst, hl: 28, runs: newRuns(1)}
	one := runFrame(src, dst, 1, [][]byte{runPacket(t, bth.RCRDMAWriteOnly, 1, 1, 64)})
	one[len(one)-1] ^= 1
	zeros := runFrame(src, dst, 1, [][]byte{make([]byte, 4000)}) // RC SEND FIRST headers at every cut
	clear(zeros[len(zeros)-bth.ICRCLen:])
	for name, f := range map[string][]byte{"bad ICRC": one, "zeros": zeros} {
		if ok, tl := checkFrame(p, f); ok || tl[cRxICRCErrors] != 1 || p.runs.waiting() {
			t.Errorf("%s: check %v, counters %v, run queued %v", name, ok, tl, p.runs.waiting())
		}
	}
}

// The cutter never panics, whatever follows a frame's headers; a run built
// as the kernel builds it comes out whole, byte for byte, and whatever it
// takes from a forged frame is a packet of that frame, at a cut, whose
// ICRC is right under the headers it would have had by bth's own code.
func FuzzPacketRuns(f *testing.F) {
	f.Add(uint8(48), uint16(64), uint8(0), []byte{})
	f.Add(uint8(2), uint16(4096), uint8(1), []byte{})
	f.Add(uint8(0), uint16(0), uint8(0), make([]byte, 3000))
	f.Add(uint8(0), uint16(0), uint8(0), bytes.Repeat(runPacket(f, bth.RCRDMAWriteOnly, 1, 1, 8), 20))
	f.Fuzz(func(t *testing.T, count uint8, payload uint16, corrupt uint8, forged []byte) {
		src, dst := addr("198.18.0.1"), addr("198.18.0.2")
		p := &packetPort{sockPort: sockPort{cfg: Config{Port: 4791}}, local: dst, hl: 28, runs: newRuns(1)}
		var frame []byte
		var pkts [][]byte
		if count >= 2 {
			n, size := min(int(count), maxRxGSOSegs), int(payload)%4097
			if n*bth.PacketLen(bth.RCSendMiddle, size) > maxFrame-28 {
				return
			}
			for i := range n {
				pkts = append(pkts, runPacket(t, bth.RCSendMiddle, 5, uint32(i), size))
			}
			frame = runFrame(src, dst, 9, pkts)
			if int(corrupt) < n {
				frame[28+int(corrupt)*len(pkts[0])+3] ^= 0x10 // the P_Key: still well formed
				pkts = append(pkts[:corrupt:corrupt], pkts[corrupt+1:]...)
				if corrupt <= 1 && len(pkts) == 1 {
					pkts = nil // the cut has no good first or second packet to go by
				}
			}
		} else {
			if len(forged) > maxFrame-28 {
				return
			}
			env := bth.Envelope{Src: src, Dst: dst, SrcPort: 0xc001, DstPort: 4791, TTL: 64, ID: 9}
			frame = make([]byte, 28, 28+len(forged))
			env.Put(frame, len(forged))
			frame = append(frame, forged...)
		}
		if len(frame) <= 28 {
			return
		}
		ok, _ := checkFrame(p, frame)
		bufs := make([]*Buf, maxRxGSOSegs+1)
		for i := range bufs {
			bufs[i] = NewBuf()
		}
		n := p.runs.deliver(bufs, nil)
		if ok && n > 0 {
			t.Fatal("a frame taken as one packet also queued a run")
		}
		if pkts != nil {
			if n != len(pkts) {
				t.Fatalf("run of %d cut into %d", len(pkts), n)
			}
			for i, b := range bufs[:n] {
				if !bytes.Equal(b.RoCE(), pkts[i]) {
					t.Fatalf("packet %d differs", i)
				}
			}
			return
		}
		roce := frame[28:]
		for _, b := range bufs[:n] {
			off := bytes.Index(roce, b.RoCE())
			if off < 0 || b.N == 0 {
				t.Fatal("a packet that is not part of the frame")
			}
			k := uint16(b.IPID - 9)
			env := bth.Envelope{Src: src, Dst: dst, SrcPort: 0xc001, DstPort: 4791, TTL: 64, ID: 9 + k}
			var h [bth.MaxEnvelopeLen]byte
			crc, err := bth.ComputeICRC(h[:env.Put(h[:], b.N)], b.RoCE()[:b.N-bth.ICRCLen])
			if err != nil || crc != binary.LittleEndian.Uint32(b.RoCE()[b.N-bth.ICRCLen:]) {
				t.Fatalf("packet %d of a forged run: ICRC wrong by bth (%v)", k, err)
			}
		}
	})
}
