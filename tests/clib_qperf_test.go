package tests

import (
	"bytes"
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rnicd/rnicd/verbs"
)

// TestCLibQperf runs Debian's qperf 0.4.11 between two rnicd, its
// server on one and its client on the other (each sees only its own:
// the daemons' sockets are in two directories), the program unmodified
// and only clib on LD_LIBRARY_PATH.
//
// With -cm1 (rdma_cm) the four RC tests run: rc_bw and rc_rdma_write_bw
// move exactly the -n messages asked for, which rnicd's counters show on
// both sides; rc_lat and rc_rdma_read_lat measure a latency. qperf stops
// a timed test with a SIGALRM that must end the blocking
// ibv_get_cq_event with EINTR, as libibverbs' read of its event file
// ends: the server hung for ever in it before.
//
// Without -cm1 qperf exchanges LIDs and no GIDs, and addresses its QPs
// and AHs without a GRH, which RoCE cannot route: rxe refuses them with
// EINVAL, as rnicd does, saying why. qperf 0.4.11 runs ud_lat and ud_bw
// without rdma_cm whatever -cm1 says ("-cm1 set but not used"), so they
// fail so on every RoCE device.
func TestCLibQperf(t *testing.T) {
	qperf := debianTool(t, "qperf", "qperf")
	p := startApart(t, "qp", nil)
	a, dirA, dirB, ca, cb := p.a, p.dirA, p.dirB, p.ca, p.cb

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	port := freePort(t)
	srv := qperf(ctx, "", "-lp", port)
	srv.Env = append(srv.Env, "RNICD_DIR="+dirA)
	var sout lockedBuf
	srv.Stdout, srv.Stderr = &sout, &sout
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		srv.Process.Kill()
		srv.Wait()
		if t.Failed() {
			t.Logf("qperf server printed:\n%s", sout.String())
		}
	}()

	// client runs qperf's client on dir's rnicd against the server at
	// host; it waits for the server to listen, and runs a test again
	// that lost qperf 0.4.11's own race (its server sends the rdma_cm
	// port before it listens there: a connect in between is rejected).
	client := func(dir, host string, args ...string) (string, error) {
		for {
			c := qperf(ctx, "", append([]string{host, "-lp", port}, args...)...)
			c.Env = append(c.Env, "RNICD_DIR="+dir)
			var out bytes.Buffer
			c.Stdout, c.Stderr = &out, &out
			err := c.Run()
			o := out.String()
			if ctx.Err() == nil && err != nil &&
				(strings.Contains(o, "Connection refused") || strings.Contains(o, "unexpected event from RDMA CM: Event rejected")) {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			return o, err
		}
	}
	hostA := a.addr.String()
	counters := func(c *verbs.Context) map[string]uint64 { return must[map[string]uint64](t)(c.Counters()) }
	field := func(out, k string) uint64 {
		t.Helper()
		// The latency tests print both ends' counts (loc_, rem_).
		m := regexp.MustCompile(`(?m)^\s+(?:loc_)?` + k + `\s+=\s+([0-9,]+) *$`).FindStringSubmatch(out)
		if m == nil {
			t.Errorf("no %s count in\n%s", k, out)
			return 0
		}
		return must[uint64](t)(strconv.ParseUint(strings.ReplaceAll(m[1], ",", ""), 10, 64))
	}

	// Bandwidth, timed (-t 1; -n takes the timer away, and the RDMA
	// tests, which do not count by it, then never end): 64 KiB
	// messages, qperf's default, 64 packets each at rnicd's MTU of 1024.
	for _, test := range []string{"rc_bw", "rc_rdma_write_bw"} {
		beforeA, beforeB := counters(ca), counters(cb)
		out, err := client(dirB, hostA, "-cm1", "-t", "1", "-vvs", test)
		if err != nil {
			t.Errorf("qperf -cm1 %s: %v\n%s", test, err, out)
			continue
		}
		// qperf frees its PD before its MR and ignores the EBUSY, as
		// on rxe, where the library says nothing either.
		if strings.Contains(out, "libibverbs-rnicd") || strings.Contains(out, "librdmacm-rnicd") {
			t.Errorf("qperf -cm1 %s: the library printed to a run that works:\n%s", test, out)
		}
		if !regexp.MustCompile(`(?m)^` + test + `:\n\s+bw\s+=\s+[0-9.]+ [MGK]B/sec\n`).MatchString(out) {
			t.Errorf("qperf -cm1 %s printed no bandwidth:\n%s", test, out)
		}
		sent, recvd := field(out, "send_msgs"), field(out, "recv_msgs")
		if sent == 0 || recvd == 0 || recvd > sent {
			t.Errorf("qperf -cm1 %s: %d messages sent, %d received\n%s", test, sent, recvd, out)
		}
		afterA, afterB := counters(ca), counters(cb)
		// Every message qperf's server received went through the two
		// rnicd: at least 16 packets each (64 KiB at RoCE's largest
		// MTU) left the client's and reached the server's. Its client
		// counts a message when it posts it: at the end of -t 1 on a
		// busy host, hundreds were posted and never sent (beside
		// stress-ng, 1,192 posted, 168 received, 10,883 packets sent).
		if got := afterB["sent_pkts"] - beforeB["sent_pkts"]; got < 16*recvd {
			t.Errorf("qperf -cm1 %s: the client's rnicd sent %d packets for %d messages of 64 KiB received", test, got, recvd)
		}
		if got := afterA["rcvd_pkts"] - beforeA["rcvd_pkts"]; got < 16*recvd {
			t.Errorf("qperf -cm1 %s: the server's rnicd received %d packets for %d messages of 64 KiB", test, got, recvd)
		}
		// qperf 0.4.11's race (above) costs a REQ and its REJ a try.
		if req, rej := afterB["cm_tx_msgs_req"]-beforeB["cm_tx_msgs_req"], afterB["cm_rx_msgs_rej"]-beforeB["cm_rx_msgs_rej"]; req != rej+1 {
			t.Errorf("qperf -cm1 %s: the client's rnicd sent %d REQs and received %d REJs: want one connection", test, req, rej)
		}
		if req, rej := afterA["cm_rx_msgs_req"]-beforeA["cm_rx_msgs_req"], afterA["cm_tx_msgs_rej"]-beforeA["cm_tx_msgs_rej"]; req != rej+1 {
			t.Errorf("qperf -cm1 %s: the server's rnicd received %d REQs and sent %d REJs: want one connection", test, req, rej)
		}
		// One connection from the client's rnicd to the server's.
		for _, w := range []struct {
			before, after map[string]uint64
			who, k        string
			want          uint64
		}{
			{beforeA, afterA, "server's", "cm_tx_msgs_rep", 1},
			{beforeB, afterB, "client's", "cm_tx_msgs_rtu", 1},
			{beforeB, afterB, "client's", "cm_tx_msgs_dreq", 1},
			{beforeA, afterA, "server's", "cm_tx_msgs_drep", 1},
			{beforeB, afterB, "client's", "retry_exceeded_err", 0},
		} {
			if got := w.after[w.k] - w.before[w.k]; got != w.want {
				t.Errorf("qperf -cm1 %s: the %s rnicd counts %s %d, want %d", test, w.who, w.k, got, w.want)
			}
		}
		t.Logf("qperf -cm1 -t 1 %s:\n%s", test, out)
	}

	// Latency, timed (-t 1: -n is not used by these tests).
	for _, test := range []string{"rc_lat", "rc_rdma_read_lat"} {
		beforeB := counters(cb)
		out, err := client(dirB, hostA, "-cm1", "-t", "1", "-vvs", test)
		if err != nil {
			t.Errorf("qperf -cm1 %s: %v\n%s", test, err, out)
			continue
		}
		if !regexp.MustCompile(`(?m)^` + test + `:\n\s+latency\s+=\s+[0-9.]+ [um]s\n`).MatchString(out) {
			t.Errorf("qperf -cm1 %s printed no latency:\n%s", test, out)
		}
		n := field(out, "send_msgs")
		if n == 0 {
			t.Errorf("qperf -cm1 %s: no messages", test)
		}
		if test == "rc_lat" {
			// qperf counts a SEND when it posts it, rnicd when it
			// completes (rdma_sends); a ping-pong has one on its way
			// at a time, which the timer may leave unfinished.
			if got := counters(cb)["rdma_sends"] - beforeB["rdma_sends"]; got+1 < n || got > n {
				t.Errorf("qperf -cm1 rc_lat: the client's rnicd counts rdma_sends %d, qperf %d posted", got, n)
			}
		}
		t.Logf("qperf -cm1 -t 1 %s:\n%s", test, out)
	}

	// A loopback destination: rdma_cm's ID takes its own device, as
	// the kernel's cma_resolve_loopback does (the connect waited out
	// every CM retry before).
	if out, err := client(dirA, "127.0.0.1", "-cm1", "-t", "1", "rc_lat"); err != nil ||
		!regexp.MustCompile(`(?m)^rc_lat:\n\s+latency\s+=`).MatchString(out) {
		t.Errorf("qperf -cm1 rc_lat to 127.0.0.1 on the server's rnicd: %v\n%s", err, out)
	}

	// Without rdma_cm: no GRH, refused as rxe refuses it. Whichever
	// end fails first, the other hears of it through qperf's socket;
	// the library's reason is on the stderr of the end that failed.
	const noGRH = "RoCE needs a GRH (ah_attr.is_global and a GID"
	for _, c := range []struct {
		test, want string
		cm         bool
	}{
		{"rc_bw", "failed to modify QP to RTR", false},
		{"rc_lat", "failed to modify QP to RTR", false},
		{"rc_rdma_write_bw", "failed to modify QP to RTR", false},
		{"rc_rdma_read_lat", "failed to modify QP to RTR", false},
		{"ud_lat", "failed to create address handle: Invalid argument", false},
		{"ud_bw", "failed to create address handle: Invalid argument", false},
		{"ud_lat", "failed to create address handle: Invalid argument", true},
		{"ud_bw", "failed to create address handle: Invalid argument", true},
	} {
		args := []string{"-t", "1", c.test}
		if c.cm {
			args = append([]string{"-cm1"}, args...)
		}
		beforeWant, beforeGRH := strings.Count(sout.String(), c.want), strings.Count(sout.String(), noGRH)
		out, err := client(dirB, hostA, args...)
		if err == nil {
			t.Errorf("qperf %v ran on RoCE without a GRH:\n%s", args, out)
		}
		if c.cm && !strings.Contains(out, "warning: -cm1 set but not used in test "+c.test) {
			t.Errorf("qperf %v did not say it ignores -cm1:\n%s", args, out)
		}
		// said: the client printed s, or the server did after before
		// (its child may print after the client heard of it, and
		// qperf's client may lose the text of the server's error).
		said := func(s string, before int) bool {
			for i := 0; i < 100; i++ {
				if strings.Contains(out, s) || strings.Count(sout.String(), s) > before {
					return true
				}
				time.Sleep(50 * time.Millisecond)
			}
			return false
		}
		if !said(c.want, beforeWant) {
			t.Errorf("qperf %v: neither end said %q:\n%s", args, c.want, out)
		}
		if !said(noGRH, beforeGRH) {
			t.Errorf("qperf %v: neither end's library said %q:\n%s", args, noGRH, out)
		}
	}
}
