package mad

import (
	"errors"
	"math/rand/v2"
	"net/netip"
	"testing"
)

// Every constructor refuses input one byte short and accepts the exact size.
func TestParseRefusesShort(t *testing.T) {
	parsers := map[string]func([]byte) error{
		"MAD":      func(b []byte) error { _, err := ParseMAD(b); return err },
		"REQ":      func(b []byte) error { _, err := ParseREQ(b); return err },
		"MRA":      func(b []byte) error { _, err := ParseMRA(b); return err },
		"REJ":      func(b []byte) error { _, err := ParseREJ(b); return err },
		"REP":      func(b []byte) error { _, err := ParseREP(b); return err },
		"RTU":      func(b []byte) error { _, err := ParseRTU(b); return err },
		"DREQ":     func(b []byte) error { _, err := ParseDREQ(b); return err },
		"DREP":     func(b []byte) error { _, err := ParseDREP(b); return err },
		"SIDR_REQ": func(b []byte) error { _, err := ParseSIDRReq(b); return err },
		"SIDR_REP": func(b []byte) error { _, err := ParseSIDRRep(b); return err },
	}
	for what, parse := range parsers {
		need := DataLen
		if what == "MAD" {
			need = MADLen
		}
		var se *ShortError
		if err := parse(make([]byte, need-1)); !errors.As(err, &se) || se.What != what || se.Len != need-1 || se.Need != need {
			t.Errorf("%s of %d bytes: %v, want a ShortError", what, need-1, err)
		}
		if err := parse(nil); err == nil {
			t.Errorf("%s of nothing: no error", what)
		}
		if err := parse(make([]byte, need)); err != nil {
			t.Errorf("%s of %d bytes: %v", what, need, err)
		}
	}
	// A view covers exactly the MAD, whatever follows it.
	m, err := ParseMAD(make([]byte, MADLen+40))
	if err != nil || len(m) != MADLen || len(m.Data()) != DataLen {
		t.Fatalf("ParseMAD of 296 bytes: len %d, %v", len(m), err)
	}
}

func TestCheckCM(t *testing.T) {
	m := MAD(make([]byte, MADLen))
	h := CMHeader(AttrREQ, 0x1234)
	m.EncodeHeader(&h)
	if err := m.CheckCM(); err != nil {
		t.Fatal(err)
	}
	for i, mutate := range []func(*Header){
		func(h *Header) { h.BaseVersion = 2 },
		func(h *Header) { h.MgmtClass = 0x03 }, // SA
		func(h *Header) { h.ClassVersion = 1 },
		func(h *Header) { h.Method = 0x01 }, // Get
	} {
		h := CMHeader(AttrREQ, 1)
		mutate(&h)
		m.EncodeHeader(&h)
		var nc *NotCMError
		if err := m.CheckCM(); !errors.As(err, &nc) || nc.Header != h {
			t.Errorf("case %d: %v, want NotCMError", i, err)
		}
	}
}

// randomize fills a Fields struct's numeric members with random values cut
// to their widths, so encode then decode must give them back exactly.
func TestMessagesRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	b := make([]byte, DataLen)
	u := func(bits uint) uint32 { return rng.Uint32() & (1<<bits - 1) }
	fill := func(p []byte) {
		for i := range p {
			p[i] = byte(rng.Uint32())
		}
	}
	for range 200 {
		req := REQFields{
			LocalCommID: rng.Uint32(), ServiceID: rng.Uint64(), LocalCAGUID: rng.Uint64(),
			LocalQKey: rng.Uint32(), LocalQPN: u(24), ResponderResources: uint8(u(8)),
			LocalEECN: u(24), InitiatorDepth: uint8(u(8)), RemoteEECN: u(24),
			RemoteCMResponseTimeout: uint8(u(5)), TransportType: uint8(u(2)),
			EndToEndFlowControl: u(1) == 1, StartingPSN: u(24), LocalCMResponseTimeout: uint8(u(5)),
			RetryCount: uint8(u(3)), PKey: uint16(u(16)), PathMTU: uint8(u(4)), RDCExists: u(1) == 1,
			RNRRetryCount: uint8(u(3)), MaxCMRetries: uint8(u(4)), SRQ: u(1) == 1,
			ExtendedTransport: uint8(u(3)), PrimaryLocalLID: uint16(u(16)), PrimaryRemoteLID: uint16(u(16)),
			PrimaryFlowLabel: u(20), PrimaryPacketRate: uint8(u(6)), PrimaryTrafficClass: uint8(u(8)),
			PrimaryHopLimit: uint8(u(8)), PrimarySL: uint8(u(4)), PrimarySubnetLocal: u(1) == 1,
			PrimaryLocalACKTimeout: uint8(u(5)),
		}
		fill(req.PrimaryLocalGID[:])
		fill(req.PrimaryRemoteGID[:])
		fill(req.Alternate[:])
		fill(req.PrivateData[:])
		REQ(b).Encode(&req)
		if got := REQ(b).Fields(); got != req {
			t.Fatalf("REQ\n got %+v\nwant %+v", got, req)
		}

		rep := REPFields{LocalCommID: rng.Uint32(), RemoteCommID: rng.Uint32(), LocalQKey: rng.Uint32(),
			LocalQPN: u(24), LocalEECN: u(24), StartingPSN: u(24), ResponderResources: uint8(u(8)),
			InitiatorDepth: uint8(u(8)), TargetACKDelay: uint8(u(5)), FailoverAccepted: uint8(u(2)),
			EndToEndFlowControl: u(1) == 1, RNRRetryCount: uint8(u(3)), SRQ: u(1) == 1, LocalCAGUID: rng.Uint64()}
		fill(rep.PrivateData[:])
		REP(b).Encode(&rep)
		if got := REP(b).Fields(); got != rep {
			t.Fatalf("REP\n got %+v\nwant %+v", got, rep)
		}

		mra := MRAFields{LocalCommID: rng.Uint32(), RemoteCommID: rng.Uint32(),
			MessageMRAed: MsgKind(u(2)), ServiceTimeout: uint8(u(5))}
		fill(mra.PrivateData[:])
		MRA(b).Encode(&mra)
		if got := MRA(b).Fields(); got != mra {
			t.Fatalf("MRA\n got %+v\nwant %+v", got, mra)
		}

		rej := REJFields{LocalCommID: rng.Uint32(), RemoteCommID: rng.Uint32(),
			MessageRejected: MsgKind(u(2)), RejectInfoLength: uint8(u(7)), Reason: RejReason(u(16))}
		fill(rej.ARI[:])
		fill(rej.PrivateData[:])
		REJ(b).Encode(&rej)
		if got := REJ(b).Fields(); got != rej {
			t.Fatalf("REJ\n got %+v\nwant %+v", got, rej)
		}

		rtu := RTUFields{LocalCommID: rng.Uint32(), RemoteCommID: rng.Uint32()}
		fill(rtu.PrivateData[:])
		RTU(b).Encode(&rtu)
		if got := RTU(b).Fields(); got != rtu {
			t.Fatalf("RTU\n got %+v\nwant %+v", got, rtu)
		}

		dreq := DREQFields{LocalCommID: rng.Uint32(), RemoteCommID: rng.Uint32(), RemoteQPN: u(24)}
		fill(dreq.PrivateData[:])
		DREQ(b).Encode(&dreq)
		if got := DREQ(b).Fields(); got != dreq {
			t.Fatalf("DREQ\n got %+v\nwant %+v", got, dreq)
		}

		drep := DREPFields{LocalCommID: rng.Uint32(), RemoteCommID: rng.Uint32()}
		fill(drep.PrivateData[:])
		DREP(b).Encode(&drep)
		if got := DREP(b).Fields(); got != drep {
			t.Fatalf("DREP\n got %+v\nwant %+v", got, drep)
		}

		sreq := SIDRReqFields{RequestID: rng.Uint32(), PKey: uint16(u(16)), ServiceID: rng.Uint64()}
		fill(sreq.PrivateData[:])
		SIDRReq(b).Encode(&sreq)
		if got := SIDRReq(b).Fields(); got != sreq {
			t.Fatalf("SIDR_REQ\n got %+v\nwant %+v", got, sreq)
		}

		srep := SIDRRepFields{RequestID: rng.Uint32(), Status: SIDRStatus(u(8)), AddInfoLength: uint8(u(8)),
			QPN: u(24), ServiceID: rng.Uint64(), QKey: rng.Uint32()}
		fill(srep.AddInfo[:])
		fill(srep.PrivateData[:])
		SIDRRep(b).Encode(&srep)
		if got := SIDRRep(b).Fields(); got != srep {
			t.Fatalf("SIDR_REP\n got %+v\nwant %+v", got, srep)
		}
	}
}

// Fields land at the spec's offsets: a few bytes checked by hand against
// IBTA tables 107, 108, 112, 119 and 120 (the golden captures cover REQ,
// REP, RTU, DREQ and DREP, but no MRA, REJ or SIDR message).
func TestMessageOffsets(t *testing.T) {
	b := make([]byte, DataLen)
	MRA(b).Encode(&MRAFields{LocalCommID: 1, RemoteCommID: 2, MessageMRAed: MsgKindREP, ServiceTimeout: 0x1f})
	if b[3] != 1 || b[7] != 2 || b[8] != 0x40 || b[9] != 0xf8 {
		t.Errorf("MRA bytes %x", b[:12])
	}
	REJ(b).Encode(&REJFields{MessageRejected: MsgKindOther, RejectInfoLength: 0x7f, Reason: RejInvalidServiceID})
	if b[8] != 0x80 || b[9] != 0xfe || b[10] != 0 || b[11] != 8 {
		t.Errorf("REJ bytes %x", b[:12])
	}
	DREQ(b).Encode(&DREQFields{RemoteQPN: 0xabcdef})
	if b[8] != 0xab || b[9] != 0xcd || b[10] != 0xef || b[11] != 0 {
		t.Errorf("DREQ bytes %x", b[:12])
	}
	SIDRReq(b).Encode(&SIDRReqFields{RequestID: 7, PKey: 0xffff, ServiceID: ServiceID(PSUDP, 18515)})
	if b[3] != 7 || b[4] != 0xff || b[5] != 0xff || b[6] != 0 || b[13] != 0x11 || b[14] != 0x48 || b[15] != 0x53 {
		t.Errorf("SIDR_REQ bytes %x", b[:16])
	}
	SIDRRep(b).Encode(&SIDRRepFields{RequestID: 7, Status: SIDRUnsupported, QPN: 0x123456, ServiceID: 9, QKey: 0x11111111})
	if b[4] != 1 || b[8] != 0x12 || b[10] != 0x56 || b[11] != 0 || b[19] != 9 || b[20] != 0x11 || b[23] != 0x11 {
		t.Errorf("SIDR_REP bytes %x", b[:24])
	}
}

func TestServiceID(t *testing.T) {
	for _, c := range []struct {
		ps   PortSpace
		port uint16
		want uint64
	}{
		{PSTCP, 7174, 0x0000000001061c06},  // rping's default port
		{PSTCP, 18515, 0x0000000001064853}, // perftest's
		{PSUDP, 18515, 0x0000000001114853},
		{PSIB, 1, 0x00000000013f0001},
	} {
		if got := ServiceID(c.ps, c.port); got != c.want {
			t.Errorf("ServiceID(%#x, %d) = %#x, want %#x", c.ps, c.port, got, c.want)
		}
		ps, port, ok := SplitServiceID(c.want)
		if !ok || ps != c.ps || port != c.port {
			t.Errorf("SplitServiceID(%#x) = %#x, %d, %v", c.want, ps, port, ok)
		}
	}
	for _, id := range []uint64{0, 0x0000000002061c06, 0x1000000001061c06} {
		if _, _, ok := SplitServiceID(id); ok {
			t.Errorf("SplitServiceID(%#x) accepted a non-IP service ID", id)
		}
	}
}

func TestCMAHdr(t *testing.T) {
	b := make([]byte, REQPrivateDataLen)
	for _, c := range []struct{ src, dst string }{
		{"198.18.0.3", "198.18.0.2"},
		{"::ffff:198.18.0.3", "198.18.0.2"}, // a mapped address is IPv4 to rdma_cm
		{"2001:db8::1", "2001:db8::2"},
	} {
		src, dst := netip.MustParseAddr(c.src), netip.MustParseAddr(c.dst)
		if err := EncodeCMAHdr(b, src, 0xbb5f, dst); err != nil {
			t.Fatal(err)
		}
		h, err := ParseCMAHdr(b)
		if err != nil {
			t.Fatal(err)
		}
		wantVer := uint8(6)
		if src.Unmap().Is4() {
			wantVer = 4
		}
		if h.Version() != 0 || h.IPVersion() != wantVer || h.SrcPort() != 0xbb5f ||
			h.SrcAddr() != src.Unmap() || h.DstAddr() != dst.Unmap() {
			t.Errorf("%v -> %v: decoded IPv%d %v:%#x -> %v", src, dst, h.IPVersion(), h.SrcAddr(), h.SrcPort(), h.DstAddr())
		}
		if GIDFromAddr(src).Addr() != src.Unmap() {
			t.Errorf("GID of %v does not map back", src)
		}
	}
	if err := EncodeCMAHdr(b, netip.MustParseAddr("198.18.0.3"), 1, netip.MustParseAddr("2001:db8::2")); err == nil {
		t.Error("mixed families encoded")
	}
	if err := EncodeCMAHdr(b[:CMAHdrLen-1], netip.MustParseAddr("198.18.0.3"), 1, netip.MustParseAddr("198.18.0.2")); err == nil {
		t.Error("encoded into a short buffer")
	}
	var he *CMAHdrError
	if _, err := ParseCMAHdr(b[:CMAHdrLen-1]); !errors.As(err, &he) {
		t.Errorf("short cma_hdr: %v", err)
	}
	b[0] = 1
	if _, err := ParseCMAHdr(b); !errors.As(err, &he) || he.Version != 1 {
		t.Errorf("cma_hdr version 1: %v", err)
	}
	b[0], b[1] = 0, 5<<4
	if _, err := ParseCMAHdr(b); !errors.As(err, &he) || he.IPVersion != 5 {
		t.Errorf("cma_hdr IP version 5: %v", err)
	}
}

// The views allocate nothing, as the data path needs.
func TestViewsDoNotAllocate(t *testing.T) {
	m := MAD(make([]byte, MADLen))
	h := CMHeader(AttrREQ, 1)
	var req REQFields
	n := testing.AllocsPerRun(100, func() {
		v, _ := ParseMAD(m)
		v.EncodeHeader(&h)
		r, _ := ParseREQ(v.Data())
		req = r.Fields()
		r.Encode(&req)
		_, _ = ParseCMAHdr(r.PrivateData())
	})
	if n != 0 {
		t.Errorf("%v allocations per parse and encode", n)
	}
}

func TestAttrIDString(t *testing.T) {
	if AttrSIDRRep.String() != "SIDR_REP" || AttrID(0x99).String() != "attr(0x0099)" {
		t.Error(AttrSIDRRep.String(), AttrID(0x99).String())
	}
}
