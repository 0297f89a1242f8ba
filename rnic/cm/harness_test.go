package cm

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/wire/mad"
)

// The test world: two CMs (a, the active side at 198.18.0.3, and b, the
// passive side at 198.18.0.2) on one fake clock, with a wire that holds
// every MAD sent until the test delivers or drops it, and QPs that record
// every ModifyQP.

type qpCall struct {
	qpn  uint32
	attr ib.QPAttr
	mask ib.AttrMask
}

type fakeQP struct {
	calls []qpCall
	fail  map[ib.QPState]error // ModifyQP to this state fails
}

func (q *fakeQP) ModifyQP(qpn uint32, attr *ib.QPAttr, mask ib.AttrMask) error {
	q.calls = append(q.calls, qpCall{qpn, *attr, mask})
	return q.fail[attr.State]
}

// states lists the states the QP was moved to, in order.
func (q *fakeQP) states() []ib.QPState {
	var s []ib.QPState
	for _, c := range q.calls {
		s = append(s, c.attr.State)
	}
	return s
}

type node struct {
	cm     *CM
	gid    mad.GID
	qp     *fakeQP
	events []Event
}

type packet struct {
	from, to mad.GID
	b        []byte
}

func (p packet) attr() mad.AttrID { return mad.MAD(p.b).AttrID() }

type world struct {
	t    testing.TB
	now  time.Time
	a, b *node
	wire []packet
	// drop, if set, says whether a packet is lost when delivered.
	drop func(packet) bool
}

var (
	gidA = mad.GIDFromAddr(netip.MustParseAddr("198.18.0.3"))
	gidB = mad.GIDFromAddr(netip.MustParseAddr("198.18.0.2"))
)

const (
	guidA = 0x505400fffec61203
	guidB = 0x505400fffec61202
)

func newWorld(t testing.TB, tweak func(*Config)) *world {
	w := &world{t: t, now: time.Date(2026, 11, 24, 5, 0, 0, 0, time.UTC)}
	mk := func(gid mad.GID, guid uint64, seed uint32) *node {
		n := &node{gid: gid, qp: &fakeQP{}}
		cfg := Config{
			Now: func() time.Time { return w.now },
			Send: func(to Dest, b []byte) error {
				if to.PKey != 0xffff {
					t.Errorf("MAD sent with P_Key %#x", to.PKey)
				}
				w.wire = append(w.wire, packet{from: gid, to: to.GID, b: bytes.Clone(b)})
				return nil
			},
			QP:         n.qp,
			Event:      func(e Event) { n.events = append(n.events, e) },
			CAGUID:     guid,
			PortGID:    gid,
			TIDHigh:    2,
			CommIDSeed: seed,
		}
		if tweak != nil {
			tweak(&cfg)
		}
		var err error
		if n.cm, err = New(cfg); err != nil {
			t.Fatal(err)
		}
		return n
	}
	w.a = mk(gidA, guidA, 0x4367800e)
	w.b = mk(gidB, guidB, 0x341a9179)
	return w
}

func (w *world) node(g mad.GID) *node {
	if g == w.a.gid {
		return w.a
	}
	return w.b
}

// take removes and returns the packets on the wire.
func (w *world) take() []packet {
	p := w.wire
	w.wire = nil
	return p
}

// deliver hands every packet on the wire to its destination, and those
// that sends, until the wire is empty; it returns what was delivered or
// dropped, in order.
func (w *world) deliver() []packet {
	var seen []packet
	for len(w.wire) > 0 {
		p := w.wire[0]
		w.wire = w.wire[1:]
		seen = append(seen, p)
		if w.drop != nil && w.drop(p) {
			continue
		}
		w.node(p.to).cm.HandleMAD(Dest{GID: p.from, PKey: 0xffff}, p.b)
	}
	return seen
}

// inject hands b to n as if from the other node.
func (w *world) inject(n *node, b []byte) {
	from := w.a.gid
	if n == w.a {
		from = w.b.gid
	}
	n.cm.HandleMAD(Dest{GID: from, PKey: 0xffff}, b)
}

// advance moves the clock by d and runs both CMs' timers.
func (w *world) advance(d time.Duration) {
	w.now = w.now.Add(d)
	w.a.cm.Expire()
	w.b.cm.Expire()
}

// attrs lists the attribute IDs of packets.
func attrs(ps []packet) []mad.AttrID {
	var a []mad.AttrID
	for _, p := range ps {
		a = append(a, p.attr())
	}
	return a
}

func eventTypes(es []Event) []EventType {
	var t []EventType
	for _, e := range es {
		t = append(t, e.Type)
	}
	return t
}

func equal[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// The values of rping's connection in the golden capture.
const (
	qpnA, psnA = 0x11, 0x173280
	qpnB, psnB = 0x11, 0x96ea7b
)

var rpingService = mad.ServiceID(mad.PSTCP, 7174)

func rpingConnect() ConnectParam {
	return ConnectParam{
		ServiceID: rpingService, QPN: qpnA, Dest: Dest{GID: gidB, PKey: 0xffff}, LocalGID: gidA,
		StartingPSN: psnA, PathMTU: ib.MTU1024, ResponderResources: 1, InitiatorDepth: 1,
		RetryCount: 7, RNRRetryCount: 7, FlowLabel: 0x6cc87,
	}
}

func rpingAccept() AcceptParam {
	return AcceptParam{QPN: qpnB, StartingPSN: psnB, ResponderResources: 1, InitiatorDepth: 1, RNRRetryCount: 7}
}

// listen makes b listen on rping's service.
func (w *world) listen() *Listener {
	l, err := w.b.cm.Listen(rpingService, "rping server")
	if err != nil {
		w.t.Fatal(err)
	}
	return l
}

// connect runs a whole connection set-up and returns both IDs.
func (w *world) connect() (a, b *ID) {
	w.t.Helper()
	w.listen()
	a, err := w.a.cm.Connect(rpingConnect())
	if err != nil {
		w.t.Fatal(err)
	}
	w.deliver()
	if len(w.b.events) == 0 || w.b.events[len(w.b.events)-1].Type != EventConnectRequest {
		w.t.Fatalf("b: events %v, want a ConnectRequest", eventTypes(w.b.events))
	}
	b = w.b.events[len(w.b.events)-1].ID
	if err := b.Accept(rpingAccept()); err != nil {
		w.t.Fatal(err)
	}
	w.deliver()
	if a.State() != StateEstablished || b.State() != StateEstablished {
		w.t.Fatalf("after set-up: a %v, b %v", a.State(), b.State())
	}
	return a, b
}
