package cm

import (
	"fmt"
	"slices"
	"testing"

	"github.com/rnicd/rnicd/rnic/trace"
	"github.com/rnicd/rnicd/wire/mad"
)

// A connect and disconnect traced on both CMs: each MAD sent and
// received is one event, in order, with the connection's state change.
func TestTraceConnectDisconnect(t *testing.T) {
	tr := trace.New(0)
	w := newWorld(t, func(c *Config) {
		if c.CAGUID == guidA {
			c.Trace = tr.Probe("a")
		} else {
			c.Trace = tr.Probe("b")
		}
	})
	sub := tr.Subscribe(trace.Filter{})
	defer sub.Close()
	a, _ := w.connect()
	if err := a.Disconnect(nil); err != nil {
		t.Fatal(err)
	}
	w.deliver()
	buf := make([]trace.Event, 64)
	n := sub.TryRead(buf)
	var got []string
	for _, e := range buf[:n] {
		if e.Module != trace.ModCM {
			t.Errorf("event of module %v", e.Module)
		}
		got = append(got, fmt.Sprintf("%s %s", e.NIC, e.Detail()))
	}
	idA, idB := a.LocalCommID(), w.b.events[0].ID.LocalCommID()
	want := []string{
		fmt.Sprintf("a REQ sent: IDLE -> REQ_SENT comm_id %#x", idA),
		fmt.Sprintf("b REQ received: IDLE -> REQ_RCVD comm_id %#x", idB),
		fmt.Sprintf("b REP sent: REQ_RCVD -> REP_SENT comm_id %#x", idB),
		fmt.Sprintf("a REP received: REQ_SENT -> REP_RCVD comm_id %#x", idA),
		fmt.Sprintf("a RTU sent: REP_RCVD -> ESTABLISHED comm_id %#x", idA),
		fmt.Sprintf("b RTU received: REP_SENT -> ESTABLISHED comm_id %#x", idB),
		fmt.Sprintf("a DREQ sent: ESTABLISHED -> DREQ_SENT comm_id %#x", idA),
		fmt.Sprintf("b DREQ received: ESTABLISHED -> DREQ_RCVD comm_id %#x", idB),
		fmt.Sprintf("b DREP sent: DREQ_RCVD -> TIMEWAIT comm_id %#x", idB),
		fmt.Sprintf("a DREP received: DREQ_SENT -> TIMEWAIT comm_id %#x", idA),
	}
	if !slices.Equal(got, want) {
		t.Errorf("trace:\n%s\nwant:\n%s", join(got), join(want))
	}
	// The QPN of each side's events is its QP's once the CM knows it
	// (the passive side learns it at Accept).
	for _, e := range buf[:n] {
		if e.NIC == "a" && e.QPN != qpnA || e.NIC == "b" && e.QPN != qpnB && !(e.Step == trace.StepCMRecv && e.Len == uint32(StateREQRcvd)) {
			t.Errorf("%s %s: qpn %#x", e.NIC, e.Detail(), e.QPN)
		}
	}
}

// A MAD for no connection (a DREP again, after the DREQ's transaction
// ended) is traced without one; with nobody reading the trace, nothing
// is recorded.
func TestTraceNoConnection(t *testing.T) {
	tr := trace.New(0)
	w := newWorld(t, func(c *Config) { c.Trace = tr.Probe("x") })
	a, _ := w.connect() // not traced: no reader yet
	sub := tr.Subscribe(trace.Filter{})
	defer sub.Close()
	if err := a.Disconnect(nil); err != nil {
		t.Fatal(err)
	}
	seen := w.deliver()
	drep := seen[len(seen)-1]
	if drep.attr() != mad.AttrDREP {
		t.Fatalf("last MAD %v, want the DREP", drep.attr())
	}
	w.inject(w.a, drep.b)
	buf := make([]trace.Event, 64)
	n := sub.TryRead(buf)
	var got []string
	for _, e := range buf[:n] {
		got = append(got, e.Detail())
	}
	if n != 5 || got[4] != "DREP received: no connection" || buf[4].QPN != 0 {
		t.Fatalf("trace:\n%s", join(got))
	}
}

// The trace's names of the CM states are cm.State's.
func TestTraceStateNames(t *testing.T) {
	if len(trace.CMStateNames) != len(stateNames) {
		t.Fatalf("trace has %d CM state names, cm %d", len(trace.CMStateNames), len(stateNames))
	}
	for s := range stateNames {
		if trace.CMStateNames[s] != State(s).String() {
			t.Errorf("state %d: trace %q, cm %q", s, trace.CMStateNames[s], State(s))
		}
	}
}

func join(s []string) string {
	out := ""
	for _, l := range s {
		out += "  " + l + "\n"
	}
	return out
}
