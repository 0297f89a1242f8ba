package cm

import (
	"errors"
	"math/bits"
	"strings"
	"testing"
	"time"

	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/wire/mad"
)

// The timer arithmetic of IBTA 12.7.31: 4.096 us * 2^t.
func TestIBTime(t *testing.T) {
	for _, c := range []struct {
		code uint8
		want time.Duration
	}{
		{0, 4096 * time.Nanosecond},
		{18, 1073741824 * time.Nanosecond},
		{20, 4294967296 * time.Nanosecond}, // rdma_cm's CM response timeout: 4.3 s
		{31, 4096 * time.Nanosecond << 31},
		{40, 4096 * time.Nanosecond << 31}, // cut, no overflow
	} {
		if got := ibTime(c.code); got != c.want {
			t.Errorf("ibTime(%d) = %v, want %v", c.code, got, c.want)
		}
	}
}

// A whole rping-like connection, message by message and field by field:
// REQ, REP, RTU, both QPs through INIT, RTR, RTS with the agreed values,
// then DREQ, DREP, TIMEWAIT and its end.
func TestConnectAndDisconnect(t *testing.T) {
	w := newWorld(t, nil)
	w.listen()
	a, err := w.a.cm.Connect(rpingConnect())
	if err != nil {
		t.Fatal(err)
	}
	if a.State() != StateREQSent {
		t.Fatalf("after Connect: %v", a.State())
	}
	// The REQ on the wire.
	if len(w.wire) != 1 || w.wire[0].to != gidB || w.wire[0].attr() != mad.AttrREQ {
		t.Fatalf("wire after Connect: %v", attrs(w.wire))
	}
	m := mad.MAD(w.wire[0].b)
	wantTID := uint64(2)<<32 | uint64(bits.ReverseBytes32(a.LocalCommID()))
	if m.Header() != mad.CMHeader(mad.AttrREQ, wantTID) {
		t.Errorf("REQ header %+v, want TID %#x", m.Header(), wantTID)
	}
	req := mad.REQ(m.Data()).Fields()
	wantREQ := mad.REQFields{
		LocalCommID: a.LocalCommID(), ServiceID: 0x0000000001061c06, LocalCAGUID: guidA,
		LocalQPN: qpnA, ResponderResources: 1, InitiatorDepth: 1, RemoteCMResponseTimeout: 20,
		StartingPSN: psnA, LocalCMResponseTimeout: 20, RetryCount: 7, PKey: 0xffff, PathMTU: 3,
		RNRRetryCount: 7, MaxCMRetries: 15, PrimaryLocalLID: 0xffff, PrimaryRemoteLID: 0xffff,
		PrimaryLocalGID: gidA, PrimaryRemoteGID: gidB, PrimaryFlowLabel: 0x6cc87, PrimaryHopLimit: 64,
		PrimaryLocalACKTimeout: 19,
	}
	if req != wantREQ {
		t.Errorf("REQ\n got %+v\nwant %+v", req, wantREQ)
	}
	// a's QP went to INIT with remote WRITE, READ and atomics (it accepts
	// one READ).
	if c := w.a.qp.calls; len(c) != 1 || c[0].qpn != qpnA || c[0].attr.State != ib.QPSInit ||
		c[0].attr.AccessFlags != ib.AccessRemoteWrite|ib.AccessRemoteRead|ib.AccessRemoteAtomic ||
		c[0].mask != ib.AttrState|ib.AttrPKeyIndex|ib.AttrPort|ib.AttrAccessFlags || c[0].attr.PortNum != 1 {
		t.Errorf("a's QP calls after Connect: %+v", c)
	}

	w.deliver()
	if len(w.b.events) != 1 {
		t.Fatalf("b events %v", eventTypes(w.b.events))
	}
	cr := w.b.events[0]
	b := cr.ID
	wantRemote := Remote{GID: gidA, CAGUID: guidA, ServiceID: rpingService, QPN: qpnA, StartingPSN: psnA,
		PathMTU: 3, ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}
	if cr.Type != EventConnectRequest || cr.Remote != wantRemote || cr.Listener.Context() != "rping server" ||
		b.Context() != "rping server" || b.State() != StateREQRcvd || len(cr.PrivateData) != mad.REQPrivateDataLen {
		t.Fatalf("ConnectRequest %+v (state %v)", cr, b.State())
	}
	if len(w.b.qp.calls) != 0 {
		t.Fatalf("b's QP moved before Accept: %+v", w.b.qp.calls)
	}

	if err := b.Accept(rpingAccept()); err != nil {
		t.Fatal(err)
	}
	if b.State() != StateREPSent || len(w.wire) != 1 || w.wire[0].attr() != mad.AttrREP {
		t.Fatalf("after Accept: %v, wire %v", b.State(), attrs(w.wire))
	}
	m = mad.MAD(w.wire[0].b)
	if m.TID() != wantTID {
		t.Errorf("REP TID %#x, want the REQ's %#x", m.TID(), wantTID)
	}
	rep := mad.REP(m.Data()).Fields()
	wantREP := mad.REPFields{LocalCommID: b.LocalCommID(), RemoteCommID: a.LocalCommID(), LocalQPN: qpnB,
		StartingPSN: psnB, ResponderResources: 1, InitiatorDepth: 1, TargetACKDelay: 15, RNRRetryCount: 7,
		LocalCAGUID: guidB}
	if rep != wantREP {
		t.Errorf("REP\n got %+v\nwant %+v", rep, wantREP)
	}
	// Each side receives from the PSN its own message carried and sends
	// from the peer's, as Linux (ID.ownPSN).
	checkQPToRTS(t, "b", w.b.qp, qpnB, qpnA, psnB, psnA, gidA)

	w.deliver() // REP to a, RTU to b
	checkQPToRTS(t, "a", w.a.qp, qpnA, qpnB, psnA, psnB, gidB)
	if a.State() != StateEstablished || b.State() != StateEstablished {
		t.Fatalf("a %v, b %v", a.State(), b.State())
	}
	if e := w.a.events; len(e) != 1 || e[0].Type != EventEstablished || e[0].Remote.QPN != qpnB ||
		e[0].Remote.StartingPSN != psnB || e[0].Remote.CAGUID != guidB {
		t.Errorf("a events %+v", e)
	}
	if e := w.b.events; len(e) != 2 || e[1].Type != EventEstablished || e[1].ID != b {
		t.Errorf("b events %v", eventTypes(e))
	}
	if _, ok := w.a.cm.NextDeadline(); ok {
		t.Error("a timer still runs after the REP")
	}
	if _, ok := w.b.cm.NextDeadline(); ok {
		t.Error("b timer still runs after the RTU")
	}

	// Disconnect from a.
	if err := a.Disconnect([]byte("bye")); err != nil {
		t.Fatal(err)
	}
	if a.State() != StateDREQSent || len(w.wire) != 1 || w.wire[0].attr() != mad.AttrDREQ {
		t.Fatalf("after Disconnect: %v, wire %v", a.State(), attrs(w.wire))
	}
	dreq := mad.DREQ(mad.MAD(w.wire[0].b).Data())
	if dreq.LocalCommID() != a.LocalCommID() || dreq.RemoteCommID() != b.LocalCommID() || dreq.RemoteQPN() != qpnB ||
		string(dreq.PrivateData()[:3]) != "bye" {
		t.Errorf("DREQ %+v", dreq.Fields())
	}
	seen := w.deliver()
	if !equal(attrs(seen), []mad.AttrID{mad.AttrDREQ, mad.AttrDREP}) {
		t.Fatalf("disconnect exchange %v", attrs(seen))
	}
	if mad.MAD(seen[1].b).TID() != mad.MAD(seen[0].b).TID() {
		t.Error("DREP does not echo the DREQ's TID")
	}
	for _, n := range []*node{w.a, w.b} {
		last := n.events[len(n.events)-1]
		if last.Type != EventDisconnected || last.Err != nil {
			t.Errorf("last event %+v, want Disconnected", last)
		}
		if s := n.qp.states(); s[len(s)-1] != ib.QPSErr {
			t.Errorf("QP states %v, want ERR last", s)
		}
	}
	if string(w.b.events[2].PrivateData[:3]) != "bye" {
		t.Error("b's Disconnected lacks the DREQ's private data")
	}
	if a.State() != StateTimewait || b.State() != StateTimewait {
		t.Fatalf("a %v, b %v, want TIMEWAIT", a.State(), b.State())
	}
	// TIMEWAIT lasts the local ACK timeout: 4.096 us * 2^19.
	w.advance(ibTime(19) - time.Nanosecond)
	if a.State() != StateTimewait || w.a.cm.NumIDs() != 1 {
		t.Fatalf("TIMEWAIT ended early: %v", a.State())
	}
	w.advance(time.Nanosecond)
	for _, n := range []*node{w.a, w.b} {
		if last := n.events[len(n.events)-1]; last.Type != EventTimewaitExit || n.cm.NumIDs() != 0 {
			t.Errorf("after timewait: %v, %d IDs", eventTypes(n.events), n.cm.NumIDs())
		}
	}
	if a.State() != StateIdle {
		t.Errorf("a %v after TIMEWAIT", a.State())
	}
	if len(w.wire) != 0 {
		t.Errorf("stray MADs %v", attrs(w.wire))
	}
	ca, cb := w.a.cm.Counters(), w.b.cm.Counters()
	if ca.Sent[mad.AttrREQ] != 1 || ca.Sent[mad.AttrRTU] != 1 || ca.Sent[mad.AttrDREQ] != 1 ||
		ca.Received[mad.AttrREP] != 1 || ca.Received[mad.AttrDREP] != 1 ||
		cb.Sent[mad.AttrREP] != 1 || cb.Sent[mad.AttrDREP] != 1 || cb.Received[mad.AttrREQ] != 1 ||
		cb.Received[mad.AttrRTU] != 1 || ca.Retries+cb.Retries+ca.Dropped+cb.Dropped != 0 {
		t.Errorf("counters a %+v b %+v", ca, cb)
	}
}

// checkQPToRTS checks that qp went INIT, RTR, RTS with a connection's values.
func checkQPToRTS(t *testing.T, who string, qp *fakeQP, qpn, destQPN, rqPSN, sqPSN uint32, dgid mad.GID) {
	t.Helper()
	c := qp.calls
	if !equal(qp.states(), []ib.QPState{ib.QPSInit, ib.QPSRTR, ib.QPSRTS}) {
		t.Fatalf("%s: QP states %v, want INIT, RTR, RTS", who, qp.states())
	}
	rtr, rts := c[1], c[2]
	if rtr.qpn != qpn || rtr.attr.DestQPN != destQPN || rtr.attr.RQPSN != rqPSN || rtr.attr.PathMTU != ib.MTU1024 ||
		rtr.attr.AH.DGID != dgid || rtr.attr.AH.HopLimit != 64 || rtr.attr.AH.FlowLabel != 0x6cc87 ||
		rtr.attr.MaxDestRdAtomic != 1 ||
		rtr.mask != ib.AttrState|ib.AttrAV|ib.AttrPathMTU|ib.AttrDestQPN|ib.AttrRQPSN|ib.AttrMaxDestRdAtomic|ib.AttrMinRNRTimer {
		t.Errorf("%s: RTR %+v", who, rtr)
	}
	if rts.qpn != qpn || rts.attr.SQPSN != sqPSN || rts.attr.Timeout != 19 || rts.attr.RetryCnt != 7 ||
		rts.attr.RNRRetry != 7 || rts.attr.MaxRdAtomic != 1 ||
		rts.mask != ib.AttrState|ib.AttrSQPSN|ib.AttrTimeout|ib.AttrRetryCnt|ib.AttrRNRRetry|ib.AttrMaxQPRdAtomic {
		t.Errorf("%s: RTS %+v", who, rts)
	}
}

// A REQ to a service ID nobody listens on is refused at once with REJ
// reason 8, which the active side reports as "connection refused".
func TestConnectRefused(t *testing.T) {
	w := newWorld(t, nil)
	a, err := w.a.cm.Connect(rpingConnect())
	if err != nil {
		t.Fatal(err)
	}
	seen := w.deliver()
	if !equal(attrs(seen), []mad.AttrID{mad.AttrREQ, mad.AttrREJ}) {
		t.Fatalf("exchange %v", attrs(seen))
	}
	rej := mad.REJ(mad.MAD(seen[1].b).Data())
	if rej.LocalCommID() != 0 || rej.RemoteCommID() != a.LocalCommID() || rej.Reason() != mad.RejInvalidServiceID ||
		rej.MessageRejected() != mad.MsgKindREQ || mad.MAD(seen[1].b).TID() != mad.MAD(seen[0].b).TID() {
		t.Errorf("REJ %+v", rej.Fields())
	}
	e := w.a.events
	var re *RejectError
	if len(e) != 1 || e[0].Type != EventRejected || !errors.As(e[0].Err, &re) || !re.Refused() ||
		!strings.Contains(e[0].Err.Error(), "connection refused") {
		t.Fatalf("a events %+v", e)
	}
	if a.State() != StateIdle || w.a.cm.NumIDs() != 0 || w.b.cm.NumIDs() != 0 {
		t.Errorf("a %v, IDs %d/%d", a.State(), w.a.cm.NumIDs(), w.b.cm.NumIDs())
	}
	if s := w.a.qp.states(); !equal(s, []ib.QPState{ib.QPSInit, ib.QPSErr}) {
		t.Errorf("a's QP %v", s)
	}
	if _, ok := w.a.cm.NextDeadline(); ok {
		t.Error("REQ timer still runs after the REJ")
	}
}

// reqTimeout is how long the active side waits for each REQ's answer:
// two packet lifetimes (18) and the peer's response time (20).
var reqTimeout = 2*ibTime(18) + ibTime(20)

// A lost REQ is resent after the timeout, not before, and the connection
// still forms.
func TestLostREQRetried(t *testing.T) {
	w := newWorld(t, nil)
	w.listen()
	lost := 0
	w.drop = func(p packet) bool {
		if p.attr() == mad.AttrREQ && lost == 0 {
			lost++
			return true
		}
		return false
	}
	a, _ := w.a.cm.Connect(rpingConnect())
	w.deliver()
	first := w.a.cm.cfg.Now()
	if d, ok := w.a.cm.NextDeadline(); !ok || d != first.Add(reqTimeout) {
		t.Fatalf("REQ deadline %v, want %v", d, first.Add(reqTimeout))
	}
	w.advance(reqTimeout - time.Nanosecond)
	if len(w.wire) != 0 {
		t.Fatalf("resent early: %v", attrs(w.wire))
	}
	w.advance(time.Nanosecond)
	if !equal(attrs(w.wire), []mad.AttrID{mad.AttrREQ}) {
		t.Fatalf("after the timeout: %v", attrs(w.wire))
	}
	w.deliver()
	if err := w.b.events[0].ID.Accept(rpingAccept()); err != nil {
		t.Fatal(err)
	}
	w.deliver()
	if a.State() != StateEstablished || w.a.cm.Counters().Retries != 1 {
		t.Errorf("a %v, retries %d", a.State(), w.a.cm.Counters().Retries)
	}
}

// A lost REP is resent by the passive side after the REQ's local CM
// response timeout, before the active side's REQ timer, and the
// connection still forms.
func TestLostREPRetried(t *testing.T) {
	w := newWorld(t, nil)
	w.listen()
	lost := 0
	w.drop = func(p packet) bool {
		if p.attr() == mad.AttrREP && lost == 0 {
			lost++
			return true
		}
		return false
	}
	a, _ := w.a.cm.Connect(rpingConnect())
	w.deliver()
	b := w.b.events[0].ID
	b.Accept(rpingAccept())
	w.deliver()
	if b.State() != StateREPSent || a.State() != StateREQSent {
		t.Fatalf("after the lost REP: a %v, b %v", a.State(), b.State())
	}
	w.advance(ibTime(20))
	if !equal(attrs(w.wire), []mad.AttrID{mad.AttrREP}) {
		t.Fatalf("b resent %v", attrs(w.wire))
	}
	w.deliver()
	if a.State() != StateEstablished || b.State() != StateEstablished || w.b.cm.Counters().Retries != 1 ||
		w.a.cm.Counters().Retries != 0 {
		t.Errorf("a %v, b %v, counters %+v", a.State(), b.State(), w.b.cm.Counters())
	}
}

// Every REQ lost: 1 + 15 sends, a timeout apart, then Unreachable with
// the QP in ERR and nothing left.
func TestREQRetriesRunOut(t *testing.T) {
	w := newWorld(t, nil)
	w.drop = func(packet) bool { return true }
	a, _ := w.a.cm.Connect(rpingConnect())
	sent := len(w.deliver())
	for i := 0; i < 15; i++ {
		w.advance(reqTimeout)
		sent += len(w.deliver())
		if len(w.a.events) != 0 {
			t.Fatalf("gave up after %d sends", sent)
		}
	}
	if sent != 16 {
		t.Fatalf("%d REQs sent, want 16", sent)
	}
	w.advance(reqTimeout)
	if len(w.wire) != 0 {
		t.Fatalf("a 17th send: %v", attrs(w.wire))
	}
	e := w.a.events
	if len(e) != 1 || e[0].Type != EventUnreachable || !errors.Is(e[0].Err, ErrTimeout) {
		t.Fatalf("events %+v", e)
	}
	if s := w.a.qp.states(); !equal(s, []ib.QPState{ib.QPSInit, ib.QPSErr}) || a.State() != StateIdle ||
		w.a.cm.NumIDs() != 0 || w.a.cm.Counters().Timeouts != 1 || w.a.cm.Counters().Retries != 15 {
		t.Errorf("QP %v, state %v, IDs %d, counters %+v", s, a.State(), w.a.cm.NumIDs(), w.a.cm.Counters())
	}
}

// The passive side's REP retries run out when the active side goes
// silent: Unreachable for the passive application, its QP to ERR.
func TestREPRetriesRunOut(t *testing.T) {
	w := newWorld(t, nil)
	w.listen()
	w.a.cm.Connect(rpingConnect())
	w.deliver()
	b := w.b.events[0].ID
	b.Accept(rpingAccept())
	w.drop = func(packet) bool { return true } // the network between them fails
	w.deliver()
	// b's REP timer (4.3 s) runs out before a's REQ timer (6.4 s) does.
	for i := 0; i < 15; i++ {
		w.advance(ibTime(20))
		w.deliver()
	}
	if len(w.b.events) != 1 {
		t.Fatalf("b gave up early: %v", eventTypes(w.b.events))
	}
	w.advance(ibTime(20))
	e := w.b.events
	if len(e) != 2 || e[1].Type != EventUnreachable || !errors.Is(e[1].Err, ErrTimeout) || b.State() != StateIdle ||
		w.b.cm.NumIDs() != 0 {
		t.Fatalf("b events %v, state %v", eventTypes(e), b.State())
	}
	if s := w.b.qp.states(); s[len(s)-1] != ib.QPSErr {
		t.Errorf("b's QP %v", s)
	}
}
