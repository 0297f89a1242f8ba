package cm

import (
	"bytes"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/rnicd/rnicd/wire/mad"
)

// gidX is a host that is neither end of the connections of these tests.
var gidX = mad.GIDFromAddr(netip.MustParseAddr("198.18.0.66"))

// injectFrom hands b to n as if from the port with GID from.
func injectFrom(n *node, from mad.GID, b []byte) {
	n.cm.HandleMAD(Dest{GID: from, PKey: 0xffff}, b)
}

// Forged DREQs, DREPs, RTUs, REJs, MRAs and a stale-connection REQ change
// nothing of an established connection unless they name both its comm
// IDs and come from its peer's address; each is counted by what gave it
// away. Then the peer's own DREQ still works.
func TestForgedMADsChangeNothing(t *testing.T) {
	w := newWorld(t, nil)
	a, b := w.connect()
	la, lb := a.LocalCommID(), b.LocalCommID()
	qpB := b.QPN()
	moves := len(w.b.qp.calls)
	dreq := func(local, remote uint32) []byte {
		return mkMAD(mad.AttrDREQ, 1, func(d []byte) {
			mad.DREQ(d).Encode(&mad.DREQFields{LocalCommID: local, RemoteCommID: remote, RemoteQPN: qpB})
		})
	}
	rej := func(local, remote uint32, kind mad.MsgKind) []byte {
		return mkMAD(mad.AttrREJ, 1, func(d []byte) {
			mad.REJ(d).Encode(&mad.REJFields{LocalCommID: local, RemoteCommID: remote, MessageRejected: kind, Reason: mad.RejConsumerDefined})
		})
	}
	stale := mad.REQFields{LocalCommID: 0x777, ServiceID: rpingService, LocalCAGUID: guidA, LocalQPN: qpnA, PathMTU: 3,
		LocalCMResponseTimeout: 20, MaxCMRetries: 15, PrimaryLocalGID: gidX, PrimaryRemoteGID: gidB}
	for _, c := range []struct {
		name     string
		from     mad.GID
		mad      []byte
		mismatch uint64 // CommIDMismatch
		source   uint64 // WrongSource
		stale    uint64 // StaleDropped
	}{
		// A fresh daemon's first ID was 1; a remote comm ID of 0 skipped
		// the check. Now neither helps: from the peer's own address,
		// our ID with the peer's unknown is a mismatch.
		{name: "DREQ comm ID 1, remote 0", from: gidA, mad: dreq(0, 1)},
		{name: "DREQ our comm ID, remote 0", from: gidA, mad: dreq(0, lb), mismatch: 1},
		{name: "DREQ our comm ID, remote guessed", from: gidA, mad: dreq(la+1, lb), mismatch: 1},
		{name: "DREQ both comm IDs, another host", from: gidX, mad: dreq(la, lb), source: 1},
		{name: "DREP both comm IDs, another host", from: gidX, mad: mkMAD(mad.AttrDREP, 1, func(d []byte) {
			mad.DREP(d).Encode(&mad.DREPFields{LocalCommID: la, RemoteCommID: lb})
		}), source: 1},
		{name: "RTU remote 0", from: gidA, mad: mkMAD(mad.AttrRTU, 1, func(d []byte) {
			mad.RTU(d).Encode(&mad.RTUFields{RemoteCommID: lb})
		}), mismatch: 1},
		{name: "REJ of the REQ, remote 0", from: gidA, mad: rej(0, lb, mad.MsgKindREQ), mismatch: 1},
		{name: "REJ both comm IDs, another host", from: gidX, mad: rej(la, lb, mad.MsgKindREP), source: 1},
		{name: "MRA of the REP, remote 0", from: gidA, mad: mkMAD(mad.AttrMRA, 1, func(d []byte) {
			mad.MRA(d).Encode(&mad.MRAFields{RemoteCommID: lb, MessageMRAed: mad.MsgKindREP, ServiceTimeout: 31})
		}), mismatch: 1},
		{name: "the peer's REQ again, from another host", from: gidX, mad: mkMAD(mad.AttrREQ, 9, func(d []byte) {
			f := stale
			f.LocalCommID = la
			mad.REQ(d).Encode(&f)
		}), source: 1},
		{name: "stale-connection REQ from another host", from: gidX,
			mad: mkMAD(mad.AttrREQ, 9, func(d []byte) { mad.REQ(d).Encode(&stale) }), stale: 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := w.b.cm.Counters()
			injectFrom(w.b, c.from, c.mad)
			out := w.take()
			after := w.b.cm.Counters()
			if b.State() != StateEstablished || len(w.b.qp.calls) != moves {
				t.Fatalf("connection %v, QP moved %v", b.State(), w.b.qp.states())
			}
			if got := after.CommIDMismatch - before.CommIDMismatch; got != c.mismatch {
				t.Errorf("CommIDMismatch +%d, want +%d", got, c.mismatch)
			}
			if got := after.WrongSource - before.WrongSource; got != c.source {
				t.Errorf("WrongSource +%d, want +%d", got, c.source)
			}
			if got := after.StaleDropped - before.StaleDropped; got != c.stale {
				t.Errorf("StaleDropped +%d, want +%d", got, c.stale)
			}
			if after.Dropped != before.Dropped+1 {
				t.Errorf("Dropped +%d, want +1", after.Dropped-before.Dropped)
			}
			// Only a DREQ is answered (a DREP naming the sender's own comm
			// IDs, to the sender, as cm_issue_drep): nothing goes to the peer.
			for _, p := range out {
				if p.to != c.from || p.attr() != mad.AttrDREP {
					t.Errorf("sent %v to %v", p.attr(), p.to)
				}
			}
		})
	}
	// The peer's own DREQ, from its address with both comm IDs, is the
	// one that ends the connection.
	injectFrom(w.b, gidA, dreq(la, lb))
	if b.State() != StateTimewait {
		t.Errorf("after the peer's DREQ: %v", b.State())
	}
}

// The stale-connection REQ from the peer's own address is what Linux's
// cm_req_handler acts on: REJ "stale connection" and a DREQ for the old
// connection (TestStaleConnection); counted apart from drops.
func TestStaleConnectionCounted(t *testing.T) {
	w := newWorld(t, nil)
	_, b := w.connect()
	f := mad.REQFields{LocalCommID: 0x777, ServiceID: rpingService, LocalCAGUID: guidA, LocalQPN: qpnA, PathMTU: 3,
		PrimaryLocalGID: gidA, PrimaryRemoteGID: gidB}
	injectFrom(w.b, gidA, mkMAD(mad.AttrREQ, 9, func(d []byte) { mad.REQ(d).Encode(&f) }))
	if c := w.b.cm.Counters(); c.StaleConns != 1 || c.StaleDropped != 0 || b.State() != StateDREQSent {
		t.Errorf("StaleConns %d, StaleDropped %d, old connection %v", c.StaleConns, c.StaleDropped, b.State())
	}
}

// floodREQ is a REQ from gidX as a flood sends it: its sender says it
// waits one try of our packet lifetime twice and 4 us (time code 0).
func floodREQ(i uint32) []byte {
	f := mad.REQFields{LocalCommID: i, ServiceID: rpingService, LocalCAGUID: 0x66, LocalQPN: i, PathMTU: 3,
		PrimaryLocalGID: gidX, PrimaryRemoteGID: gidB}
	return mkMAD(mad.AttrREQ, uint64(i), func(d []byte) { mad.REQ(d).Encode(&f) })
}

// A REQ nobody answers is held as long as its sender waits, then REJected
// with reason "timeout" and our CA GUID, and its ID freed; the
// application hears Unreachable.
func TestPendingREQTimeout(t *testing.T) {
	w := newWorld(t, nil)
	w.listen()
	injectFrom(w.b, gidX, floodREQ(1))
	if w.b.cm.NumPending() != 1 || len(w.b.events) != 1 {
		t.Fatalf("%d pending, events %v", w.b.cm.NumPending(), eventTypes(w.b.events))
	}
	w.take()
	hold := 2*ibTime(18) + ibTime(0) // (max CM retries 0 + 1) tries
	w.advance(hold - time.Millisecond)
	if w.b.cm.NumIDs() != 1 || len(w.wire) != 0 {
		t.Fatalf("before the sender's wait is over: %d IDs, sent %v", w.b.cm.NumIDs(), attrs(w.wire))
	}
	w.advance(time.Millisecond)
	out := w.take()
	if len(out) != 1 || out[0].attr() != mad.AttrREJ || out[0].to != gidX {
		t.Fatalf("sent %v", attrs(out))
	}
	r := mad.REJ(mad.MAD(out[0].b).Data())
	if r.Reason() != mad.RejTimeout || r.RemoteCommID() != 1 || r.RejectInfoLength() != 8 {
		t.Errorf("REJ %+v", r.Fields())
	}
	c := w.b.cm.Counters()
	if w.b.cm.NumIDs() != 0 || w.b.cm.NumPending() != 0 || c.PendingTimeouts != 1 || len(w.b.cm.remote)+len(w.b.cm.remoteQPs) != 0 {
		t.Errorf("%d IDs, %d pending, %d timeouts after the hold", w.b.cm.NumIDs(), w.b.cm.NumPending(), c.PendingTimeouts)
	}
	if e := w.b.events; len(e) != 2 || e[1].Type != EventUnreachable || e[1].Err != ErrTimeout {
		t.Errorf("events %v", eventTypes(e))
	}
}

// Unanswered REQs are bounded apart from MaxIDs: past MaxPending a REQ
// gets REJ "no resources" and the node still connects out.
func TestMaxPending(t *testing.T) {
	w := newWorld(t, func(c *Config) { c.MaxIDs, c.MaxPending = 4, 2 })
	w.listen()
	for i := uint32(1); i <= 3; i++ {
		injectFrom(w.b, gidX, floodREQ(i))
	}
	out := w.take()
	if w.b.cm.NumPending() != 2 || len(out) != 1 || mad.REJ(mad.MAD(out[0].b).Data()).Reason() != mad.RejNoResources ||
		w.b.cm.Counters().PendingDropped != 1 {
		t.Fatalf("%d pending, replies %v, %d dropped", w.b.cm.NumPending(), attrs(out), w.b.cm.Counters().PendingDropped)
	}
	p := rpingConnect()
	p.Dest, p.LocalGID = Dest{GID: gidA, PKey: 0xffff}, gidB
	if _, err := w.b.cm.Connect(p); err != nil {
		t.Errorf("Connect with MaxPending REQs held: %v", err)
	}
	// Accepting one makes room.
	w.b.events[0].ID.Accept(rpingAccept())
	if w.b.cm.NumPending() != 1 {
		t.Errorf("%d pending after Accept", w.b.cm.NumPending())
	}
}

// Refuse from the ConnectRequest event forgets the REQ without a word:
// the sender's next try is a new REQ.
func TestRefuse(t *testing.T) {
	w := newWorld(t, nil)
	w.listen()
	w.b.cm.cfg.Event = func(e Event) {
		w.b.events = append(w.b.events, e)
		if e.Type == EventConnectRequest {
			e.ID.Refuse()
		}
	}
	injectFrom(w.b, gidX, floodREQ(1))
	injectFrom(w.b, gidX, floodREQ(1))
	if len(w.wire) != 0 || w.b.cm.NumIDs() != 0 || w.b.cm.Counters().ListenDrops != 2 || w.b.cm.Counters().Duplicates != 0 {
		t.Errorf("sent %v, %d IDs, %+v", attrs(w.wire), w.b.cm.NumIDs(), w.b.cm.Counters())
	}
}

// Two CMs with the default seed do not hand out the same comm IDs, and
// neither starts at 1 (the first ID of a fresh daemon was 1 when the seed
// was left unset).
func TestRandomCommIDs(t *testing.T) {
	first := map[uint32]bool{}
	for range 4 {
		c, err := New(Config{Now: time.Now, Send: func(Dest, []byte) error { return nil }, QP: &fakeQP{}, Event: func(Event) {}})
		if err != nil {
			t.Fatal(err)
		}
		id, err := c.newID(StateIdle)
		if err != nil {
			t.Fatal(err)
		}
		first[id.localID] = true
	}
	// Four 32-bit random values collide with probability 6/2^32.
	if len(first) != 4 || first[1] {
		t.Errorf("first comm IDs of four CMs: %v", first)
	}
}

// Drops that protect connections are logged with their reason and
// sender, one line a second per reason at most, with the count of those
// not logged since.
func TestDropLog(t *testing.T) {
	var buf bytes.Buffer
	w := newWorld(t, func(c *Config) { c.Log = slog.New(slog.NewTextHandler(&buf, nil)) })
	a, b := w.connect()
	dreq := mkMAD(mad.AttrDREQ, 1, func(d []byte) {
		mad.DREQ(d).Encode(&mad.DREQFields{LocalCommID: a.LocalCommID(), RemoteCommID: b.LocalCommID(), RemoteQPN: b.QPN()})
	})
	for range 3 {
		injectFrom(w.b, gidX, dreq)
	}
	w.advance(time.Second)
	injectFrom(w.b, gidX, dreq)
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], `reason="sent from another address than the connection's peer" from=198.18.0.66 mad=DREQ`) ||
		!strings.Contains(lines[1], "not_logged_since=2") {
		t.Errorf("log:\n%s", buf.String())
	}
}
