package hostif

import (
	"testing"

	"github.com/rnicd/rnicd/abi"
	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/rnic/cm"
	"github.com/rnicd/rnicd/wire/mad"
)

// xrcQPs makes a client's XRC initiator and target QPs (a domain, a CQ
// and a PD of their own).
func xrcQPs(t *testing.T, c *Client) (ini, tgt abi.RingReply) {
	t.Helper()
	var pd, x abi.Handle
	call(t, c, abi.KindAllocPD, &abi.Empty{}, nil, &pd)
	call(t, c, abi.KindOpenXRCD, &abi.Empty{}, nil, &x)
	var cq abi.RingReply
	closeAll(call(t, c, abi.KindCreateCQ, &abi.CreateCQReq{CQE: 4}, nil, &cq))
	closeAll(call(t, c, abi.KindCreateXRCQP, &abi.CreateXRCQPReq{Type: ib.QPTypeXRCSend, PD: pd.H, SendCQ: cq.H,
		Caps: ib.QPCap{MaxSendWR: 4, MaxSendSGE: 1}}, nil, &ini))
	closeAll(call(t, c, abi.KindCreateXRCQP, &abi.CreateXRCQPReq{Type: ib.QPTypeXRCRecv, XRCD: x.H}, nil, &tgt))
	return ini, tgt
}

// XRC through the CM agents (rdma_xserver -c x): an initiator connects
// with an XRC REQ, which only a target may answer, and an RC REQ no
// target; a target cannot connect. Once accepted both QPs are in RTS
// towards each other, the initiator's destination the target's QPN.
func TestCMXRCThroughHostif(t *testing.T) {
	a := cmNIC(t, 0x0200_00ff_fe00_0011)
	b := cmNIC(t, 0x0200_00ff_fe00_0012)
	ca, cb := a.client(t), b.client(t)
	service := mad.ServiceID(mad.PSIB, 7471)

	lch, lid := cmChannel(t, ca)
	call(t, ca, abi.KindCMListen, &abi.CMListenReq{H: lid, ServiceID: service}, nil, &abi.Empty{})
	ini, tgtB := xrcQPs(t, cb)
	_, tgtA := xrcQPs(t, ca)
	rc := newCMQP(t, ca)
	_, bid := cmChannel(t, cb)
	connect := func(qp uint32) error {
		_, err := cb.Call(abi.KindCMConnect, &abi.CMConnectReq{H: bid, QP: qp, DGID: a.addr.As16(), ServiceID: service,
			StartingPSN: 0x123456, CMParams: abi.CMParams{PathMTU: uint8(ib.MTU1024), InitiatorDepth: 1,
				RetryCount: 7, RNRRetryCount: 7}}, nil, &abi.Empty{})
		return err
	}
	wantCode(t, "connect from an XRC target", connect(tgtB.H), abi.CodeInvalid)
	if err := connect(ini.H); err != nil {
		t.Fatal(err)
	}
	req := nextEvent(t, ca, lch, cm.EventConnectRequest)
	if req.RemoteQPN != ini.QPN || req.StartingPSN != 0x123456 || req.InitiatorDepth != 1 || req.ResponderResources != 0 {
		t.Fatalf("connect request %+v", req)
	}
	accept := func(qp uint32) error {
		_, err := ca.Call(abi.KindCMAccept, &abi.CMAcceptReq{H: req.ID, QP: qp, StartingPSN: 0x654321,
			ResponderResources: 1, RNRRetryCount: 7}, nil, &abi.Empty{})
		return err
	}
	wantCode(t, "an RC QP answering an XRC REQ", accept(rc.h), abi.CodeInvalid)
	if err := accept(tgtA.H); err != nil {
		t.Fatal(err)
	}
	nextEvent(t, ca, lch, cm.EventEstablished)
	for _, s := range []struct {
		c       *Client
		h, dest uint32
	}{{ca, tgtA.H, ini.QPN}, {cb, ini.H, tgtA.QPN}} {
		var r abi.QPAttrReply
		call(t, s.c, abi.KindQueryQP, &abi.Handle{H: s.h}, nil, &r)
		if r.Attr.State != ib.QPSRTS || r.Attr.DestQPN != s.dest {
			t.Fatalf("QP %d after the exchange: %+v", s.h, r.Attr)
		}
	}

	// An RC REQ to the same listener cannot be answered by a target.
	qb := newCMQP(t, cb)
	_, bid2 := cmChannel(t, cb)
	call(t, cb, abi.KindCMConnect, &abi.CMConnectReq{H: bid2, QP: qb.h, DGID: a.addr.As16(), ServiceID: service,
		CMParams: abi.CMParams{PathMTU: uint8(ib.MTU1024), RetryCount: 7, RNRRetryCount: 7}}, nil, &abi.Empty{})
	req2 := nextEvent(t, ca, lch, cm.EventConnectRequest)
	_, tgtA2 := xrcQPs(t, ca)
	_, err := ca.Call(abi.KindCMAccept, &abi.CMAcceptReq{H: req2.ID, QP: tgtA2.H}, nil, &abi.Empty{})
	wantCode(t, "an XRC target answering an RC REQ", err, abi.CodeInvalid)
	call(t, ca, abi.KindCMAccept, &abi.CMAcceptReq{H: req2.ID, QP: rc.h, RNRRetryCount: 7}, nil, &abi.Empty{})
	nextEvent(t, ca, lch, cm.EventEstablished)
}

// A listener that names its QP type hears only requests of that type,
// as the kernel's rdma_cm listener (cma_ib_check_req_qp_type): an RC
// REQ to an XRC_RECV listener, and an XRC REQ to an RC one, are
// REJECTED with reason 28 (consumer defined) and never queued; a
// listener of no type hears both (above).
func TestCMListenerQPType(t *testing.T) {
	a := cmNIC(t, 0x0200_00ff_fe00_0021)
	b := cmNIC(t, 0x0200_00ff_fe00_0022)
	ca, cb := a.client(t), b.client(t)
	lch, lid := cmChannel(t, ca)
	xrcService, rcService := mad.ServiceID(mad.PSIB, 7471), mad.ServiceID(mad.PSIB, 7472)
	call(t, ca, abi.KindCMListen, &abi.CMListenReq{H: lid, ServiceID: xrcService, QPType: uint8(ib.QPTypeXRCRecv)}, nil, &abi.Empty{})
	var rcl abi.Handle
	call(t, ca, abi.KindCMCreateID, &abi.Handle{H: lch}, nil, &rcl)
	call(t, ca, abi.KindCMListen, &abi.CMListenReq{H: rcl.H, ServiceID: rcService, QPType: uint8(ib.QPTypeRC)}, nil, &abi.Empty{})

	ini, _ := xrcQPs(t, cb)
	rc := newCMQP(t, cb)
	for _, c := range []struct {
		what    string
		qp      uint32
		service uint64
	}{{"an RC REQ to an XRC_RECV listener", rc.h, xrcService}, {"an XRC REQ to an RC listener", ini.H, rcService}} {
		ch, id := cmChannel(t, cb)
		call(t, cb, abi.KindCMConnect, &abi.CMConnectReq{H: id, QP: c.qp, DGID: a.addr.As16(), ServiceID: c.service,
			CMParams: abi.CMParams{PathMTU: uint8(ib.MTU1024), RetryCount: 7, RNRRetryCount: 7}}, nil, &abi.Empty{})
		if e := nextEvent(t, cb, ch, cm.EventRejected); e.RejectReason != uint16(mad.RejConsumerDefined) {
			t.Errorf("%s: rejected with reason %d, want 28", c.what, e.RejectReason)
		}
		var e abi.CMEvent
		call(t, ca, abi.KindCMGetEvent, &abi.Handle{H: lch}, nil, &e)
		if e.Type != 0 {
			t.Errorf("%s: the listener's channel holds %+v", c.what, e)
		}
	}
}
