package tests

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rnicd/rnicd/rnic/trace"
	"github.com/rnicd/rnicd/wire/bth"
)

// One rping between two rnicd that write their trace to a file: each
// daemon's cm events are the MADs its side sent and received, in order,
// with the connection's state changes. Both files together, in time
// order, show each MAD block by block: the CM's event, QP1's SEND through
// the sender's verbs, wqe and port (tx to QP 1), the receiver's port (rx,
// ICRC verified) and QP1's receive CQE, then the receiver's CM event; the
// test logs that timeline up to the first ping's SEND and its ACK (the
// README's excerpt: go test -v -run TestTraceCMDaemons ./tests/).
func TestTraceCMDaemons(t *testing.T) {
	dir := t.TempDir()
	trA, trB := filepath.Join(dir, "a.json"), filepath.Join(dir, "b.json")
	a, err := startDaemon(dir, "rnicA", ownAddr(t), "-trace", trA)
	if err != nil {
		t.Fatal(err)
	}
	b, err := startDaemon(dir, "rnicB", ownAddr(t), "-trace", trB)
	if err != nil {
		a.stop()
		t.Fatal(err)
	}
	t.Setenv("RNICD_DIR", dir)
	stopBoth := stopper(t, a, b)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	port := freePort(t)
	srv, _, srvErr := startRpingServer(t, ctx, a, port)
	// Connect only once the server listens: no refused REQ in the trace.
	bin := filepath.Join(binDir, "rnic")
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(runTool(t, bin, "res", "-d", "rnicA", "cm_id"), "state LISTEN"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the rping server never listened")
		}
	}
	if _, err := rpingClient(t, ctx, a, b, port, "-C", "3"); err != nil {
		t.Fatal(err)
	}
	if err := srv.Wait(); err != nil {
		t.Fatalf("server: %v\n%s", err, srvErr.String())
	}
	// The DREP may reach the client's daemon after the client has gone:
	// wait until it counts it before stopping.
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(runTool(t, bin, "stat", "-d", "rnicB")+" ", " cm_rx_msgs_drep 1 "); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("rnicB never received the DREP")
		}
	}
	stopBoth()

	cmEvents := func(path string) []string {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		var out []string
		if err := trace.ReadJSON(f, func(e *trace.Event) error {
			if e.Module == trace.ModCM {
				d := e.Detail()
				out = append(out, d[:strings.Index(d+" comm_id", " comm_id")])
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	checkTimeline(t, mergeTraces(t, trA, trB))
	for _, c := range []struct {
		path string
		want []string
	}{
		{trB, []string{"REQ sent: IDLE -> REQ_SENT", "REP received: REQ_SENT -> REP_RCVD", "RTU sent: REP_RCVD -> ESTABLISHED",
			"DREQ sent: ESTABLISHED -> DREQ_SENT", "DREP received: DREQ_SENT -> TIMEWAIT"}},
		{trA, []string{"REQ received: IDLE -> REQ_RCVD", "REP sent: REQ_RCVD -> REP_SENT", "RTU received: REP_SENT -> ESTABLISHED",
			"DREQ received: ESTABLISHED -> DREQ_RCVD", "DREP sent: DREQ_RCVD -> TIMEWAIT"}},
	} {
		if got := cmEvents(c.path); !slices.Equal(got, c.want) {
			t.Errorf("%s: cm events\n%s\nwant\n%s", filepath.Base(c.path), strings.Join(got, "\n"), strings.Join(c.want, "\n"))
		}
	}
}

// mergeTraces reads the trace files and returns their events in time
// order (one host's clock).
func mergeTraces(t *testing.T, paths ...string) []trace.Event {
	var all []trace.Event
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		err = trace.ReadJSON(f, func(e *trace.Event) error { all = append(all, *e); return nil })
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	slices.SortStableFunc(all, func(x, y trace.Event) int { return cmp.Compare(x.Time, y.Time) })
	return all
}

// checkTimeline finds each CM MAD of the connection in the merged trace,
// block by block, in order, and logs the timeline from the REQ to the
// first RC SEND's ACK.
func checkTimeline(t *testing.T, all []trace.Event) {
	t.Helper()
	at := 0
	// next finds the first event from at on that matches, and moves past it.
	next := func(what string, match func(e *trace.Event) bool) int {
		for i := at; i < len(all); i++ {
			if match(&all[i]) {
				at = i + 1
				return i
			}
		}
		t.Fatalf("after event %d, no %s in the trace", at, what)
		return 0
	}
	cmEvent := func(nic, what string) func(e *trace.Event) bool {
		return func(e *trace.Event) bool {
			return e.NIC == nic && e.Module == trace.ModCM && strings.HasPrefix(e.Detail(), what)
		}
	}
	qp1 := func(nic string, step trace.Step) func(e *trace.Event) bool {
		return func(e *trace.Event) bool {
			return e.NIC == nic && e.Module == trace.ModPort && e.Step == step && e.DestQPN == 1 && e.Opcode == bth.UDSendOnly
		}
	}
	start, dreq := -1, 0
	for _, m := range []struct{ msg, from, to string }{
		{"REQ", "rnicB", "rnicA"}, {"REP", "rnicA", "rnicB"}, {"RTU", "rnicB", "rnicA"},
		{"DREQ", "rnicB", "rnicA"}, {"DREP", "rnicA", "rnicB"},
	} {
		i := next(m.from+"'s "+m.msg+" sent", cmEvent(m.from, m.msg+" sent"))
		if start < 0 {
			start = i
		}
		next(m.from+"'s post of a SEND on QP 1", func(e *trace.Event) bool {
			return e.NIC == m.from && e.Module == trace.ModVerbs && e.QPN == 1 && e.Step == trace.StepPost
		})
		next(m.from+"'s "+m.msg+" on the wire", qp1(m.from, trace.StepTransmit))
		next(m.to+"'s "+m.msg+" off the wire", qp1(m.to, trace.StepReceive))
		next(m.to+"'s QP1 receive CQE", func(e *trace.Event) bool {
			return e.NIC == m.to && e.Module == trace.ModCompleter && e.QPN == 1 && e.Step == trace.StepComplete
		})
		end := next(m.to+"'s "+m.msg+" received", cmEvent(m.to, m.msg+" received"))
		if m.msg == "DREQ" {
			dreq = i
		}
		if m.msg == "DREP" {
			logTimeline(t, "the disconnect", all[dreq:end+1])
		}
		if m.msg == "RTU" {
			// The first ping: the client's SEND of its buffer and the
			// server's ACK, on the connection's QPs.
			at = start
			next("the client's first SEND", func(e *trace.Event) bool {
				return e.NIC == "rnicB" && e.Module == trace.ModPort && e.Step == trace.StepTransmit && e.Opcode == bth.RCSendOnly
			})
			end := next("its ACK", func(e *trace.Event) bool {
				return e.NIC == "rnicB" && e.Module == trace.ModCompleter && e.Step == trace.StepAckRecv
			})
			logTimeline(t, "one rping's connection, both daemons", all[start:end+2])
			at = end + 1
		}
	}
}

func logTimeline(t *testing.T, what string, es []trace.Event) {
	var b strings.Builder
	for _, e := range es {
		fmt.Fprintln(&b, trace.Format(&e, es[0].Time))
	}
	t.Logf("%s:\n%s", what, b.String())
}
