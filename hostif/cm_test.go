package hostif

import (
	"bytes"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rnicd/rnicd/abi"
	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/internal/looptest"
	"github.com/rnicd/rnicd/rnic/cm"
	"github.com/rnicd/rnicd/wire/mad"
)

// cmNIC is newNIC on an address of its own (looptest) with the CM agent running on the device's QP1.
func cmNIC(t *testing.T, guid uint64) *nic {
	t.Helper()
	n := newNIC(t, looptest.Get(t).String())
	if err := n.srv.StartCM(n.dev.GSI(), guid); err != nil {
		t.Fatal(err)
	}
	// Registered after the device's cleanup, so it runs before: the
	// agent stops while QP1 is still there. Clients registered later
	// are gone by then.
	t.Cleanup(n.srv.StopCM)
	return n
}

// cmQP is a client's RC QP in RESET with a 64 KiB MR (mapped here as
// mem) at IOVA 0x10000 and a CQ.
type cmQP struct {
	rawQP
	mem []byte
}

func newCMQP(t *testing.T, c *Client) *cmQP { t.Helper(); return newCMQPOf(t, c, ib.QPTypeRC) }

// newCMQPOf is newCMQP with a QP of type typ.
func newCMQPOf(t *testing.T, c *Client, typ ib.QPType) *cmQP {
	t.Helper()
	var pd abi.Handle
	call(t, c, abi.KindAllocPD, &abi.Empty{}, nil, &pd)
	q := &cmQP{}
	fd := sealedMemfd(t, 1<<16, true)
	mem, err := unix.Mmap(fd, 0, 1<<16, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(mem) })
	q.mem = mem
	call(t, c, abi.KindRegMR, &abi.RegMRReq{PD: pd.H, Access: 0xf, Length: 1 << 16, IOVA: 0x10000}, []int{fd}, &q.mr)
	var cq abi.RingReply
	q.cq = ringOf(t, mapFD(t, call(t, c, abi.KindCreateCQ, &abi.CreateCQReq{CQE: 64}, nil, &cq)), cq.Send)
	var r abi.RingReply
	qm := mapFD(t, call(t, c, abi.KindCreateQP, &abi.CreateQPReq{PD: pd.H, SendCQ: cq.H, RecvCQ: cq.H, Type: typ,
		Caps: ib.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInlineData: 32}}, nil, &r))
	q.h, q.qpn = r.H, r.QPN
	q.sq, q.rq = ringOf(t, qm, r.Send), ringOf(t, qm, r.Recv)
	return q
}

// cmChannel makes an event channel and a CM ID on it.
func cmChannel(t *testing.T, c *Client) (ch, id uint32) {
	t.Helper()
	var h abi.Handle
	call(t, c, abi.KindCMCreateChannel, &abi.Empty{}, nil, &h)
	ch = h.H
	call(t, c, abi.KindCMCreateID, &abi.Handle{H: ch}, nil, &h)
	return ch, h.H
}

// nextEvent waits for the channel's next event; it must be of type want.
func nextEvent(t *testing.T, c *Client, ch uint32, want cm.EventType) abi.CMEvent {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		var e abi.CMEvent
		call(t, c, abi.KindCMGetEvent, &abi.Handle{H: ch}, nil, &e)
		if e.Type == 0 {
			continue
		}
		if cm.EventType(e.Type) != want {
			t.Fatalf("event %v (%s), want %v", cm.EventType(e.Type), e.Err, want)
		}
		return e
	}
	t.Fatalf("no %v event", want)
	return abi.CMEvent{}
}

// connectTo connects CM ID id with QP q to n's rping service.
func connectTo(t *testing.T, c *Client, id uint32, q *cmQP, n *nic) {
	t.Helper()
	call(t, c, abi.KindCMConnect, &abi.CMConnectReq{H: id, QP: q.h, DGID: n.addr.As16(), ServiceID: rpingService,
		CMParams: abi.CMParams{PathMTU: uint8(ib.MTU1024), RetryCount: 7, RNRRetryCount: 7}}, nil, &abi.Empty{})
}

const rpingService = 0x0000000001060000 | 7174

// Two daemons' host interfaces connect a QP of a client of each through
// their CM agents: the listener gets CONNECT_REQUEST with the REQ's
// values, both sides ESTABLISHED with their QPs in RTS towards each
// other, an RDMA WRITE lands byte for byte, and a Disconnect reaches the
// peer as DISCONNECTED with both QPs in ERR.
func TestCMConnectThroughHostif(t *testing.T) {
	a := cmNIC(t, 0x0200_00ff_fe00_0001)
	b := cmNIC(t, 0x0200_00ff_fe00_0002)
	ca, cb := a.client(t), b.client(t)

	lch, lid := cmChannel(t, ca)
	call(t, ca, abi.KindCMListen, &abi.CMListenReq{H: lid, ServiceID: rpingService}, nil, &abi.Empty{})

	qb := newCMQP(t, cb)
	bch, bid := cmChannel(t, cb)
	pd := []byte("hello from b")
	call(t, cb, abi.KindCMConnect, &abi.CMConnectReq{H: bid, QP: qb.h, DGID: a.addr.As16(), ServiceID: rpingService,
		StartingPSN: 0x123456, CMParams: abi.CMParams{PathMTU: uint8(ib.MTU1024), ResponderResources: 1, InitiatorDepth: 1,
			RetryCount: 7, RNRRetryCount: 7}, PrivateData: pd}, nil, &abi.Empty{})

	req := nextEvent(t, ca, lch, cm.EventConnectRequest)
	if req.Listen != lid || req.ID == 0 || req.ID == lid || req.RemoteQPN != qb.qpn || req.StartingPSN != 0x123456 ||
		req.PathMTU != uint8(ib.MTU1024) || req.RetryCount != 7 || req.RNRRetryCount != 7 ||
		req.RemoteGID != b.addr.As16() || !bytes.HasPrefix(req.PrivateData, pd) {
		t.Fatalf("connect request %+v", req)
	}
	qa := newCMQP(t, ca)
	call(t, ca, abi.KindCMAccept, &abi.CMAcceptReq{H: req.ID, QP: qa.h, StartingPSN: 0x654321, ResponderResources: 1,
		InitiatorDepth: 1, RNRRetryCount: 7}, nil, &abi.Empty{})

	est := nextEvent(t, cb, bch, cm.EventEstablished)
	if est.ID != bid || est.RemoteQPN != qa.qpn || est.StartingPSN != 0x654321 {
		t.Fatalf("established on the active side: %+v", est)
	}
	if e := nextEvent(t, ca, lch, cm.EventEstablished); e.ID != req.ID {
		t.Fatalf("established on the passive side for ID %d, want %d", e.ID, req.ID)
	}
	for _, s := range []struct {
		c      *Client
		q      *cmQP
		dest   uint32
		sq, rq uint32
	}{{ca, qa, qb.qpn, 0x123456, 0x654321}, {cb, qb, qa.qpn, 0x654321, 0x123456}} { // each sends from the peer's Starting PSN, as Linux
		var r abi.QPAttrReply
		call(t, s.c, abi.KindQueryQP, &abi.Handle{H: s.q.h}, nil, &r)
		if r.Attr.State != ib.QPSRTS || r.Attr.DestQPN != s.dest || r.Attr.SQPSN != s.sq || r.Attr.RQPSN != s.rq {
			t.Fatalf("QP %d after the exchange: %+v", s.q.qpn, r.Attr)
		}
	}

	// Data over the connection the CM made.
	copy(qb.mem, "written through a CM connection")
	qb.post(t, cb, &ib.SendWR{WRID: 9, Opcode: ib.WRRDMAWrite, Flags: ib.SendSignaled,
		SGL: []ib.SGE{{Addr: 0x10000, Length: 31, LKey: qb.mr.LKey}}, RemoteAddr: 0x18000, RKey: qa.mr.RKey}, nil)
	var cons uint32
	if wc := poll(t, qb.cq, &cons); wc.Status != ib.WCSuccess || wc.WRID != 9 {
		t.Fatalf("write: %+v", wc)
	}
	if got := string(qa.mem[0x8000 : 0x8000+31]); got != "written through a CM connection" {
		t.Fatalf("passive side's memory holds %q", got)
	}

	call(t, cb, abi.KindCMDisconnect, &abi.CMDataReq{H: bid}, nil, &abi.Empty{})
	nextEvent(t, ca, lch, cm.EventDisconnected)
	nextEvent(t, cb, bch, cm.EventDisconnected)
	// The passive side's own rdma_disconnect after the peer's: nothing
	// to send, and not an error (rping's server does this at its end).
	call(t, ca, abi.KindCMDisconnect, &abi.CMDataReq{H: req.ID}, nil, &abi.Empty{})
	if st := qpState(t, ca, qa.h); st != ib.QPSErr {
		t.Fatalf("passive QP in %v after DREQ", st)
	}
	// The passive side's CM counters, one message each way per step.
	var m abi.CountersReply
	call(t, ca, abi.KindCounters, &abi.Empty{}, nil, &m)
	for k, want := range map[string]uint64{"cm_rx_msgs_req": 1, "cm_tx_msgs_rep": 1, "cm_rx_msgs_rtu": 1,
		"cm_rx_msgs_dreq": 1, "cm_tx_msgs_drep": 1, "cm_tx_msgs_dreq": 0, "cm_tx_msgs_req": 0, "cm_rx_msgs_rej": 0} {
		if m.Counters[k] != want {
			t.Errorf("%s = %d, want %d", k, m.Counters[k], want)
		}
	}
}

// A connect to a service nobody listens on is refused at once: REJECTED
// with REJ reason 8, "connection refused".
func TestCMConnectRefused(t *testing.T) {
	a := cmNIC(t, 3)
	b := cmNIC(t, 4)
	cb := b.client(t)
	qb := newCMQP(t, cb)
	bch, bid := cmChannel(t, cb)
	start := time.Now()
	connectTo(t, cb, bid, qb, a)
	e := nextEvent(t, cb, bch, cm.EventRejected)
	if e.RejectReason != uint16(mad.RejInvalidServiceID) || !bytes.Contains([]byte(e.Err), []byte("connection refused")) {
		t.Fatalf("rejected: reason %d, %q", e.RejectReason, e.Err)
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Fatalf("refused after %v: a REJ answers at once, not a timeout", d)
	}
}

// A client that dies with an established connection and a listener: its
// daemon sends the DREQ (the peer sees DISCONNECTED) and frees its CM
// IDs, channel and listener (a new connect to the service is refused).
func TestCMClientDies(t *testing.T) {
	a := cmNIC(t, 5)
	b := cmNIC(t, 6)
	ca, cb := a.client(t), b.client(t)
	lch, lid := cmChannel(t, ca)
	call(t, ca, abi.KindCMListen, &abi.CMListenReq{H: lid, ServiceID: rpingService}, nil, &abi.Empty{})
	qb := newCMQP(t, cb)
	bch, bid := cmChannel(t, cb)
	connectTo(t, cb, bid, qb, a)
	req := nextEvent(t, ca, lch, cm.EventConnectRequest)
	qa := newCMQP(t, ca)
	call(t, ca, abi.KindCMAccept, &abi.CMAcceptReq{H: req.ID, QP: qa.h, RNRRetryCount: 7}, nil, &abi.Empty{})
	nextEvent(t, cb, bch, cm.EventEstablished)
	if n := a.srv.Objects()["cm_id"]; n != 2 {
		t.Fatalf("%d CM IDs on the passive daemon, want 2 (listener and connection)", n)
	}

	ca.Close()
	e := nextEvent(t, cb, bch, cm.EventDisconnected)
	if e.ID != bid {
		t.Fatalf("disconnected ID %d, want %d", e.ID, bid)
	}
	for deadline := time.Now().Add(10 * time.Second); a.srv.Objects()["cm_id"] != 0 || a.srv.Objects()["cm_event_channel"] != 0; {
		if time.Now().After(deadline) {
			t.Fatalf("the dead client's CM objects remain: %v", a.srv.Objects())
		}
		time.Sleep(5 * time.Millisecond)
	}

	// The listener went with it: the service is refused now.
	qb2 := newCMQP(t, cb)
	ch2, id2 := cmChannel(t, cb)
	connectTo(t, cb, id2, qb2, a)
	if e := nextEvent(t, cb, ch2, cm.EventRejected); e.RejectReason != uint16(mad.RejInvalidServiceID) {
		t.Fatalf("connect after the listener's owner died: reason %d", e.RejectReason)
	}
}

// CM requests that name what is not the client's, or not of the right
// kind, or come in the wrong state, are refused and change nothing: a
// client cannot listen with, connect or read the events of another
// client's CM ID, nor have the CM move another client's QP.
func TestCMHostileRequests(t *testing.T) {
	n := cmNIC(t, 7)
	x, y := n.client(t), n.client(t)
	xch, xid := cmChannel(t, x)
	qx := newCMQP(t, x)

	// Handles are per client: y, holding nothing yet, names x's.
	_, err := y.Call(abi.KindCMListen, &abi.CMListenReq{H: xid, ServiceID: rpingService}, nil, &abi.Empty{})
	wantCode(t, "listen on another client's CM ID", err, abi.CodeNoHandle)
	_, err = y.Call(abi.KindCMGetEvent, &abi.Handle{H: xch}, nil, &abi.CMEvent{})
	wantCode(t, "events of another client's channel", err, abi.CodeNoHandle)
	_, yid := cmChannel(t, y) // handles 1 and 2; x's QP is handle 6
	_, err = y.Call(abi.KindCMConnect, &abi.CMConnectReq{H: yid, QP: qx.h, DGID: n.addr.As16(), ServiceID: rpingService,
		CMParams: abi.CMParams{PathMTU: uint8(ib.MTU1024)}}, nil, &abi.Empty{})
	wantCode(t, "connect with another client's QP", err, abi.CodeNoHandle)
	_, err = x.Call(abi.KindCMGetEvent, &abi.Handle{H: xid}, nil, &abi.CMEvent{})
	wantCode(t, "events of a CM ID handle", err, abi.CodeNoHandle)
	_, err = x.Call(abi.KindCMConnect, &abi.CMConnectReq{H: xch, QP: qx.h}, nil, &abi.Empty{})
	wantCode(t, "connect with a channel handle", err, abi.CodeNoHandle)
	_, err = x.Call(abi.KindCMCreateChannel, &abi.Empty{}, []int{eventfd(t)}, &abi.Handle{})
	wantCode(t, "channel with a descriptor", err, abi.CodeMalformed)
	_, err = x.Call(abi.KindCMAccept, &abi.CMAcceptReq{H: xid, QP: qx.h}, nil, &abi.Empty{})
	wantCode(t, "accept without a connect request", err, abi.CodeInvalid)
	_, err = x.Call(abi.KindCMConnect, &abi.CMConnectReq{H: xid, QP: qx.h, DGID: n.addr.As16(), ServiceID: rpingService,
		CMParams: abi.CMParams{PathMTU: 0}}, nil, &abi.Empty{})
	wantCode(t, "connect with path MTU code 0", err, abi.CodeInvalid)
	if st := qpState(t, x, qx.h); st != ib.QPSReset {
		t.Fatalf("the refused connect left the QP in %v", st)
	}
	call(t, x, abi.KindCMListen, &abi.CMListenReq{H: xid, ServiceID: rpingService}, nil, &abi.Empty{})
	_, err = y.Call(abi.KindCMListen, &abi.CMListenReq{H: yid, ServiceID: rpingService}, nil, &abi.Empty{})
	wantCode(t, "a second listener on the service", err, abi.CodeInvalid)
	_, err = x.Call(abi.KindCMDestroyChannel, &abi.Handle{H: xch}, nil, &abi.Empty{})
	wantCode(t, "destroy a channel its CM ID uses", err, abi.CodeBusy)

	// The QP the CM agent would move must be bound by its owner: a QPN
	// alone is not enough.
	if err := (*cmQPs)(n.srv).ModifyQP(qx.qpn, &ib.QPAttr{State: ib.QPSErr}, ib.AttrState); err == nil {
		t.Fatal("the agent moved a QP no CM ID of its owner holds")
	}
}

// A listener's connect requests are charged to its client from the
// moment their REQs come, as CM IDs: with its IDs two short of the most,
// two of four REQs wait for it and two are dropped unanswered
// (cm_listen_drops), and the client can create no ID until it has
// fetched a request and destroyed its ID. A backlog of 1 on a second
// listener holds one request of two.
func TestCMConnectRequestsCharged(t *testing.T) {
	a := cmNIC(t, 0x0200_00ff_fe00_0001)
	b := cmNIC(t, 0x0200_00ff_fe00_0002)
	ca, cb := a.client(t), b.client(t)
	lch, lid := cmChannel(t, ca)
	call(t, ca, abi.KindCMListen, &abi.CMListenReq{H: lid, ServiceID: rpingService}, nil, &abi.Empty{})
	for range maxCMIDs - 3 {
		call(t, ca, abi.KindCMCreateID, &abi.Handle{H: lch}, nil, &abi.Handle{})
	}
	bch, _ := cmChannel(t, cb)
	connect := func(n int, service uint64) {
		for range n {
			var h abi.Handle
			call(t, cb, abi.KindCMCreateID, &abi.Handle{H: bch}, nil, &h)
			q := newCMQP(t, cb)
			call(t, cb, abi.KindCMConnect, &abi.CMConnectReq{H: h.H, QP: q.h, DGID: a.addr.As16(), ServiceID: service,
				CMParams: abi.CMParams{PathMTU: uint8(ib.MTU1024), RetryCount: 7, RNRRetryCount: 7}}, nil, &abi.Empty{})
		}
	}
	waitCM := func(what string, ok func(m map[string]uint64) bool) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			if m := a.srv.CMCounters(); ok(m) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("waiting for %s: %v", what, a.srv.CMCounters())
			}
		}
	}
	connect(4, rpingService)
	waitCM("4 REQs, 2 dropped", func(m map[string]uint64) bool {
		return m["cm_rx_msgs_req"] >= 4 && m["cm_listen_drops"] >= 2
	})
	if m := a.srv.CMCounters(); m["cm_listen_drops"] != 2 || m["cm_tx_msgs_rej"] != 0 {
		t.Errorf("listen drops %d, REJs %d; want 2 and 0", m["cm_listen_drops"], m["cm_tx_msgs_rej"])
	}
	if _, err := ca.Call(abi.KindCMCreateID, &abi.Handle{H: lch}, nil, &abi.Handle{}); err == nil {
		t.Fatal("create_id worked with two connect requests charged")
	}
	e := nextEvent(t, ca, lch, cm.EventConnectRequest)
	if _, err := ca.Call(abi.KindCMCreateID, &abi.Handle{H: lch}, nil, &abi.Handle{}); err == nil {
		t.Fatal("create_id worked with the fetched request's ID held")
	}
	call(t, ca, abi.KindCMDestroyID, &abi.Handle{H: e.ID}, nil, &abi.Empty{})
	var h abi.Handle
	call(t, ca, abi.KindCMCreateID, &abi.Handle{H: lch}, nil, &h)
	call(t, ca, abi.KindCMDestroyID, &abi.Handle{H: h.H}, nil, &abi.Empty{})
	call(t, ca, abi.KindCMDestroyID, &abi.Handle{H: lid}, nil, &abi.Empty{})

	// A second client, backlog 1.
	cc := a.client(t)
	_, lid2 := cmChannel(t, cc)
	call(t, cc, abi.KindCMListen, &abi.CMListenReq{H: lid2, ServiceID: rpingService + 1, Backlog: 1}, nil, &abi.Empty{})
	connect(2, rpingService+1)
	waitCM("a third drop", func(m map[string]uint64) bool { return m["cm_listen_drops"] >= 3 })
}
