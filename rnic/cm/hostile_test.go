package cm

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/rnicd/rnicd/wire/mad"
)

// mkMAD builds a CM MAD whose message enc writes.
func mkMAD(attr mad.AttrID, tid uint64, enc func(d []byte)) []byte {
	var b [mad.MADLen]byte
	enc(format(&b, attr, tid))
	return b[:]
}

// Messages from the network that match nothing, or lie, are dropped or
// answered as Linux's CM answers them; none creates state it cannot free.
func TestHostileMADs(t *testing.T) {
	goodREQ := func(f *mad.REQFields) []byte {
		return mkMAD(mad.AttrREQ, 7, func(d []byte) { mad.REQ(d).Encode(f) })
	}
	base := mad.REQFields{LocalCommID: 0x99, ServiceID: rpingService, LocalCAGUID: 1, LocalQPN: 5, PathMTU: 3,
		PKey: 0xffff, LocalCMResponseTimeout: 20, MaxCMRetries: 15, PrimaryLocalGID: gidA, PrimaryRemoteGID: gidB}
	for _, c := range []struct {
		name      string
		mad       func() []byte
		wantReply mad.AttrID // 0: none
		wantRej   mad.RejReason
		dropped   uint64
	}{
		{name: "short", mad: func() []byte { return make([]byte, 100) }, dropped: 1},
		{name: "not the CM class", mad: func() []byte {
			b := goodREQ(&base)
			b[1] = 0x03
			return b
		}, dropped: 1},
		{name: "class version 1", mad: func() []byte {
			b := goodREQ(&base)
			b[2] = 1
			return b
		}, dropped: 1},
		{name: "LAP", mad: func() []byte { return mkMAD(mad.AttrLAP, 1, func([]byte) {}) }, dropped: 1},
		{name: "REQ with MTU 0", mad: func() []byte {
			f := base
			f.PathMTU = 0
			return goodREQ(&f)
		}, wantReply: mad.AttrREJ, wantRej: mad.RejInvalidMTU},
		{name: "REQ for RD", mad: func() []byte {
			f := base
			f.TransportType = 2
			return goodREQ(&f)
		}, wantReply: mad.AttrREJ, wantRej: mad.RejInvalidTransportType},
		{name: "REQ naming another GID as ours", mad: func() []byte {
			f := base
			f.PrimaryRemoteGID = mad.GIDFromAddr(netip.MustParseAddr("198.18.0.9"))
			return goodREQ(&f)
		}, wantReply: mad.AttrREJ, wantRej: mad.RejInvalidGID},
		{name: "REQ whose sender is not the packet's", mad: func() []byte {
			f := base
			f.PrimaryLocalGID = mad.GIDFromAddr(netip.MustParseAddr("198.18.0.9"))
			return goodREQ(&f)
		}, wantReply: mad.AttrREJ, wantRej: mad.RejInvalidGID},
		{name: "REP for no connection", mad: func() []byte {
			return mkMAD(mad.AttrREP, 1, func(d []byte) {
				mad.REP(d).Encode(&mad.REPFields{LocalCommID: 5, RemoteCommID: 0x1234})
			})
		}, wantReply: mad.AttrREJ, wantRej: mad.RejInvalidCommID, dropped: 1},
		{name: "RTU for no connection", mad: func() []byte {
			return mkMAD(mad.AttrRTU, 1, func(d []byte) { mad.RTU(d).Encode(&mad.RTUFields{LocalCommID: 5, RemoteCommID: 9}) })
		}, dropped: 1},
		{name: "DREQ for no connection: DREP anyway", mad: func() []byte {
			return mkMAD(mad.AttrDREQ, 1, func(d []byte) { mad.DREQ(d).Encode(&mad.DREQFields{LocalCommID: 5, RemoteCommID: 9}) })
		}, wantReply: mad.AttrDREP, dropped: 1},
		{name: "DREP for no connection", mad: func() []byte {
			return mkMAD(mad.AttrDREP, 1, func(d []byte) { mad.DREP(d).Encode(&mad.DREPFields{LocalCommID: 5, RemoteCommID: 9}) })
		}, dropped: 1},
		{name: "REJ for no connection", mad: func() []byte {
			return mkMAD(mad.AttrREJ, 1, func(d []byte) { mad.REJ(d).Encode(&mad.REJFields{LocalCommID: 5, RemoteCommID: 9}) })
		}, dropped: 1},
		{name: "MRA for no connection", mad: func() []byte {
			return mkMAD(mad.AttrMRA, 1, func(d []byte) { mad.MRA(d).Encode(&mad.MRAFields{LocalCommID: 5, RemoteCommID: 9}) })
		}, dropped: 1},
		{name: "SIDR_REP for no request", mad: func() []byte {
			return mkMAD(mad.AttrSIDRRep, 1, func(d []byte) { mad.SIDRRep(d).Encode(&mad.SIDRRepFields{RequestID: 9}) })
		}, dropped: 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld(t, nil)
			w.listen()
			w.inject(w.b, c.mad())
			out := w.take()
			if c.wantReply == 0 && len(out) != 0 || c.wantReply != 0 && (len(out) != 1 || out[0].attr() != c.wantReply) {
				t.Fatalf("replies %v, want %v", attrs(out), c.wantReply)
			}
			if c.wantReply == mad.AttrREJ {
				r := mad.REJ(mad.MAD(out[0].b).Data())
				if r.Reason() != c.wantRej || r.MessageRejected() != mad.MsgKindREQ && c.wantRej != mad.RejInvalidCommID {
					t.Errorf("REJ reason %d of message %d, want %d of the REQ", r.Reason(), r.MessageRejected(), c.wantRej)
				}
				// An invalid GID names ours as its additional information,
				// as Linux's CM does (the port's GID, 16 bytes).
				if c.wantRej == mad.RejInvalidGID && (r.RejectInfoLength() != 16 || mad.GID(r.ARI()[:16]) != gidB) {
					t.Errorf("REJ ARI %d bytes %x, want b's GID", r.RejectInfoLength(), r.ARI()[:16])
				}
				if to := out[0].to; to != gidA {
					t.Errorf("REJ sent to %v, want the packet's sender", to)
				}
			}
			if got := w.b.cm.Counters().Dropped; got != c.dropped {
				t.Errorf("dropped %d, want %d", got, c.dropped)
			}
			if w.b.cm.NumIDs() != 0 || len(w.b.events) != 0 {
				t.Errorf("state left: %d IDs, events %v", w.b.cm.NumIDs(), eventTypes(w.b.events))
			}
		})
	}
}

// A DREQ that names another QP is not for this connection.
func TestDREQWrongQPN(t *testing.T) {
	w := newWorld(t, nil)
	a, b := w.connect()
	d := mkMAD(mad.AttrDREQ, 1, func(d []byte) {
		mad.DREQ(d).Encode(&mad.DREQFields{LocalCommID: a.LocalCommID(), RemoteCommID: b.LocalCommID(), RemoteQPN: 0x77})
	})
	w.inject(w.b, d)
	if b.State() != StateEstablished || len(w.wire) != 0 || w.b.cm.Counters().Dropped != 1 {
		t.Errorf("b %v, wire %v", b.State(), attrs(w.wire))
	}
}

// REQs from the network cannot hold more than MaxIDs connections.
func TestMaxIDs(t *testing.T) {
	w := newWorld(t, func(c *Config) { c.MaxIDs, c.MaxPending = 2, 2 })
	w.listen()
	for i := uint32(1); i <= 3; i++ {
		f := mad.REQFields{LocalCommID: i, ServiceID: rpingService, LocalCAGUID: 1, LocalQPN: i, PathMTU: 3,
			PrimaryLocalGID: gidA, PrimaryRemoteGID: gidB}
		w.inject(w.b, mkMAD(mad.AttrREQ, uint64(i), func(d []byte) { mad.REQ(d).Encode(&f) }))
	}
	out := w.take()
	if w.b.cm.NumIDs() != 2 || len(out) != 1 || mad.REJ(mad.MAD(out[0].b).Data()).Reason() != mad.RejNoResources {
		t.Errorf("%d IDs, replies %v", w.b.cm.NumIDs(), attrs(out))
	}
	if _, err := w.b.cm.Connect(rpingConnect()); err == nil {
		t.Error("Connect past MaxIDs worked")
	}
}

func TestListeners(t *testing.T) {
	w := newWorld(t, nil)
	l := w.listen()
	if _, err := w.b.cm.Listen(rpingService, nil); !errors.Is(err, ErrBusy) {
		t.Errorf("second Listen: %v", err)
	}
	l.Close()
	w.a.cm.Connect(rpingConnect())
	seen := w.deliver()
	if !equal(attrs(seen), []mad.AttrID{mad.AttrREQ, mad.AttrREJ}) {
		t.Errorf("after Close: %v", attrs(seen))
	}
	if _, err := w.b.cm.Listen(rpingService, nil); err != nil {
		t.Errorf("Listen after Close: %v", err)
	}
}

func TestCallsInTheWrongState(t *testing.T) {
	w := newWorld(t, nil)
	a, _ := w.a.cm.Connect(rpingConnect())
	if a.Accept(rpingAccept()) == nil || a.Reject(mad.RejConsumerDefined, nil) == nil || a.Disconnect(nil) == nil {
		t.Error("an active ID in REQ_SENT accepted, rejected or disconnected")
	}
	p := rpingConnect()
	p.PathMTU = 0
	if _, err := w.a.cm.Connect(p); err == nil {
		t.Error("Connect with MTU 0 worked")
	}
	p = rpingConnect()
	p.PrivateData = make([]byte, mad.REQPrivateDataLen+1)
	if _, err := w.a.cm.Connect(p); err == nil {
		t.Error("Connect with 93 bytes of private data worked")
	}
	if _, err := New(Config{}); err == nil {
		t.Error("New without dependencies worked")
	}
}

// 1,000 connect/disconnect cycles leave no ID, listener aside.
func TestManyCycles(t *testing.T) {
	w := newWorld(t, nil)
	w.listen()
	for i := 0; i < 1000; i++ {
		a, err := w.a.cm.Connect(rpingConnect())
		if err != nil {
			t.Fatal(err)
		}
		w.deliver()
		w.b.events[len(w.b.events)-1].ID.Accept(rpingAccept())
		w.deliver()
		if a.State() != StateEstablished {
			t.Fatalf("cycle %d: %v", i, a.State())
		}
		if i%2 == 0 {
			a.Disconnect(nil)
		} else {
			w.b.events[len(w.b.events)-1].ID.Disconnect(nil)
		}
		w.deliver()
		w.advance(ibTime(19))
		if w.a.cm.NumIDs() != 0 || w.b.cm.NumIDs() != 0 || len(w.a.cm.remote)+len(w.b.cm.remote) != 0 ||
			len(w.a.cm.remoteQPs)+len(w.b.cm.remoteQPs) != 0 {
			t.Fatalf("cycle %d: %d+%d IDs, %d+%d remote entries", i, w.a.cm.NumIDs(), w.b.cm.NumIDs(),
				len(w.a.cm.remote), len(w.b.cm.remote))
		}
		w.a.events, w.b.events = nil, nil
		w.a.qp.calls, w.b.qp.calls = nil, nil
	}
}

func TestNames(t *testing.T) {
	if StateMRAREPRcvd.String() != "MRA_REP_RCVD" || StateSIDRREQRcvd.String() != "SIDR_REQ_RCVD" || State(99).String() != "State(99)" {
		t.Error(StateMRAREPRcvd, StateSIDRREQRcvd, State(99))
	}
	if EventTimewaitExit.String() != "RDMA_CM_EVENT_TIMEWAIT_EXIT" || EventType(0).String() != "EventType(0)" {
		t.Error(EventTimewaitExit, EventType(0))
	}
	if len(stateNames) != int(StateSIDRREQRcvd)+1 {
		t.Error("a state without a name")
	}
}

// A REQ from a QP that already has a connection here, under a new comm
// ID, finds the old connection stale: REJ "stale connection" for the REQ,
// a DREQ for the old connection (IBTA 12.9.8.3.1, Linux cm_req_handler).
func TestStaleConnection(t *testing.T) {
	w := newWorld(t, nil)
	_, b := w.connect()
	f := mad.REQFields{LocalCommID: 0x777, ServiceID: rpingService, LocalCAGUID: guidA, LocalQPN: qpnA, PathMTU: 3,
		LocalCMResponseTimeout: 20, MaxCMRetries: 15}
	w.inject(w.b, mkMAD(mad.AttrREQ, 9, func(d []byte) { mad.REQ(d).Encode(&f) }))
	out := w.take()
	if !equal(attrs(out), []mad.AttrID{mad.AttrREJ, mad.AttrDREQ}) {
		t.Fatalf("answers %v, want REJ then DREQ", attrs(out))
	}
	rej := mad.REJ(mad.MAD(out[0].b).Data())
	if rej.Reason() != mad.RejStaleConn || rej.RemoteCommID() != 0x777 || mad.MAD(out[0].b).TID() != 9 {
		t.Errorf("REJ %+v", rej.Fields())
	}
	if b.State() != StateDREQSent || w.b.cm.NumIDs() != 1 {
		t.Errorf("old connection %v, %d IDs", b.State(), w.b.cm.NumIDs())
	}
}
