package bth

import (
	"bytes"
	"errors"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// fuzzSeeds adds one golden datagram of every opcode and size class, and
// hand-made packets of every opcode, to a fuzz corpus; roce says whether
// the corpus wants RoCE parts or IP datagrams.
func fuzzSeeds(f *testing.F, roce bool) {
	seen := map[[2]int]bool{}
	for _, frames := range goldenFrames(f) {
		for _, fr := range frames {
			key := [2]int{int(fr.ip[28]), len(fr.ip)}
			if seen[key] {
				continue
			}
			seen[key] = true
			if roce {
				f.Add(fr.ip[28:])
			} else {
				f.Add(fr.ip)
			}
		}
	}
	for i := range opcodeCount {
		op := Opcode(i)
		if !op.Valid() {
			continue
		}
		n := 0
		if op.Is(FlagPayload) {
			n = 3
		}
		b := mkPacket(f, &testEnv4, op, n)
		if roce {
			f.Add(b)
		} else {
			f.Add(datagram(&testEnv4, b))
			f.Add(datagram(&testEnv6, mkPacket(f, &testEnv6, op, n)))
		}
	}
}

// checkDecodeError asserts that err is a *DecodeError with a named reason.
func checkDecodeError(t *testing.T, err error) {
	var de *DecodeError
	if !errors.As(err, &de) || de.Reason == ReasonNone || de.Reason >= numReasons {
		t.Fatalf("error %v (%T)", err, err)
	}
	if err.Error() == "" {
		t.Fatal("empty message")
	}
}

// reservedMask returns a copy of b, a packet Parse accepted, with the bits
// that serializing writes as zero cleared: BTH reserved bits, the DETH
// reserved byte, CNP's reserved bytes and the pad.
func reservedMask(p Packet) []byte {
	b := bytes.Clone(p.Bytes())
	b[4] &= 0xc0
	b[8] &= 0x80
	if off := p.Opcode().Offset(HdrDETH); off >= 0 {
		b[off+4] = 0
	}
	if off := p.Opcode().Offset(HdrCNP); off >= 0 {
		clear(b[off : off+CNPLen])
	}
	if off := p.Opcode().Offset(HdrXRCETH); off >= 0 {
		b[off] = 0
	}
	clear(b[len(b)-ICRCLen-p.BTH().PadCount() : len(b)-ICRCLen])
	return b
}

// Parse never panics; what it accepts has consistent lengths and
// serializes back through the gopacket layer to the same bytes (reserved
// bits aside); what it refuses gets a named reason.
func FuzzParse(f *testing.F) {
	fuzzSeeds(f, true)
	f.Add([]byte{})
	f.Add(make([]byte, 16))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := Parse(b)
		if err != nil {
			checkDecodeError(t, err)
			return
		}
		op := p.Opcode()
		if op.HdrLen()+p.PayloadLen()+p.BTH().PadCount()+ICRCLen != len(b) || p.PayloadLen() < 0 {
			t.Fatalf("%v: lengths do not add up", op)
		}
		if !op.Is(FlagPayload) && p.PayloadLen() != 0 {
			t.Fatalf("%v: payload", op)
		}
		var r RoCE
		if err := r.DecodeFromBytes(b, gopacket.NilDecodeFeedback); err != nil {
			t.Fatalf("layer refuses what Parse accepts: %v", err)
		}
		buf := gopacket.NewSerializeBuffer()
		if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{}, &r, gopacket.Payload(r.Payload)); err != nil {
			t.Fatal(err)
		}
		if want := reservedMask(p); !bytes.Equal(buf.Bytes(), want) {
			t.Fatalf("serialized\n% x\nwant\n% x", buf.Bytes(), want)
		}
	})
}

// ParseIP never panics; what it accepts has a matching ICRC, and with its
// ID forgotten CheckICRCAnyID finds it again.
func FuzzParseIP(f *testing.F) {
	fuzzSeeds(f, false)
	f.Add([]byte{0x45})
	f.Add([]byte{0x60})
	f.Fuzz(func(t *testing.T, b []byte) {
		ip, err := ParseIP(b)
		if err != nil {
			checkDecodeError(t, err)
			return
		}
		p, e := ip.Packet, ip.Envelope
		crc, err := ComputeICRC(ip.Hdr, p.Bytes()[:p.Len()-ICRCLen])
		if err != nil || crc != p.ICRC() {
			t.Fatalf("accepted with ICRC %#x, computed %#x (%v)", p.ICRC(), crc, err)
		}
		if !e.IsIPv4() {
			return
		}
		want := e.ID
		e.ID = 0
		// Envelope.Put writes no IPv4 options, so the check only holds
		// for 20-byte headers.
		if len(ip.Hdr) == IPv4HeaderLen+UDPHeaderLen {
			if id, ok := p.CheckICRCAnyID(&e); !ok || id != want {
				t.Fatalf("CheckICRCAnyID %#x %v, want %#x", id, ok, want)
			}
		}
	})
}

// The gopacket decoders never panic on any UDP payload or whole frame, and
// what the RoCE layer decodes serializes back to itself.
func FuzzLayer(f *testing.F) {
	for _, frames := range goldenFrames(f) {
		f.Add(frames[0].frame)
	}
	f.Add(make([]byte, 14))
	f.Fuzz(func(t *testing.T, b []byte) {
		pkt := gopacket.NewPacket(b, layers.LayerTypeEthernet, gopacket.Default)
		if r, ok := pkt.Layer(LayerTypeRoCE).(*RoCE); ok {
			_ = VerifyICRC(pkt)
			buf := gopacket.NewSerializeBuffer()
			if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{}, r, gopacket.Payload(r.Payload)); err != nil {
				t.Fatal(err)
			}
			var again RoCE
			if err := again.DecodeFromBytes(buf.Bytes(), gopacket.NilDecodeFeedback); err != nil {
				t.Fatal(err)
			}
			if again.BTH != r.BTH || again.RETH != r.RETH || again.AETH != r.AETH || again.DETH != r.DETH ||
				again.AtomicETH != r.AtomicETH || again.AtomicAckETH != r.AtomicAckETH ||
				again.ImmDt != r.ImmDt || again.IETH != r.IETH || again.ICRC != r.ICRC ||
				!bytes.Equal(again.Payload, r.Payload) {
				t.Fatalf("round trip %+v -> %+v", r, again)
			}
		}
		// The same bytes straight into the RoCE decoder.
		pkt = gopacket.NewPacket(b, LayerTypeRoCE, gopacket.Default)
		if el := pkt.ErrorLayer(); el != nil {
			checkDecodeError(t, el.Error())
		}
	})
}

// For any packet bytes, envelope ports and ID, a packet sealed with that ID
// is found to carry it.
func FuzzCheckICRCAnyID(f *testing.F) {
	f.Add(mkPacket(f, nil, RCSendOnly, 100), uint16(0x1234), uint16(0xc000), uint8(0))
	f.Add(mkPacket(f, nil, RCAcknowledge, 0), uint16(0), uint16(4791), uint8(3))
	f.Fuzz(func(t *testing.T, b []byte, id, sport uint16, tos uint8) {
		p, err := Parse(b)
		if err != nil {
			return
		}
		env := testEnv4
		env.ID, env.SrcPort, env.TOS = id, sport, tos
		p.Seal(&env)
		env.ID = ^id
		if got, ok := p.CheckICRCAnyID(&env); !ok || got != id {
			t.Fatalf("got %#x %v, want %#x", got, ok, id)
		}
	})
}

// The XRCETH decoder reads 24 bits whatever the four bytes hold, and
// what it reads encodes back to the same bytes but the reserved one.
func FuzzXRCETH(f *testing.F) {
	f.Add([]byte{0, 0, 0, 1})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < XRCETHLen {
			return
		}
		x := XRCETH(b[:XRCETHLen])
		n := x.SRQN()
		if n > SRQNMask {
			t.Fatalf("SRQN %#x has more than 24 bits", n)
		}
		out := make(XRCETH, XRCETHLen)
		out.Encode(n)
		if out[0] != 0 || !bytes.Equal(out[1:], b[1:XRCETHLen]) {
			t.Fatalf("% x encodes back as % x", b[:XRCETHLen], out)
		}
	})
}
