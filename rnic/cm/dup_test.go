package cm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/wire/mad"
)

// Duplicates, IBTA 12.9.6 and Linux's cm_dup_req_handler,
// cm_dup_rep_handler and cm_dreq_handler: each row brings the connection
// to a state, redelivers a message the peer already sent, and names what
// must come back.
func TestDuplicates(t *testing.T) {
	for _, c := range []struct {
		name string
		// setup returns the world with the copy of the message to
		// redeliver and the node to redeliver it to.
		setup     func(w *world) (dup []byte, to *node)
		wantState State // of the receiving side's ID afterwards
		wantReply mad.AttrID
		check     func(t *testing.T, w *world, reply []byte)
	}{
		{
			name: "REQ while the application decides: MRA",
			setup: func(w *world) ([]byte, *node) {
				w.listen()
				w.a.cm.Connect(rpingConnect())
				req := w.deliver()[0].b
				return req, w.b
			},
			wantState: StateMRAREQSent, wantReply: mad.AttrMRA,
			check: func(t *testing.T, w *world, reply []byte) {
				m := mad.MRA(mad.MAD(reply).Data())
				if m.MessageMRAed() != mad.MsgKindREQ || m.ServiceTimeout() != 20 ||
					m.LocalCommID() != w.b.events[0].ID.LocalCommID() {
					t.Errorf("MRA %+v", m.Fields())
				}
			},
		},
		{
			name: "REQ after the MRA: the MRA again",
			setup: func(w *world) ([]byte, *node) {
				w.listen()
				w.a.cm.Connect(rpingConnect())
				req := w.deliver()[0].b
				w.inject(w.b, req)
				w.take()
				return req, w.b
			},
			wantState: StateMRAREQSent, wantReply: mad.AttrMRA,
		},
		{
			name: "REQ after the REP: the REP again",
			setup: func(w *world) ([]byte, *node) {
				w.listen()
				w.a.cm.Connect(rpingConnect())
				req := w.deliver()[0].b
				w.b.events[0].ID.Accept(rpingAccept())
				w.take() // the REP is lost
				return req, w.b
			},
			wantState: StateREPSent, wantReply: mad.AttrREP,
			check: func(t *testing.T, w *world, reply []byte) {
				if f := mad.REP(mad.MAD(reply).Data()).Fields(); f.LocalQPN != qpnB || f.StartingPSN != psnB {
					t.Errorf("REP %+v", f)
				}
			},
		},
		{
			name: "REQ of a connection in TIMEWAIT: REJ stale",
			setup: func(w *world) ([]byte, *node) {
				w.listen()
				w.a.cm.Connect(rpingConnect())
				req := w.deliver()[0].b
				w.b.events[0].ID.Accept(rpingAccept())
				w.deliver()
				w.b.events[0].ID.Disconnect(nil)
				w.deliver()
				return req, w.b
			},
			wantState: StateTimewait, wantReply: mad.AttrREJ,
			check: func(t *testing.T, w *world, reply []byte) {
				if r := mad.REJ(mad.MAD(reply).Data()); r.Reason() != mad.RejStaleConn {
					t.Errorf("REJ reason %d", r.Reason())
				}
			},
		},
		{
			name: "REP after the RTU: the RTU again",
			setup: func(w *world) ([]byte, *node) {
				w.connect()
				var rep []byte
				// Rebuild the REP b sent, from b's retry buffer.
				rep = bytes.Clone(w.b.events[0].ID.msg[:])
				return rep, w.a
			},
			wantState: StateEstablished, wantReply: mad.AttrRTU,
		},
		{
			name: "DREQ after the DREP: the DREP again",
			setup: func(w *world) ([]byte, *node) {
				a, _ := w.connect()
				a.Disconnect(nil)
				dreq := w.deliver()[0].b
				return dreq, w.b
			},
			wantState: StateTimewait, wantReply: mad.AttrDREP,
			check: func(t *testing.T, w *world, reply []byte) {
				d := mad.DREP(mad.MAD(reply).Data())
				b := w.b.events[0].ID
				if d.LocalCommID() != b.LocalCommID() || d.RemoteCommID() != b.RemoteCommID() {
					t.Errorf("DREP %+v", d.Fields())
				}
			},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld(t, nil)
			dup, to := c.setup(w)
			w.take()
			before := to.cm.Counters().Duplicates
			nEvents := len(to.events)
			w.inject(to, dup)
			replies := w.take()
			peer := w.a
			if to == w.a {
				peer = w.b
			}
			if len(replies) != 1 || replies[0].attr() != c.wantReply || replies[0].to != peer.gid {
				t.Fatalf("replies %v, want one %v", attrs(replies), c.wantReply)
			}
			if mad.MAD(replies[0].b).TID() != mad.MAD(dup).TID() {
				t.Errorf("reply TID %#x, want the duplicate's %#x", mad.MAD(replies[0].b).TID(), mad.MAD(dup).TID())
			}
			var id *ID
			for _, x := range to.cm.ids {
				id = x
			}
			if id == nil || id.State() != c.wantState {
				t.Fatalf("state %v, want %v", id.State(), c.wantState)
			}
			if to.cm.Counters().Duplicates != before+1 {
				t.Errorf("duplicates %d, want %d", to.cm.Counters().Duplicates, before+1)
			}
			if len(to.events) != nEvents {
				t.Errorf("a duplicate made events: %v", eventTypes(to.events[nEvents:]))
			}
			if c.check != nil {
				c.check(t, w, replies[0].b)
			}
		})
	}
}

// An MRA for our REQ stretches the wait to its service timeout plus a
// packet lifetime, once, and moves to MRA_REQ_RCVD; the retries go on
// after it.
func TestMRAStretchesTheREQTimer(t *testing.T) {
	w := newWorld(t, nil)
	w.listen()
	a, _ := w.a.cm.Connect(rpingConnect())
	req := w.deliver()[0].b
	w.inject(w.b, req) // the application is slow: b sends an MRA
	w.deliver()
	if a.State() != StateMRAREQRcvd || a.RemoteCommID() != w.b.events[0].ID.LocalCommID() {
		t.Fatalf("a %v, remote comm ID %#x", a.State(), a.RemoteCommID())
	}
	wait := ibTime(20) + ibTime(19)
	if d, _ := w.a.cm.NextDeadline(); d != w.now.Add(wait) {
		t.Errorf("deadline %v after the MRA, want %v", d.Sub(w.now), wait)
	}
	w.advance(wait - time.Nanosecond)
	if len(w.wire) != 0 {
		t.Fatalf("resent during the MRA's wait: %v", attrs(w.wire))
	}
	w.advance(time.Nanosecond)
	if !equal(attrs(w.wire), []mad.AttrID{mad.AttrREQ}) {
		t.Fatalf("after the wait: %v", attrs(w.wire))
	}
	w.deliver() // b answers with its MRA again
	b := w.b.events[0].ID
	b.Accept(rpingAccept())
	w.deliver()
	if a.State() != StateEstablished || b.State() != StateEstablished {
		t.Errorf("a %v, b %v", a.State(), b.State())
	}
}

// An MRA for our REP: MRA_REP_RCVD, then the RTU still establishes.
func TestMRAForREP(t *testing.T) {
	w := newWorld(t, nil)
	w.listen()
	a, _ := w.a.cm.Connect(rpingConnect())
	w.deliver()
	b := w.b.events[0].ID
	b.Accept(rpingAccept())
	w.take()
	var mra [mad.MADLen]byte
	mad.MRA(format(&mra, mad.AttrMRA, b.tid)).Encode(&mad.MRAFields{LocalCommID: a.LocalCommID(),
		RemoteCommID: b.LocalCommID(), MessageMRAed: mad.MsgKindREP, ServiceTimeout: 22})
	w.inject(w.b, mra[:])
	if b.State() != StateMRAREPRcvd {
		t.Fatalf("b %v", b.State())
	}
	if d, _ := w.b.cm.NextDeadline(); d != w.now.Add(ibTime(22)+ibTime(19)) {
		t.Errorf("deadline %v", d.Sub(w.now))
	}
	w.inject(w.b, mra[:]) // a second MRA is dropped
	if w.b.cm.Counters().Dropped != 1 {
		t.Errorf("dropped %d", w.b.cm.Counters().Dropped)
	}
	var rtu [mad.MADLen]byte
	mad.RTU(format(&rtu, mad.AttrRTU, b.tid)).Encode(&mad.RTUFields{LocalCommID: a.LocalCommID(), RemoteCommID: b.LocalCommID()})
	w.inject(w.b, rtu[:])
	if b.State() != StateEstablished {
		t.Errorf("b %v after RTU", b.State())
	}
}

// The passive application rejects: REJ reason 28 with its private data.
func TestReject(t *testing.T) {
	w := newWorld(t, nil)
	w.listen()
	a, _ := w.a.cm.Connect(rpingConnect())
	w.deliver()
	b := w.b.events[0].ID
	if err := b.Reject(mad.RejConsumerDefined, []byte("busy")); err != nil {
		t.Fatal(err)
	}
	if err := b.Accept(rpingAccept()); err == nil {
		t.Error("Accept after Reject worked")
	}
	w.deliver()
	var re *RejectError
	e := w.a.events
	if len(e) != 1 || e[0].Type != EventRejected || !errors.As(e[0].Err, &re) || re.Reason != mad.RejConsumerDefined ||
		re.Refused() || string(e[0].PrivateData[:4]) != "busy" {
		t.Fatalf("a events %+v", e)
	}
	if a.State() != StateIdle || w.a.cm.NumIDs()+w.b.cm.NumIDs() != 0 || len(w.b.qp.calls) != 0 {
		t.Errorf("a %v, IDs %d+%d, b QP calls %v", a.State(), w.a.cm.NumIDs(), w.b.cm.NumIDs(), w.b.qp.calls)
	}
}

// Both sides disconnect at once: each answers the other's DREQ, each
// reports Disconnected once, both end in TIMEWAIT.
func TestSimultaneousDisconnect(t *testing.T) {
	w := newWorld(t, nil)
	a, b := w.connect()
	a.Disconnect(nil)
	b.Disconnect(nil)
	w.deliver()
	for _, n := range []*node{w.a, w.b} {
		var disc int
		for _, e := range n.events {
			if e.Type == EventDisconnected {
				disc++
			}
		}
		if disc != 1 {
			t.Errorf("%d Disconnected events: %v", disc, eventTypes(n.events))
		}
	}
	if a.State() != StateTimewait || b.State() != StateTimewait {
		t.Errorf("a %v, b %v", a.State(), b.State())
	}
}

// A lost DREQ is resent; if every DREQ is lost the active side gives up
// with Disconnected (ErrTimeout), its QP in ERR, then TIMEWAIT.
func TestDREQRetries(t *testing.T) {
	w := newWorld(t, nil)
	a, _ := w.connect()
	w.drop = func(packet) bool { return true }
	a.Disconnect(nil)
	sent := len(w.deliver())
	for i := 0; i < 15; i++ {
		w.advance(reqTimeout)
		sent += len(w.deliver())
	}
	if sent != 16 || a.State() != StateDREQSent {
		t.Fatalf("%d DREQs, state %v", sent, a.State())
	}
	w.advance(reqTimeout)
	last := w.a.events[len(w.a.events)-1]
	if last.Type != EventDisconnected || !errors.Is(last.Err, ErrTimeout) || a.State() != StateTimewait {
		t.Fatalf("last event %+v, state %v", last, a.State())
	}
	if s := w.a.qp.states(); s[len(s)-1] != ib.QPSErr {
		t.Errorf("QP %v", s)
	}
	w.advance(ibTime(19))
	if w.a.cm.NumIDs() != 0 {
		t.Errorf("%d IDs after TIMEWAIT", w.a.cm.NumIDs())
	}
}

// Destroy in each state does what Linux's cm_destroy_id does, the peer
// hears of it, and the destroyed ID sends no events and leaves the QP
// alone once it is given back.
func TestDestroy(t *testing.T) {
	t.Run("REQ_SENT: REJ timeout naming our CA GUID", func(t *testing.T) {
		w := newWorld(t, nil)
		w.listen()
		a, _ := w.a.cm.Connect(rpingConnect())
		w.deliver()
		a.Destroy()
		seen := w.deliver()
		if !equal(attrs(seen), []mad.AttrID{mad.AttrREJ}) {
			t.Fatalf("%v", attrs(seen))
		}
		r := mad.REJ(mad.MAD(seen[0].b).Data())
		if r.Reason() != mad.RejTimeout || r.RejectInfoLength() != 8 || binary.BigEndian.Uint64(r.ARI()) != guidA {
			t.Errorf("REJ %+v", r.Fields())
		}
		if e := w.b.events; len(e) != 2 || e[1].Type != EventRejected || w.b.cm.NumIDs() != 0 {
			t.Errorf("b events %v, %d IDs", eventTypes(e), w.b.cm.NumIDs())
		}
		if len(w.a.events) != 0 || w.a.cm.NumIDs() != 0 {
			t.Errorf("a events %v, %d IDs", eventTypes(w.a.events), w.a.cm.NumIDs())
		}
	})
	t.Run("ESTABLISHED: QP to ERR, DREQ, freed after TIMEWAIT, no events", func(t *testing.T) {
		w := newWorld(t, nil)
		a, _ := w.connect()
		nA := len(w.a.events)
		a.Destroy()
		if s := w.a.qp.states(); s[len(s)-1] != ib.QPSErr {
			t.Errorf("a's QP %v", s)
		}
		calls := len(w.a.qp.calls)
		w.deliver()
		if w.b.events[len(w.b.events)-1].Type != EventDisconnected {
			t.Errorf("b events %v", eventTypes(w.b.events))
		}
		w.advance(ibTime(19))
		if len(w.a.events) != nA || len(w.a.qp.calls) != calls || w.a.cm.NumIDs() != 0 || w.b.cm.NumIDs() != 0 {
			t.Errorf("after destroy: events %v, QP calls %d (was %d), IDs %d/%d",
				eventTypes(w.a.events[nA:]), len(w.a.qp.calls), calls, w.a.cm.NumIDs(), w.b.cm.NumIDs())
		}
	})
	t.Run("REQ_RCVD: REJ consumer defined", func(t *testing.T) {
		w := newWorld(t, nil)
		w.listen()
		w.a.cm.Connect(rpingConnect())
		w.deliver()
		w.b.events[0].ID.Destroy()
		w.deliver()
		var re *RejectError
		if e := w.a.events; len(e) != 1 || !errors.As(e[0].Err, &re) || re.Reason != mad.RejConsumerDefined {
			t.Errorf("a events %+v", e)
		}
	})
}

// QP failures: the CM rejects and says so, it never half-connects.
func TestQPModifyFails(t *testing.T) {
	t.Run("passive RTR", func(t *testing.T) {
		w := newWorld(t, nil)
		w.listen()
		w.b.qp.fail = map[ib.QPState]error{ib.QPSRTR: errors.New("bad MTU")}
		w.a.cm.Connect(rpingConnect())
		w.deliver()
		b := w.b.events[0].ID
		if err := b.Accept(rpingAccept()); err == nil {
			t.Fatal("Accept worked with a failing QP")
		}
		w.deliver()
		var re *RejectError
		if e := w.a.events; len(e) != 1 || e[0].Type != EventRejected || !errors.As(e[0].Err, &re) ||
			re.Reason != mad.RejConsumerDefined {
			t.Errorf("a events %+v", e)
		}
		if w.a.cm.NumIDs()+w.b.cm.NumIDs() != 0 {
			t.Errorf("IDs left: %d+%d", w.a.cm.NumIDs(), w.b.cm.NumIDs())
		}
	})
	t.Run("active RTS", func(t *testing.T) {
		w := newWorld(t, nil)
		w.listen()
		w.a.qp.fail = map[ib.QPState]error{ib.QPSRTS: errors.New("no")}
		w.a.cm.Connect(rpingConnect())
		w.deliver()
		w.b.events[0].ID.Accept(rpingAccept())
		seen := w.deliver()
		if !equal(attrs(seen), []mad.AttrID{mad.AttrREP, mad.AttrREJ}) {
			t.Fatalf("%v", attrs(seen))
		}
		if e := w.a.events; len(e) != 1 || e[0].Type != EventConnectError || e[0].Err == nil {
			t.Errorf("a events %+v", e)
		}
		if e := w.b.events; len(e) != 2 || e[1].Type != EventRejected {
			t.Errorf("b events %v", eventTypes(e))
		}
		if s := w.a.qp.states(); s[len(s)-1] != ib.QPSErr {
			t.Errorf("a's QP %v", s)
		}
	})
}
