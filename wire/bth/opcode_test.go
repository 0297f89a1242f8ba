package bth

import "testing"

// The opcode table, written out row by row from the IBTA tables (vol. 1,
// 9.2, tables 36-38) as Linux rxe implements them (rxe_opcode.c): which
// extension headers follow the BTH, in which order, and whether a payload
// may follow them.
func TestOpcodeTable(t *testing.T) {
	const p = true
	want := []struct {
		op      Opcode
		name    string
		hdrs    []Header // in wire order
		payload bool
	}{
		{0x00, "RC_SEND_FIRST", nil, p},
		{0x01, "RC_SEND_MIDDLE", nil, p},
		{0x02, "RC_SEND_LAST", nil, p},
		{0x03, "RC_SEND_LAST_WITH_IMMEDIATE", []Header{HdrImmDt}, p},
		{0x04, "RC_SEND_ONLY", nil, p},
		{0x05, "RC_SEND_ONLY_WITH_IMMEDIATE", []Header{HdrImmDt}, p},
		{0x06, "RC_RDMA_WRITE_FIRST", []Header{HdrRETH}, p},
		{0x07, "RC_RDMA_WRITE_MIDDLE", nil, p},
		{0x08, "RC_RDMA_WRITE_LAST", nil, p},
		{0x09, "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE", []Header{HdrImmDt}, p},
		{0x0a, "RC_RDMA_WRITE_ONLY", []Header{HdrRETH}, p},
		{0x0b, "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", []Header{HdrRETH, HdrImmDt}, p},
		{0x0c, "RC_RDMA_READ_REQUEST", []Header{HdrRETH}, false},
		{0x0d, "RC_RDMA_READ_RESPONSE_FIRST", []Header{HdrAETH}, p},
		{0x0e, "RC_RDMA_READ_RESPONSE_MIDDLE", nil, p},
		{0x0f, "RC_RDMA_READ_RESPONSE_LAST", []Header{HdrAETH}, p},
		{0x10, "RC_RDMA_READ_RESPONSE_ONLY", []Header{HdrAETH}, p},
		{0x11, "RC_ACKNOWLEDGE", []Header{HdrAETH}, false},
		{0x12, "RC_ATOMIC_ACKNOWLEDGE", []Header{HdrAETH, HdrAtomicAckETH}, false},
		{0x13, "RC_COMPARE_SWAP", []Header{HdrAtomicETH}, false},
		{0x14, "RC_FETCH_ADD", []Header{HdrAtomicETH}, false},
		{0x16, "RC_SEND_LAST_WITH_INVALIDATE", []Header{HdrIETH}, p},
		{0x17, "RC_SEND_ONLY_WITH_INVALIDATE", []Header{HdrIETH}, p},
		{0x20, "UC_SEND_FIRST", nil, p},
		{0x21, "UC_SEND_MIDDLE", nil, p},
		{0x22, "UC_SEND_LAST", nil, p},
		{0x23, "UC_SEND_LAST_WITH_IMMEDIATE", []Header{HdrImmDt}, p},
		{0x24, "UC_SEND_ONLY", nil, p},
		{0x25, "UC_SEND_ONLY_WITH_IMMEDIATE", []Header{HdrImmDt}, p},
		{0x26, "UC_RDMA_WRITE_FIRST", []Header{HdrRETH}, p},
		{0x27, "UC_RDMA_WRITE_MIDDLE", nil, p},
		{0x28, "UC_RDMA_WRITE_LAST", nil, p},
		{0x29, "UC_RDMA_WRITE_LAST_WITH_IMMEDIATE", []Header{HdrImmDt}, p},
		{0x2a, "UC_RDMA_WRITE_ONLY", []Header{HdrRETH}, p},
		{0x2b, "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", []Header{HdrRETH, HdrImmDt}, p},
		{0x64, "UD_SEND_ONLY", []Header{HdrDETH}, p},
		{0x65, "UD_SEND_ONLY_WITH_IMMEDIATE", []Header{HdrDETH, HdrImmDt}, p},
		{0x81, "ROCE_CNP", []Header{HdrCNP}, false},
		// IBTA annex A14, table 1: XRC requests carry the XRCETH
		// right after the BTH; responses do not.
		{0xa0, "XRC_SEND_FIRST", []Header{HdrXRCETH}, p},
		{0xa1, "XRC_SEND_MIDDLE", []Header{HdrXRCETH}, p},
		{0xa2, "XRC_SEND_LAST", []Header{HdrXRCETH}, p},
		{0xa3, "XRC_SEND_LAST_WITH_IMMEDIATE", []Header{HdrXRCETH, HdrImmDt}, p},
		{0xa4, "XRC_SEND_ONLY", []Header{HdrXRCETH}, p},
		{0xa5, "XRC_SEND_ONLY_WITH_IMMEDIATE", []Header{HdrXRCETH, HdrImmDt}, p},
		{0xa6, "XRC_RDMA_WRITE_FIRST", []Header{HdrXRCETH, HdrRETH}, p},
		{0xa7, "XRC_RDMA_WRITE_MIDDLE", []Header{HdrXRCETH}, p},
		{0xa8, "XRC_RDMA_WRITE_LAST", []Header{HdrXRCETH}, p},
		{0xa9, "XRC_RDMA_WRITE_LAST_WITH_IMMEDIATE", []Header{HdrXRCETH, HdrImmDt}, p},
		{0xaa, "XRC_RDMA_WRITE_ONLY", []Header{HdrXRCETH, HdrRETH}, p},
		{0xab, "XRC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", []Header{HdrXRCETH, HdrRETH, HdrImmDt}, p},
		{0xac, "XRC_RDMA_READ_REQUEST", []Header{HdrXRCETH, HdrRETH}, false},
		{0xad, "XRC_RDMA_READ_RESPONSE_FIRST", []Header{HdrAETH}, p},
		{0xae, "XRC_RDMA_READ_RESPONSE_MIDDLE", nil, p},
		{0xaf, "XRC_RDMA_READ_RESPONSE_LAST", []Header{HdrAETH}, p},
		{0xb0, "XRC_RDMA_READ_RESPONSE_ONLY", []Header{HdrAETH}, p},
		{0xb1, "XRC_ACKNOWLEDGE", []Header{HdrAETH}, false},
		{0xb2, "XRC_ATOMIC_ACKNOWLEDGE", []Header{HdrAETH, HdrAtomicAckETH}, false},
		{0xb3, "XRC_COMPARE_SWAP", []Header{HdrXRCETH, HdrAtomicETH}, false},
		{0xb4, "XRC_FETCH_ADD", []Header{HdrXRCETH, HdrAtomicETH}, false},
		{0xb6, "XRC_SEND_LAST_WITH_INVALIDATE", []Header{HdrXRCETH, HdrIETH}, p},
		{0xb7, "XRC_SEND_ONLY_WITH_INVALIDATE", []Header{HdrXRCETH, HdrIETH}, p},
	}
	size := map[Header]int{
		HdrDETH: DETHLen, HdrRETH: RETHLen, HdrAtomicETH: AtomicETHLen, HdrAETH: AETHLen,
		HdrAtomicAckETH: AtomicAckETHLen, HdrImmDt: ImmDtLen, HdrIETH: IETHLen, HdrCNP: CNPLen,
		HdrXRCETH: XRCETHLen,
	}
	known := map[Opcode]bool{}
	for _, w := range want {
		op := w.op
		known[op] = true
		if !op.Valid() || op.String() != w.name {
			t.Errorf("%#02x: valid %v, name %q, want %q", uint8(op), op.Valid(), op.String(), w.name)
		}
		if op.Is(FlagPayload) != w.payload {
			t.Errorf("%v: payload flag %v, want %v", op, op.Is(FlagPayload), w.payload)
		}
		var set Header
		off := BTHLen
		for _, h := range w.hdrs {
			set |= h
			if got := op.Offset(h); got != off {
				t.Errorf("%v: header %#x at %d, want %d", op, h, got, off)
			}
			off += size[h]
		}
		if op.Info().Headers != set {
			t.Errorf("%v: headers %#x, want %#x", op, op.Info().Headers, set)
		}
		for h := range size {
			if op.Has(h) != (set&h != 0) || (set&h == 0 && op.Offset(h) != -1) {
				t.Errorf("%v: Has(%#x) %v, Offset %d", op, h, op.Has(h), op.Offset(h))
			}
		}
		if op.HdrLen() != off {
			t.Errorf("%v: HdrLen %d, want %d", op, op.HdrLen(), off)
		}
		if op.Operation() != op&0x1f {
			t.Errorf("%v: operation %#x", op, op.Operation())
		}
		if op.Offset(HdrRETH|HdrImmDt) != -1 {
			t.Errorf("%v: Offset of two headers", op)
		}
		wantTransport := map[Opcode]Opcode{0: TransportRC, 1: TransportUC, 3: TransportUD, 4: TransportCNP, 5: TransportXRC}[op>>5]
		if op.Transport() != wantTransport {
			t.Errorf("%v: transport %#x", op, op.Transport())
		}
	}
	for i := range opcodeCount {
		op := Opcode(i)
		if !known[op] && (op.Valid() || op.HdrLen() != 0 || op.Info().Flags != 0) {
			t.Errorf("%#02x should be unknown (RD, reserved, or newer than this NIC)", i)
		}
		if !known[op] && op.String() != "OPCODE_0x"+hex2(uint8(op)) {
			t.Errorf("%#02x: name %q", i, op.String())
		}
	}
}

func hex2(b uint8) string {
	const digits = "0123456789abcdef"
	return string([]byte{digits[b>>4], digits[b&0xf]})
}

// The flags place each opcode in its message and say who sends it.
func TestOpcodeFlags(t *testing.T) {
	tests := []struct {
		op   Opcode
		want Flags
	}{
		{RCSendFirst, FlagFirst | FlagSend | FlagRequest},
		{RCSendMiddle, FlagMiddle | FlagSend | FlagRequest},
		{UCSendLastImm, FlagLast | FlagSend | FlagImm | FlagRequest},
		{RCSendOnlyInvalidate, FlagOnly | FlagSend | FlagInvalidate | FlagRequest},
		{RCRDMAWriteOnlyImm, FlagOnly | FlagWrite | FlagImm | FlagRequest},
		{RCRDMAReadRequest, FlagOnly | FlagRead | FlagRequest},
		{RCRDMAReadResponseMiddle, FlagMiddle | FlagReadResp},
		{RCAcknowledge, FlagOnly | FlagAck},
		{RCAtomicAcknowledge, FlagOnly | FlagAck},
		{RCCompareSwap, FlagOnly | FlagAtomic | FlagRequest},
		{UDSendOnlyImm, FlagOnly | FlagSend | FlagImm | FlagRequest},
		{CNP, 0},
		{XRCSendOnlyImm, FlagOnly | FlagSend | FlagImm | FlagRequest},
		{XRCRDMAReadResponseFirst, FlagFirst | FlagReadResp},
		{XRCAcknowledge, FlagOnly | FlagAck},
		{XRCFetchAdd, FlagOnly | FlagAtomic | FlagRequest},
	}
	for _, tt := range tests {
		got := tt.op.Info().Flags &^ FlagPayload
		if got != tt.want {
			t.Errorf("%v: flags %#x, want %#x", tt.op, got, tt.want)
		}
	}
	// Exactly one position flag on every opcode but CNP.
	for i := range opcodeCount {
		op := Opcode(i)
		if !op.Valid() || op == CNP {
			continue
		}
		n := 0
		for _, f := range []Flags{FlagFirst, FlagMiddle, FlagLast, FlagOnly} {
			if op.Is(f) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%v: %d position flags", op, n)
		}
		if op.Is(FlagImm) != op.Has(HdrImmDt) || op.Is(FlagInvalidate) != op.Has(HdrIETH) {
			t.Errorf("%v: immediate/invalidate flags disagree with headers", op)
		}
	}
}

// AETH syndromes (IBTA 9.7.5.1, tables 43-45).
func TestSyndrome(t *testing.T) {
	for v := range 32 {
		a := ACK(uint8(v))
		if uint8(a) != uint8(v) || !a.IsACK() || a.IsNAK() || a.IsRNRNAK() || a.Value() != uint8(v) || a.String() != "ACK" {
			t.Errorf("ACK(%d) = %#x %v", v, uint8(a), a)
		}
		r := RNRNAK(uint8(v))
		if uint8(r) != 0x20|uint8(v) || !r.IsRNRNAK() || r.IsACK() || r.IsNAK() || r.Value() != uint8(v) || r.String() != "RNR_NAK" {
			t.Errorf("RNRNAK(%d) = %#x %v", v, uint8(r), r)
		}
	}
	// Only the low five bits count.
	if ACK(0x3f) != ACK(0x1f) || RNRNAK(0xff) != 0x3f {
		t.Error("ACK/RNRNAK do not mask to five bits")
	}
	naks := []struct {
		s    Syndrome
		code uint8
		name string
	}{
		{NAKPSNSeqError, 0x60, "NAK_PSN_SEQ_ERR"},
		{NAKInvalidRequest, 0x61, "NAK_INVALID_REQUEST"},
		{NAKRemoteAccessError, 0x62, "NAK_REM_ACCESS_ERR"},
		{NAKRemoteOpError, 0x63, "NAK_REM_OP_ERR"},
		{NAKInvalidRDRequest, 0x64, "NAK_INVALID_RD_REQUEST"},
	}
	for _, n := range naks {
		if uint8(n.s) != n.code || !n.s.IsNAK() || n.s.IsACK() || n.s.IsRNRNAK() || n.s.String() != n.name || n.s.Value() != n.code&0x1f {
			t.Errorf("%#x: %v", n.code, n.s)
		}
	}
	for _, s := range []Syndrome{0x65, 0x7f, 0x40, 0x5f, 0x80, 0x9f, 0xe0} {
		if s.String() != "RESERVED_SYNDROME" {
			t.Errorf("%#x: %v", uint8(s), s)
		}
		if s&0x80 != 0 && (s.IsACK() || s.IsNAK() || s.IsRNRNAK()) {
			t.Errorf("%#x: bit 7 is reserved, not an ACK or NAK", uint8(s))
		}
	}
	if s := Syndrome(0x40); s.IsACK() || s.IsNAK() || s.IsRNRNAK() {
		t.Errorf("0x40 is reserved")
	}

	// AETH view: syndrome in the top byte, MSN in the low 24 bits.
	a := AETH(make([]byte, AETHLen))
	a.Encode(NAKPSNSeqError, 0x1abcdef)
	if a[0] != 0x60 || a.Syndrome() != NAKPSNSeqError || a.MSN() != 0xabcdef {
		t.Errorf("AETH % x", []byte(a))
	}
}

// RNR timer codes (IBTA table 45): 0.01 ms to 491.52 ms, code 0 is the
// longest, 655.36 ms.
func TestRNRTimer(t *testing.T) {
	want := map[uint8]uint32{
		0: 655360, 1: 10, 2: 20, 3: 30, 4: 40, 5: 60, 6: 80, 7: 120, 8: 160,
		9: 240, 10: 320, 11: 480, 12: 640, 13: 960, 14: 1280, 15: 1920,
		16: 2560, 17: 3840, 18: 5120, 19: 7680, 20: 10240, 21: 15360,
		22: 20480, 23: 30720, 24: 40960, 25: 61440, 26: 81920, 27: 122880,
		28: 163840, 29: 245760, 30: 327680, 31: 491520,
	}
	for code, us := range want {
		if got := RNRTimerMicros(code); got != us {
			t.Errorf("code %d: %d us, want %d", code, got, us)
		}
		if got := RNRTimerMicros(code | 0xe0); got != us {
			t.Errorf("code %#x: high bits not ignored", code|0xe0)
		}
	}
	// Above code 1 the delays grow monotonically.
	for c := uint8(2); c < 32; c++ {
		if RNRTimerMicros(c) <= RNRTimerMicros(c-1) {
			t.Errorf("code %d not longer than %d", c, c-1)
		}
	}
}

// The BTH, RETH, AtomicETH, DETH and other views read back what Encode wrote,
// at the IBTA byte positions.
func TestHeaderViews(t *testing.T) {
	b := BTH(make([]byte, BTHLen))
	f := BTHFields{
		Opcode: RCSendLastImm, SolicitedEvent: true, MigReq: true, PadCount: 2, TVer: 0,
		PKey: 0x8001, FECN: true, BECN: true, DestQP: 0xabcdef, AckReq: true, PSN: 0xfedcba,
	}
	b.Encode(&f)
	want := []byte{0x03, 0xe0, 0x80, 0x01, 0xc0, 0xab, 0xcd, 0xef, 0x80, 0xfe, 0xdc, 0xba}
	if string(b) != string(want) {
		t.Fatalf("BTH % x, want % x", []byte(b), want)
	}
	if b.Fields() != f {
		t.Fatalf("Fields %+v", b.Fields())
	}
	b.SetPSN(0x1000001)
	b.SetAckReq(false)
	if b.PSN() != 1 || b.AckReq() || b.DestQP() != 0xabcdef {
		t.Fatalf("SetPSN/SetAckReq: % x", []byte(b))
	}
	b.SetAckReq(true)
	if !b.AckReq() || b.PSN() != 1 {
		t.Fatal("SetAckReq(true)")
	}

	r := RETH(make([]byte, RETHLen))
	r.Encode(0x0102030405060708, 0x090a0b0c, 0x0d0e0f10)
	if r[0] != 1 || r[15] != 0x10 || r.VA() != 0x0102030405060708 || r.RKey() != 0x090a0b0c || r.DMALength() != 0x0d0e0f10 {
		t.Fatalf("RETH % x", []byte(r))
	}
	a := AtomicETH(make([]byte, AtomicETHLen))
	a.Encode(1<<63|1, 0x11223344, 0x5566778899aabbcc, 0xddeeff0011223344)
	if a.VA() != 1<<63|1 || a.RKey() != 0x11223344 || a.SwapAddData() != 0x5566778899aabbcc || a.CompareData() != 0xddeeff0011223344 || a[12] != 0x55 || a[27] != 0x44 {
		t.Fatalf("AtomicETH % x", []byte(a))
	}
	d := DETH(make([]byte, DETHLen))
	d.Encode(0x80010000, 0x1000001)
	if d.QKey() != 0x80010000 || d.SrcQP() != 1 || d[4] != 0 {
		t.Fatalf("DETH % x", []byte(d))
	}
	aa := AtomicAckETH(make([]byte, AtomicAckETHLen))
	aa.Encode(42)
	im := ImmDt(make([]byte, ImmDtLen))
	im.Encode(0xdeadbeef)
	ie := IETH(make([]byte, IETHLen))
	ie.Encode(0x1234)
	if aa.OrigData() != 42 || im.Imm() != 0xdeadbeef || im[0] != 0xde || ie.RKey() != 0x1234 {
		t.Fatal("AtomicAckETH/ImmDt/IETH")
	}
}

func TestPSN(t *testing.T) {
	tests := []struct {
		a, b uint32
		want int32
	}{
		{5, 3, 2}, {3, 5, -2}, {0, PSNMask, 1}, {PSNMask, 0, -1},
		{1 << 23, 0, -1 << 23}, {1<<23 - 1, 0, 1<<23 - 1},
	}
	for _, tt := range tests {
		if got := PSNDiff(tt.a, tt.b); got != tt.want {
			t.Errorf("PSNDiff(%#x, %#x) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
	if PSNAdd(PSNMask, 2) != 1 || PSNAdd(5, -6) != PSNMask {
		t.Error("PSNAdd does not wrap")
	}
}

// The XRCETH holds the 24-bit SRQ number after a reserved byte, big
// endian (IBTA A14.3.1), and sits between the BTH and the RETH.
func TestXRCETH(t *testing.T) {
	buf := make([]byte, PacketLen(XRCRDMAWriteOnlyImm, 5))
	p, err := Build(buf, XRCRDMAWriteOnlyImm, 5)
	if err != nil {
		t.Fatal(err)
	}
	p.XRCETH().Encode(0xff123456) // the top byte is reserved: not written
	p.RETH().Encode(0x1122334455667788, 0xaabbccdd, 5)
	p.ImmDt().Encode(0xdeadbeef)
	want := []byte{0x00, 0x12, 0x34, 0x56, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0xaa, 0xbb, 0xcc, 0xdd, 0, 0, 0, 5, 0xde, 0xad, 0xbe, 0xef}
	if got := buf[BTHLen : BTHLen+len(want)]; string(got) != string(want) {
		t.Fatalf("headers % x, want % x", got, want)
	}
	if got := p.XRCETH().SRQN(); got != 0x123456 {
		t.Fatalf("SRQN %#x", got)
	}
	buf[BTHLen] = 0xff // a reserved byte set by a sender is ignored
	if got := p.XRCETH().SRQN(); got != 0x123456 {
		t.Fatalf("SRQN %#x with the reserved byte set", got)
	}
	for _, op := range []Opcode{XRCAcknowledge, XRCRDMAReadResponseOnly, XRCAtomicAcknowledge, RCSendOnly} {
		if op.Has(HdrXRCETH) || op.Offset(HdrXRCETH) != -1 {
			t.Errorf("%v carries an XRCETH", op)
		}
	}
}
