package bth

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"testing"
)

// opWant is how many packets of an opcode a capture holds and their payload
// length (-1: it varies).
type opWant struct{ n, payload int }

// goldenOps is what each capture must decode to, worked out from the tool
// and flags that made it (golden/README.md) and rxe's behaviour: at path
// MTU 1024 a 3000-byte message is FIRST 1024, MIDDLE 1024, LAST 952; at
// 4096 a 10000-byte one is 4096, 4096, 1808; the responder ACKs each
// message (rxe sets AckReq on the last packet). The perftest runs do 8
// iterations, the latency tests 8 each way.
var goldenOps = map[string]map[Opcode]opWant{
	"write_bw": {
		RCRDMAWriteFirst: {8, 1024}, RCRDMAWriteMiddle: {8, 1024}, RCRDMAWriteLast: {8, 952},
		RCAcknowledge: {8, 0},
	},
	"write_bw_mtu4096": {
		RCRDMAWriteFirst: {8, 4096}, RCRDMAWriteMiddle: {8, 4096}, RCRDMAWriteLast: {8, 1808},
		RCAcknowledge: {8, 0},
	},
	"send_bw": {
		RCSendFirst: {8, 1024}, RCSendMiddle: {8, 1024}, RCSendLast: {8, 952},
		RCAcknowledge: {8, 0},
	},
	"send_bw_uc": { // UC: the same segmentation and no ACKs
		UCSendFirst: {8, 1024}, UCSendMiddle: {8, 1024}, UCSendLast: {8, 952},
	},
	"send_bw_ud": {UDSendOnly: {8, 512}},
	"read_bw": {
		RCRDMAReadRequest:       {8, 0},
		RCRDMAReadResponseFirst: {8, 1024}, RCRDMAReadResponseMiddle: {8, 1024}, RCRDMAReadResponseLast: {8, 952},
	},
	"read_lat":  {RCRDMAReadRequest: {8, 0}, RCRDMAReadResponseOnly: {8, 64}},
	"send_lat":  {RCSendOnly: {16, 64}, RCAcknowledge: {16, 0}},
	"write_lat": {RCRDMAWriteOnly: {16, 64}, RCAcknowledge: {16, 0}},
	// 2000 bytes, 4 round trips: 8 two-packet messages.
	"rc_pingpong": {RCSendFirst: {8, 1024}, RCSendLast: {8, 976}, RCAcknowledge: {8, 0}},
	"ud_pingpong": {UDSendOnly: {8, 512}},
	"atomic_cas":  {RCCompareSwap: {8, 0}, RCAtomicAcknowledge: {8, 0}},
	"atomic_faa":  {RCFetchAdd: {8, 0}, RCAtomicAcknowledge: {8, 0}},
	// rdma_cm: five 256-byte CM MADs on QP1, then rping's 16-byte
	// SENDs of buffer addresses, a 64-byte READ and WRITE per round (-C 3).
	"rping": {
		UDSendOnly: {5, 256}, RCSendOnly: {12, 16}, RCRDMAReadRequest: {3, 0},
		RCRDMAReadResponseOnly: {3, 64}, RCRDMAWriteOnly: {3, 64}, RCAcknowledge: {15, 0},
	},
	"write_bw_rdmacm": {
		UDSendOnly:       {10, 256},
		RCRDMAWriteFirst: {8, 1024}, RCRDMAWriteMiddle: {8, 1024}, RCRDMAWriteLast: {8, 952},
		RCSendOnly: {32, -1}, RCAcknowledge: {40, 0},
	},
	// 8192-byte messages at MTU 1024: FIRST, six MIDDLEs, LAST, resent
	// after losses, so only the sizes are fixed.
	"write_bw_loss_trim": {
		RCRDMAWriteFirst: {-1, 1024}, RCRDMAWriteMiddle: {-1, 1024}, RCRDMAWriteLast: {-1, 1024},
		RCAcknowledge: {-1, 0},
	},
	"read_bw_loss_trim": {
		RCRDMAReadRequest:       {-1, 0},
		RCRDMAReadResponseFirst: {-1, 1024}, RCRDMAReadResponseMiddle: {-1, 1024}, RCRDMAReadResponseLast: {-1, 1024},
	},
}

// Every RoCE packet of every capture decodes to the opcodes and payloads
// expected of it, with headers whose values the tools explain, and its
// ICRC verifies.
func TestGoldenDecode(t *testing.T) {
	for name, frames := range goldenFrames(t) {
		want := goldenOps[name]
		if want == nil {
			t.Fatalf("%s: no expectations", name)
		}
		got := map[Opcode]int{}
		var naks, partialReads int
		for _, f := range frames {
			ip, err := ParseIP(f.ip)
			if err != nil {
				t.Errorf("%v: %v", f, err)
				continue
			}
			p := ip.Packet
			op := p.Opcode()
			got[op]++
			w, ok := want[op]
			if !ok {
				t.Errorf("%v: unexpected %v", f, op)
				continue
			}
			if w.payload >= 0 && p.PayloadLen() != w.payload {
				t.Errorf("%v: %v payload %d, want %d", f, op, p.PayloadLen(), w.payload)
			}
			checkGoldenHeaders(t, f, ip, &naks, &partialReads)
		}
		for op, w := range want {
			if w.n >= 0 && got[op] != w.n {
				t.Errorf("%s: %d %v, want %d", name, got[op], op, w.n)
			} else if got[op] == 0 {
				t.Errorf("%s: no %v", name, op)
			}
		}
		switch name {
		case "write_bw_loss_trim":
			if naks == 0 {
				t.Errorf("%s: no NAK_PSN_SEQ_ERR", name)
			}
		case "read_bw_loss_trim":
			if partialReads == 0 {
				t.Errorf("%s: no READ retried from the middle of a response", name)
			}
		default:
			if naks != 0 || partialReads != 0 {
				t.Errorf("%s: %d NAKs and %d partial READs in a loss-free capture", name, naks, partialReads)
			}
		}
	}
}

// checkGoldenHeaders checks what the golden README and the tools' flags fix
// about every packet.
func checkGoldenHeaders(t *testing.T, f capFrame, ip IPPacket, naks, partialReads *int) {
	t.Helper()
	p, e := ip.Packet, ip.Envelope
	h := p.BTH()
	op := p.Opcode()
	if !e.IsIPv4() || e.DstPort != UDPPort || e.TTL != 64 || e.TOS != 0 || e.ID == 0 {
		t.Errorf("%v: envelope %+v", f, e)
	}
	if binary.BigEndian.Uint16(f.ip[6:]) != 0x4000 || binary.BigEndian.Uint16(f.ip[26:]) != 0 {
		t.Errorf("%v: want DF and UDP checksum 0: % x", f, f.ip[:28])
	}
	if h.PKey() != DefaultPKey || h.TVer() != 0 || h.MigReq() || h.FECN() || h.BECN() {
		t.Errorf("%v: BTH % x", f, h)
	}
	if pad := h.PadCount(); pad != PadFor(p.PayloadLen()) {
		t.Errorf("%v: pad %d for a %d-byte payload", f, pad, p.PayloadLen())
	}
	switch {
	case op.Has(HdrDETH):
		// CM MADs go to QP1 from QP1 under the well-known GSI Q_Key;
		// perftest and ibv_ud_pingpong use Q_Key 0x11111111.
		d := p.DETH()
		cm := h.DestQP() == 1
		if cm && (d.QKey() != 0x80010000 || d.SrcQP() != 1) || !cm && d.QKey() != 0x11111111 {
			t.Errorf("%v: DETH QKey %#x SrcQP %d to QP %d", f, d.QKey(), d.SrcQP(), h.DestQP())
		}
	case op.Has(HdrAETH):
		s := p.AETH().Syndrome()
		switch {
		case s.IsACK():
			// rxe does no end-to-end credits.
			if s.Value() != CreditsInvalid {
				t.Errorf("%v: ACK credits %#x", f, s.Value())
			}
		case s == NAKPSNSeqError:
			*naks++
		default:
			t.Errorf("%v: syndrome %v", f, s)
		}
	}
	if op == RCRDMAReadRequest {
		// perftest posts whole messages; a shorter one is a retry of
		// the part after the last response that got through.
		if n := p.RETH().DMALength(); n < 8192 && n%1024 == 0 && f.capture == "read_bw_loss_trim" {
			*partialReads++
		} else if n != 3000 && n != 64 && n != 8192 {
			t.Errorf("%v: READ of %d bytes", f, n)
		}
	}
	if op.Is(FlagFirst|FlagWrite) || op.Is(FlagOnly|FlagWrite) {
		if n := p.RETH().DMALength(); n != 3000 && n != 10000 && n != 64 && n != 8192 {
			t.Errorf("%v: WRITE of %d bytes", f, n)
		}
	}
}

// rebuild serializes the decoded fields of ip with Build, the views'
// Encode methods and Seal: the whole IP datagram.
func rebuild(t *testing.T, ip IPPacket) []byte {
	t.Helper()
	p, e := ip.Packet, ip.Envelope
	op := p.Opcode()
	n := e.Len()
	buf := make([]byte, n+PacketLen(op, p.PayloadLen()))
	q, err := Build(buf[n:], op, p.PayloadLen())
	if err != nil {
		t.Fatal(err)
	}
	f := p.BTH().Fields()
	q.BTH().Encode(&f)
	if op.Has(HdrRETH) {
		r := p.RETH()
		q.RETH().Encode(r.VA(), r.RKey(), r.DMALength())
	}
	if op.Has(HdrAtomicETH) {
		a := p.AtomicETH()
		q.AtomicETH().Encode(a.VA(), a.RKey(), a.SwapAddData(), a.CompareData())
	}
	if op.Has(HdrAETH) {
		q.AETH().Encode(p.AETH().Syndrome(), p.AETH().MSN())
	}
	if op.Has(HdrAtomicAckETH) {
		q.AtomicAckETH().Encode(p.AtomicAckETH().OrigData())
	}
	if op.Has(HdrImmDt) {
		q.ImmDt().Encode(p.ImmDt().Imm())
	}
	if op.Has(HdrIETH) {
		q.IETH().Encode(p.IETH().RKey())
	}
	if op.Has(HdrDETH) {
		q.DETH().Encode(p.DETH().QKey(), p.DETH().SrcQP())
	}
	copy(q.Payload(), p.Payload())
	q.Seal(&e)
	if m := e.Put(buf, q.Len()); m != n {
		t.Fatalf("Put wrote %d bytes, Len says %d", m, n)
	}
	return buf
}

// Serializing the decoded fields of every golden packet gives back its
// bytes, IP and UDP headers (with the IPv4 checksum) and ICRC included.
func TestGoldenRoundTrip(t *testing.T) {
	for _, frames := range goldenFrames(t) {
		for _, f := range frames {
			ip, err := ParseIP(f.ip)
			if err != nil {
				t.Fatalf("%v: %v", f, err)
			}
			if got := rebuild(t, ip); !bytes.Equal(got, f.ip) {
				t.Errorf("%v: rebuilt\n% x\nwant\n% x", f, got, f.ip)
			}
			if !ip.Packet.CheckICRC(&ip.Envelope) {
				t.Errorf("%v: CheckICRC false", f)
			}
		}
	}
}

// icrcMasked reports whether bit of an IPv4 datagram with a 20-byte header
// is one the ICRC treats as all ones: TOS, TTL, header checksum, UDP
// checksum and BTH byte 4.
func icrcMasked(bit int) bool {
	switch bit / 8 {
	case 1, 8, 10, 11, 26, 27, 28 + 4:
		return true
	}
	return false
}

// checkFlip flips one bit of a copy of a golden datagram: a bit the ICRC
// covers must make ParseIP fail and the ICRC mismatch; a masked one must
// change neither.
func checkFlip(t *testing.T, f capFrame, buf []byte, bit int) {
	copy(buf, f.ip)
	buf[bit/8] ^= 1 << (bit % 8)
	_, err := ParseIP(buf)
	if icrcMasked(bit) {
		if err != nil {
			t.Errorf("%v: masked bit %d: %v", f, bit, err)
		}
		return
	}
	if err == nil {
		t.Errorf("%v: bit %d flipped, ParseIP accepts it", f, bit)
		return
	}
	var de *DecodeError
	if !errors.As(err, &de) {
		t.Errorf("%v: bit %d: %T %v", f, bit, err, err)
	}
	// Whatever else the flip broke, the ICRC no longer matches.
	hl := int(buf[0]&0x0f)*4 + UDPHeaderLen
	if hl < 28 || hl+BTHLen+ICRCLen > len(buf) {
		return // the IHL bits: no longer a header ComputeICRC takes
	}
	crc, cerr := ComputeICRC(buf[:hl], buf[hl:len(buf)-ICRCLen])
	if cerr == nil && crc == binary.LittleEndian.Uint32(buf[len(buf)-ICRCLen:]) {
		t.Errorf("%v: bit %d flipped, ICRC still matches", f, bit)
	}
}

// One flipped bit anywhere the ICRC covers fails verification: every bit
// of one packet of each opcode and size, and a sample of bits of every
// packet.
func TestGoldenBitFlips(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	seen := map[[2]int]bool{}
	for _, frames := range goldenFrames(t) {
		for _, f := range frames {
			buf := make([]byte, len(f.ip))
			bits := len(f.ip) * 8
			key := [2]int{int(f.ip[28]), len(f.ip)}
			if !seen[key] {
				seen[key] = true
				for bit := range bits {
					checkFlip(t, f, buf, bit)
				}
				continue
			}
			for range 32 {
				checkFlip(t, f, buf, rng.IntN(bits))
			}
		}
	}
	if len(seen) < 20 {
		t.Errorf("only %d opcode and size pairs tested bit by bit", len(seen))
	}
}

// CheckICRCAnyID finds the true IPv4 ID of every golden packet (rxe's IDs
// are nonzero and different in every packet) from an envelope without it.
func TestGoldenAnyID(t *testing.T) {
	for _, frames := range goldenFrames(t) {
		for _, f := range frames {
			ip, err := ParseIP(f.ip)
			if err != nil {
				t.Fatalf("%v: %v", f, err)
			}
			e := ip.Envelope
			want := e.ID
			for _, guess := range []uint16{0, want ^ 1, 0xffff} {
				e.ID = guess
				id, ok := ip.Packet.CheckICRCAnyID(&e)
				if !ok || id != want {
					t.Errorf("%v: CheckICRCAnyID = %#x, %v; want %#x", f, id, ok, want)
				}
			}
		}
	}
}
