package tests

import (
	"fmt"
	"strings"
	"testing"
)

// TestPerftestRDMACMUD runs the UD tools with -R between two rnicd: the
// exchange's control QP is an RC connection (REQ/REP/RTU), and each UD
// QP of the test is resolved with a SIDR_REQ from the client's daemon
// answered by a SIDR_REP from the server's, which name the server's QP
// and RDMA_UDP_QKEY; the SENDs go there. In the latency test the client
// then tells the server its QPN by a SEND with immediate, which the
// server answers to. Each side's output is checked as TestPerftestTools
// checks it, the CM counters by value: one connection (the control QP,
// whose REQ may have been refused first: the client starts before the
// server listens) and one SIDR per test QP, nothing retried or timed
// out, and no DREQ beyond the control QP's (a UD QP has no connection
// to end).
func TestPerftestRDMACMUD(t *testing.T) {
	tb := newToolBench(t)
	tb.host = tb.a.addr.String()
	gidA, gidB := perftestGID(tb.a.addr), perftestGID(tb.b.addr)
	const iters = "100"
	for _, c := range []struct {
		tool string
		args []string
		size string
		qps  int
	}{
		{"ib_send_bw", []string{"-s", "1024"}, "1024", 1},
		{"ib_send_bw", []string{"-s", "2", "-q", "3"}, "2", 3},
		{"ib_send_lat", []string{"-s", "2"}, "2", 1},
		{"ib_send_lat", []string{"-s", "1024"}, "1024", 1},
	} {
		t.Run(fmt.Sprintf("%s/%s", c.tool, strings.Join(c.args, " ")), func(t *testing.T) {
			beforeA, beforeB := must[map[string]uint64](t)(tb.ca.Counters()), must[map[string]uint64](t)(tb.cb.Counters())
			srv, cli := tb.pair(t, c.tool, append([]string{"-R", "-c", "UD", "-n", iters}, c.args...)...)
			n := fmt.Sprint(c.qps * 100)
			checkPerftest(t, "client", cli, "rnicB", gidB, gidA, c.size, n)
			checkPerftest(t, "server", srv, "rnicA", gidA, gidB, c.size, n)
			for who, out := range map[string]string{"client": cli, "server": srv} {
				for _, want := range []string{" Connection type : UD", " rdma_cm QPs\t : ON\n", " Data ex. method : rdma_cm"} {
					if !strings.Contains(out, want) {
						t.Fatalf("%s printed no %q:\n%s", who, want, out)
					}
				}
			}
			afterA, afterB := must[map[string]uint64](t)(tb.ca.Counters()), must[map[string]uint64](t)(tb.cb.Counters())
			delta := func(before, after map[string]uint64, k string) uint64 { return after[k] - before[k] }
			qps := uint64(c.qps)
			for _, w := range []struct {
				before, after map[string]uint64
				who, k        string
				want          uint64
			}{
				{beforeB, afterB, "client's rnicB", "cm_tx_msgs_sidr_req", qps},
				{beforeB, afterB, "client's rnicB", "cm_rx_msgs_sidr_rep", qps},
				{beforeA, afterA, "server's rnicA", "cm_rx_msgs_sidr_req", qps},
				{beforeA, afterA, "server's rnicA", "cm_tx_msgs_sidr_rep", qps},
				{beforeB, afterB, "client's rnicB", "cm_tx_msgs_rtu", 1},
				{beforeA, afterA, "server's rnicA", "cm_tx_msgs_rep", 1},
				{beforeA, afterA, "server's rnicA", "cm_tx_retries", 0},
				{beforeB, afterB, "client's rnicB", "cm_tx_retries", 0},
				{beforeA, afterA, "server's rnicA", "cm_timeouts", 0},
				{beforeB, afterB, "client's rnicB", "cm_timeouts", 0},
			} {
				if got := delta(w.before, w.after, w.k); got != w.want {
					t.Errorf("%s counts %s %d, want %d", w.who, w.k, got, w.want)
				}
			}
			if d := delta(beforeA, afterA, "cm_tx_msgs_dreq") + delta(beforeB, afterB, "cm_tx_msgs_dreq"); d != 1 && d != 2 {
				t.Errorf("%d DREQs, want the control QP's (1, or 2 if both sides sent one)", d)
			}
			tb.idle(t)
		})
	}
}
