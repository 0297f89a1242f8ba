package mad

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/rnicd/rnicd/wire/bth"
)

// testdata/sidr_rxe.pcap is ten frames of tap0 in the interop suite
// (tests/interop, MTU 1024), both directions, kept with editcap: Debian
// 12's ib_send_lat -c UD -R -s 1 (perftest 4.5-0.18) on rxe at
// 198.18.0.2 against rnic's on rnicd at 198.18.0.1, one run in each role.
// Frames 1-4, rxe the client: Linux's SIDR_REQ (cm.c, cma.c), rnicd's
// SIDR_REP, rxe's SEND with immediate to the QPN it names, rnicd's first
// datagram back to the QPN of the immediate. Frames 5-10, rxe the server:
// rnicd's SIDR_REQ sent before rxe's perftest listens, Linux's SIDR_REP
// of status 1 (no listener), rnicd's retry 100 ms later, Linux's SIDR_REP
// naming the QP and RDMA_UDP_QKEY, rnicd's SEND with immediate there,
// rxe's first datagram back. The values were read once with tshark -x.

// sidrFrames are the capture's RoCE layers, by frame number from 1.
func sidrFrames(t *testing.T) []*bth.RoCE {
	t.Helper()
	out := []*bth.RoCE{nil}
	for i, p := range readPackets(t, "sidr_rxe") {
		roce, _ := p.Layer(bth.LayerTypeRoCE).(*bth.RoCE)
		if roce == nil {
			t.Fatalf("frame %d is not RoCE", i+1)
		}
		out = append(out, roce)
	}
	return out
}

var (
	rxeAddr  = netip.MustParseAddr("198.18.0.2")
	rnicAddr = netip.MustParseAddr("198.18.0.1")
)

// Linux's and rnicd's SIDR_REQ and SIDR_REP decode field by field, with
// rdma_cm's UDP service ID and cma_hdr; each SIDR_REP answers its
// SIDR_REQ (TID, request ID and service ID echoed); the datagrams that
// follow go to the QPN and Q_Key the SIDR_REP named, carrying the
// sender's QPN as immediate, and the answers go to that QPN; re-encoding
// gives the captured bytes.
func TestGoldenSIDR(t *testing.T) {
	fr := sidrFrames(t)
	if len(fr) != 11 {
		t.Fatalf("%d frames, want 10", len(fr)-1)
	}
	mad := func(i int, attr AttrID, tid uint64) []byte {
		t.Helper()
		r := fr[i]
		if r.BTH.Opcode != bth.UDSendOnly || r.BTH.DestQP != GSIQPN || r.DETH.SrcQP != GSIQPN || r.DETH.QKey != GSIQKey {
			t.Fatalf("frame %d: %v to QP %d from QP %d Q_Key %#x, want a MAD from QP1 to QP1", i, r.BTH.Opcode,
				r.BTH.DestQP, r.DETH.SrcQP, r.DETH.QKey)
		}
		m, err := ParseMAD(r.Payload)
		if err != nil || m.CheckCM() != nil || m.Header() != CMHeader(attr, tid) {
			t.Fatalf("frame %d: %+v (%v), want a CM %v with TID %#x", i, m.Header(), err, attr, tid)
		}
		return m.Data()
	}
	type sidr struct {
		frame     int
		tid       uint64
		requestID uint32
		port      uint16
		from, to  netip.Addr
		srcPort   uint16 // the cma_hdr's
	}
	reqs := []sidr{
		{1, 0x25e4fe502, 0x02e54f5e, 20000, rxeAddr, rnicAddr, 0xcd18},
		{5, 0x104000000, 4, 20001, rnicAddr, rxeAddr, 0xbfa0},
		{7, 0x105000000, 5, 20001, rnicAddr, rxeAddr, 0xa7bc},
	}
	for _, w := range reqs {
		f := SIDRReq(mad(w.frame, AttrSIDRReq, w.tid)).Fields()
		if f.RequestID != w.requestID || f.PKey != 0xffff || f.ServiceID != ServiceID(PSUDP, w.port) {
			t.Errorf("frame %d: SIDR_REQ %+v", w.frame, f)
		}
		h, err := ParseCMAHdr(f.PrivateData[:])
		if err != nil || h.IPVersion() != 4 || h.SrcAddr() != w.from || h.SrcPort() != w.srcPort || h.DstAddr() != w.to ||
			!bytes.Equal(h.UserData(f.PrivateData[:]), make([]byte, SIDRReqPrivateDataLen-CMAHdrLen)) {
			t.Errorf("frame %d: cma_hdr %x (%v)", w.frame, f.PrivateData[:CMAHdrLen], err)
		}
	}
	reps := []struct {
		frame  int
		req    sidr
		status SIDRStatus
		qpn    uint32
		qkey   uint32
	}{
		{2, reqs[0], SIDRSuccess, 0x12, RDMAUDPQKey},
		{6, reqs[1], SIDRUnsupported, 0, 0},
		{8, reqs[2], SIDRSuccess, 0x14, RDMAUDPQKey},
	}
	for _, w := range reps {
		f := SIDRRep(mad(w.frame, AttrSIDRRep, w.req.tid)).Fields()
		want := SIDRRepFields{RequestID: w.req.requestID, Status: w.status, QPN: w.qpn,
			ServiceID: ServiceID(PSUDP, w.req.port), QKey: w.qkey}
		if f != want {
			t.Errorf("frame %d: SIDR_REP\n got %+v\nwant %+v", w.frame, f, want)
		}
	}

	// The datagrams: a SEND with immediate to the SIDR_REP's QP and
	// Q_Key whose immediate is the sender's QPN, then the first answer
	// to that QPN.
	for _, w := range []struct{ rep, imm, back int }{{2, 3, 4}, {8, 9, 10}} {
		rep := SIDRRep(MAD(fr[w.rep].Payload).Data())
		imm, back := fr[w.imm], fr[w.back]
		if imm.BTH.Opcode != bth.UDSendOnlyImm || imm.BTH.DestQP != rep.QPN() || imm.DETH.QKey != rep.QKey() ||
			imm.ImmDt != imm.DETH.SrcQP || len(imm.Payload) != 4 {
			t.Errorf("frame %d: %v to QP %#x Q_Key %#x imm %#x from QP %#x, want a SEND with immediate to QP %#x Q_Key %#x",
				w.imm, imm.BTH.Opcode, imm.BTH.DestQP, imm.DETH.QKey, imm.ImmDt, imm.DETH.SrcQP, rep.QPN(), rep.QKey())
		}
		if back.BTH.Opcode != bth.UDSendOnly || back.BTH.DestQP != imm.ImmDt || back.DETH.QKey != RDMAUDPQKey ||
			back.DETH.SrcQP != rep.QPN() {
			t.Errorf("frame %d: %v to QP %#x Q_Key %#x from QP %#x, want a SEND to QP %#x from QP %#x", w.back,
				back.BTH.Opcode, back.BTH.DestQP, back.DETH.QKey, back.DETH.SrcQP, imm.ImmDt, rep.QPN())
		}
	}

	for _, i := range []int{1, 2, 5, 6, 7, 8} {
		raw := fr[i].Payload
		out := make([]byte, MADLen)
		for j := range out {
			out[j] = 0xa5
		}
		m, in := MAD(out), MAD(raw)
		h := in.Header()
		m.EncodeHeader(&h)
		reencodeView(t, in.AttrID(), in.Data(), m.Data())
		if !bytes.Equal(out, raw) {
			t.Errorf("frame %d re-encodes to\n%x\nwant\n%x", i, out, raw)
		}
	}
}
