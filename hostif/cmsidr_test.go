package hostif

import (
	"bytes"
	"strings"
	"testing"

	"github.com/rnicd/rnicd/abi"
	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/rnic/cm"
	"github.com/rnicd/rnicd/wire/mad"
)

// perftest's port in rdma_cm's UDP port space: 0x0000000001114853.
var udService = mad.ServiceID(mad.PSUDP, 18515)

// toRTS takes a UD QP through INIT (with Q_Key qkey), RTR and RTS, as
// librdmacm's rdma_create_qp does for a UD ID (ucma_init_ud_qp).
func (q *cmQP) toRTS(t *testing.T, c *Client, qkey uint32) {
	t.Helper()
	for _, s := range []struct {
		a    ib.QPAttr
		mask ib.AttrMask
	}{
		{ib.QPAttr{State: ib.QPSInit, PortNum: 1, QKey: qkey}, ib.AttrState | ib.AttrPKeyIndex | ib.AttrPort | ib.AttrQKey},
		{ib.QPAttr{State: ib.QPSRTR}, ib.AttrState},
		{ib.QPAttr{State: ib.QPSRTS}, ib.AttrState | ib.AttrSQPSN},
	} {
		call(t, c, abi.KindModifyQP, &abi.ModifyQPReq{H: q.h, Mask: s.mask, Attr: s.a}, nil, &abi.Empty{})
	}
}

// A UD connect through two daemons' CM agents (rdma_cm's UDP port
// space): the client's SIDR_REQ reaches the listener as CONNECT_REQUEST
// with its private data; the accept answers with a SIDR_REP naming the
// UD QP and rdma_cm's Q_Key, which reach the client in ESTABLISHED with
// the server's GID; the server gets no ESTABLISHED (cma.c sends none on
// the passive side of a UD ID); a UD SEND to the QPN and Q_Key learned
// lands byte for byte; neither QP was moved by the CM; each agent counted
// one SIDR_REQ and one SIDR_REP; a disconnect of the UD ID sends nothing;
// rdma res shows the client's ID in CONNECT in the UDP port space.
func TestCMSIDRThroughHostif(t *testing.T) {
	a := cmNIC(t, 0x0200_00ff_fe00_0011)
	b := cmNIC(t, 0x0200_00ff_fe00_0012)
	ca, cb := a.client(t), b.client(t)
	lch, lid := cmChannel(t, ca)
	call(t, ca, abi.KindCMListen, &abi.CMListenReq{H: lid, ServiceID: udService}, nil, &abi.Empty{})

	qb := newCMQPOf(t, cb, ib.QPTypeUD)
	bch, bid := cmChannel(t, cb)
	call(t, cb, abi.KindCMConnect, &abi.CMConnectReq{H: bid, QP: qb.h, DGID: a.addr.As16(), ServiceID: udService,
		PrivateData: []byte("sidr from b")}, nil, &abi.Empty{})
	req := nextEvent(t, ca, lch, cm.EventConnectRequest)
	if req.Listen != lid || req.RemoteGID != b.addr.As16() || len(req.PrivateData) != mad.SIDRReqPrivateDataLen ||
		!bytes.HasPrefix(req.PrivateData, []byte("sidr from b")) {
		t.Fatalf("connect request %+v", req)
	}
	if st := qpState(t, cb, qb.h); st != ib.QPSReset {
		t.Fatalf("the UD connect moved the client's QP to %v", st)
	}

	// A connected QP does not answer a UD connect.
	rc := newCMQP(t, ca)
	_, err := ca.Call(abi.KindCMAccept, &abi.CMAcceptReq{H: req.ID, QP: rc.h}, nil, &abi.Empty{})
	wantCode(t, "accept a SIDR_REQ with an RC QP", err, abi.CodeInvalid)
	qa := newCMQPOf(t, ca, ib.QPTypeUD)
	call(t, ca, abi.KindCMAccept, &abi.CMAcceptReq{H: req.ID, QP: qa.h, PrivateData: []byte("sidr ok")}, nil, &abi.Empty{})

	est := nextEvent(t, cb, bch, cm.EventEstablished)
	if est.ID != bid || est.RemoteQPN != qa.qpn || est.QKey != mad.RDMAUDPQKey || est.RemoteGID != a.addr.As16() ||
		len(est.PrivateData) != mad.SIDRRepPrivateDataLen || !bytes.HasPrefix(est.PrivateData, []byte("sidr ok")) {
		t.Fatalf("established %+v", est)
	}
	var none abi.CMEvent
	call(t, ca, abi.KindCMGetEvent, &abi.Handle{H: lch}, nil, &none)
	if none.Type != 0 {
		t.Fatalf("the passive side of a UD connect got %v", cm.EventType(none.Type))
	}
	if st := qpState(t, ca, qa.h); st != ib.QPSReset {
		t.Fatalf("the UD accept moved the server's QP to %v", st)
	}

	// Data to what the SIDR_REP named.
	qa.toRTS(t, ca, mad.RDMAUDPQKey)
	qb.toRTS(t, cb, mad.RDMAUDPQKey)
	p := qa.rq.Producer()
	if err := abi.EncodeRecvWQE(qa.rq.Slot(p), &ib.RecvWR{WRID: 5, SGL: []ib.SGE{{Addr: 0x10000, Length: 256, LKey: qa.mr.LKey}}}); err != nil {
		t.Fatal(err)
	}
	qa.rq.SetProducer(p + 1)
	if err := ca.Send(abi.KindDoorbell, &abi.DoorbellReq{H: qa.h, Queue: abi.DoorbellRecv}); err != nil {
		t.Fatal(err)
	}
	msg := "a datagram to the SIDR_REP's QP"
	copy(qb.mem, msg)
	qb.post(t, cb, &ib.SendWR{WRID: 6, Opcode: ib.WRSend, Flags: ib.SendSignaled,
		SGL: []ib.SGE{{Addr: 0x10000, Length: uint32(len(msg)), LKey: qb.mr.LKey}},
		AH:  &ib.AH{DGID: est.RemoteGID, HopLimit: 64}, RemoteQPN: est.RemoteQPN, RemoteQKey: est.QKey}, nil)
	var consB, consA uint32
	if wc := poll(t, qb.cq, &consB); wc.Status != ib.WCSuccess || wc.WRID != 6 {
		t.Fatalf("UD send: %+v", wc)
	}
	wc := poll(t, qa.cq, &consA)
	if wc.Status != ib.WCSuccess || wc.WRID != 5 || wc.ByteLen != uint32(40+len(msg)) || wc.SrcQP != qb.qpn {
		t.Fatalf("UD receive: %+v", wc)
	}
	if got := string(qa.mem[40 : 40+len(msg)]); got != msg {
		t.Fatalf("received %q", got)
	}

	for _, s := range []struct {
		c    *Client
		want map[string]uint64
	}{
		{ca, map[string]uint64{"cm_rx_msgs_sidr_req": 1, "cm_tx_msgs_sidr_rep": 1, "cm_tx_msgs_sidr_req": 0, "cm_rx_msgs_sidr_rep": 0, "cm_tx_msgs_rep": 0}},
		{cb, map[string]uint64{"cm_tx_msgs_sidr_req": 1, "cm_rx_msgs_sidr_rep": 1, "cm_rx_msgs_sidr_req": 0, "cm_tx_msgs_sidr_rep": 0, "cm_tx_msgs_req": 0}},
	} {
		var m abi.CountersReply
		call(t, s.c, abi.KindCounters, &abi.Empty{}, nil, &m)
		for k, want := range s.want {
			if m.Counters[k] != want {
				t.Errorf("%s = %d, want %d", k, m.Counters[k], want)
			}
		}
	}
	// rdma_disconnect on a UD ID: nothing to end, no DREQ, no error.
	call(t, cb, abi.KindCMDisconnect, &abi.CMDataReq{H: bid}, nil, &abi.Empty{})
	var m abi.CountersReply
	call(t, cb, abi.KindCounters, &abi.Empty{}, nil, &m)
	if m.Counters["cm_tx_msgs_dreq"] != 0 {
		t.Errorf("a UD disconnect sent %d DREQs", m.Counters["cm_tx_msgs_dreq"])
	}
	var rows abi.ListCMIDsReply
	call(t, cb, abi.KindListCMIDs, &abi.ListCMIDsReq{}, nil, &rows)
	if len(rows.Rows) != 1 || rows.Rows[0].State != "CONNECT" || rows.Rows[0].PS != uint16(mad.PSUDP) ||
		rows.Rows[0].QPN != qb.qpn || rows.Rows[0].Dst.Port() != 18515 {
		t.Fatalf("rdma res on the client's daemon: %+v", rows.Rows)
	}
}

// A UD connect nobody listens for, and one the listener rejects, end in
// UNREACHABLE with the SIDR_REP's status (1 and 2), as cma.c reports a
// SIDR_REP other than success; the first says "connection refused". A
// connected QP cannot make a UD connect.
func TestCMSIDRRefusedAndRejected(t *testing.T) {
	a := cmNIC(t, 0x21)
	b := cmNIC(t, 0x22)
	ca, cb := a.client(t), b.client(t)
	qb := newCMQPOf(t, cb, ib.QPTypeUD)

	ch, id := cmChannel(t, cb)
	_, err := cb.Call(abi.KindCMConnect, &abi.CMConnectReq{H: id, QP: newCMQP(t, cb).h, DGID: a.addr.As16(), ServiceID: udService}, nil, &abi.Empty{})
	wantCode(t, "UD connect with an RC QP", err, abi.CodeInvalid)
	call(t, cb, abi.KindCMConnect, &abi.CMConnectReq{H: id, QP: qb.h, DGID: a.addr.As16(), ServiceID: udService}, nil, &abi.Empty{})
	e := nextEvent(t, cb, ch, cm.EventUnreachable)
	if e.RejectReason != uint16(mad.SIDRUnsupported) || !strings.Contains(e.Err, "connection refused") {
		t.Fatalf("UD connect to no listener: status %d, %q", e.RejectReason, e.Err)
	}

	lch, lid := cmChannel(t, ca)
	call(t, ca, abi.KindCMListen, &abi.CMListenReq{H: lid, ServiceID: udService}, nil, &abi.Empty{})
	ch2, id2 := cmChannel(t, cb)
	call(t, cb, abi.KindCMConnect, &abi.CMConnectReq{H: id2, QP: newCMQPOf(t, cb, ib.QPTypeUD).h, DGID: a.addr.As16(), ServiceID: udService}, nil, &abi.Empty{})
	req := nextEvent(t, ca, lch, cm.EventConnectRequest)
	call(t, ca, abi.KindCMReject, &abi.CMDataReq{H: req.ID}, nil, &abi.Empty{})
	if e := nextEvent(t, cb, ch2, cm.EventUnreachable); e.RejectReason != uint16(mad.SIDRReject) {
		t.Fatalf("rejected UD connect: status %d, %q", e.RejectReason, e.Err)
	}
}
