package tests

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestPerftestRDMACM runs perftest tools with -R between two rnicd: the
// exchange goes over a control QP that rdma_cm connects to the server's
// port, and the test's QPs connect through rdma_cm too, so every QP of a
// run is one connection of the CM agents: the client's daemon sends a
// REQ and an RTU for each, the server's a REP, and nothing times out.
// Each side's output is checked as TestPerftestTools checks it (device,
// GIDs, the size and iterations of the result line), and says rdma_cm.
func TestPerftestRDMACM(t *testing.T) {
	tb := newToolBench(t)
	// The client reaches the server's rdma_cm listener at rnicA's address.
	tb.host = tb.a.addr.String()
	gidA, gidB := perftestGID(tb.a.addr), perftestGID(tb.b.addr)
	const iters = "100"
	cases := []struct {
		tool string
		args []string
		size string
		qps  int
	}{
		{"ib_write_bw", []string{"-s", "65536"}, "65536", 1},
		{"ib_write_bw", []string{"-s", "1025", "-q", "3"}, "1025", 3},
		{"ib_send_bw", []string{"-s", "1025"}, "1025", 1},
		{"ib_send_bw", []string{"-s", "1"}, "1", 1},
		{"ib_read_bw", []string{"-s", "65536"}, "65536", 1},
		{"ib_atomic_bw", []string{"-A", "CMP_AND_SWAP"}, "8", 1},
		{"ib_read_lat", []string{"-s", "1025"}, "1025", 1},
		{"ib_read_lat", []string{"-s", "1"}, "1", 1},
		{"ib_write_lat", []string{"-s", "1025"}, "1025", 1},
		{"ib_send_lat", []string{"-s", "1025"}, "1025", 1},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s/%s", c.tool, strings.Join(c.args, " ")), func(t *testing.T) {
			beforeA, beforeB := must[map[string]uint64](t)(tb.ca.Counters()), must[map[string]uint64](t)(tb.cb.Counters())
			srv, cli := tb.pair(t, c.tool, append([]string{"-R", "-n", iters}, c.args...)...)
			n := fmt.Sprint(c.qps * 100) // a bandwidth test reports all its QPs' iterations
			checkPerftest(t, "client", cli, "rnicB", gidB, gidA, c.size, n)
			if c.tool != "ib_read_lat" { // its server prints no result, as perftest's
				checkPerftest(t, "server", srv, "rnicA", gidA, gidB, c.size, n)
			}
			for who, out := range map[string]string{"client": cli, "server": srv} {
				for _, want := range []string{" rdma_cm QPs\t : ON\n", " Data ex. method : rdma_cm"} {
					if !strings.Contains(out, want) {
						t.Fatalf("%s printed no %q:\n%s", who, want, out)
					}
				}
				// Over rdma_cm perftest prints its QPs as the control
				// QP's verb, a SEND: no rkey and address.
				if strings.Contains(out, "RKey") {
					t.Fatalf("%s printed an rkey:\n%s", who, out)
				}
			}
			afterA, afterB := must[map[string]uint64](t)(tb.ca.Counters()), must[map[string]uint64](t)(tb.cb.Counters())
			delta := func(before, after map[string]uint64, k string) uint64 { return after[k] - before[k] }
			conns := uint64(c.qps + 1) // the test's QPs and the control QP
			for _, w := range []struct {
				before, after map[string]uint64
				who, k        string
				want          uint64
			}{
				{beforeB, afterB, "client's rnicB", "cm_tx_msgs_rtu", conns},
				{beforeB, afterB, "client's rnicB", "cm_rx_msgs_rep", conns},
				{beforeA, afterA, "server's rnicA", "cm_tx_msgs_rep", conns},
				{beforeA, afterA, "server's rnicA", "cm_rx_msgs_rtu", conns},
				{beforeA, afterA, "server's rnicA", "cm_timeouts", 0},
				{beforeB, afterB, "client's rnicB", "cm_timeouts", 0},
			} {
				if got := delta(w.before, w.after, w.k); got != w.want {
					t.Errorf("%s counts %s %d, want %d", w.who, w.k, got, w.want)
				}
			}
			// Every connection ends with a DREQ from one side or both.
			if d := delta(beforeA, afterA, "cm_tx_msgs_dreq") + delta(beforeB, afterB, "cm_tx_msgs_dreq"); d < conns {
				t.Errorf("%d DREQs for %d connections", d, conns)
			}
		})
	}
}

// A -R client whose server does not listen is refused at once (REJ
// reason 8 to its control QP's REQ): exit status 1, "connection refused",
// and nothing left in its daemon.
func TestPerftestRDMACMRefused(t *testing.T) {
	tb := newToolBench(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	cmd := rnic(ctx, "ib_write_bw", "-R", "-d", "rnicB", "-p", freePort(t), tb.a.addr.String())
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(out.String(), "connection refused") {
		t.Fatalf("ib_write_bw -R to a closed port: %v\n%s", err, out.String())
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("refused after %v, want at once", d)
	}
	tb.idle(t)
}
