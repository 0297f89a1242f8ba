package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rnicd/rnicd/internal/debtest"
	"github.com/rnicd/rnicd/monitor"
)

// A tool's QP, on the default path as the README's commands run it, is
// rnicd's like any other, with every block of the NIC applied to it:
// while `rnic ib_write_bw` runs, rnicA's `rnic res` lists the QP as the
// tool's, `rnic stat` (the web view's state) shows it, `rnic trace`
// follows its events, a loss placed with `rnic inject` hits its packets
// and go-back-N recovers it, with the counters (rnicA's /metrics) adding
// up by value; and rnicA's capture holds every packet the tool put on the
// wire and got, which tshark decodes, as many as the daemon logged.
// (The lent-socket path this replaced showed none of it: a capture
// missing 7,539 packets, injected faults that did not apply.)
func TestToolSeenByDaemon(t *testing.T) {
	tshark := debtest.Ensure(t, "tshark", "tshark")
	rnicBin := filepath.Join(binDir, "rnic")
	dir := t.TempDir()
	pcA := filepath.Join(dir, "rnicA.pcap")
	addrA, addrB := ownAddr(t), ownAddr(t)
	da, err := startDaemon(dir, "rnicA", addrA, "-pcap", pcA, "-http", addrA+":0")
	if err != nil {
		t.Fatal(err)
	}
	db, err := startDaemon(dir, "rnicB", addrB, "-http", addrB+":0")
	if err != nil {
		da.stop()
		t.Fatal(err)
	}
	stopBoth := stopper(t, da, db)
	t.Setenv("RNICD_DIR", dir)
	t.Setenv("RNIC_HTTP", "")
	mA, mB := metricsURL(t, da), metricsURL(t, db)

	// A 100 Mbit/s bottleneck on rnicA's sending side. It makes the
	// run last seconds (100 MB), long enough to look at it while it runs.
	// No ECN marks; its queue may overflow when go-back-N sends a window
	// again behind one still queued, which the counters account for.
	runTool(t, rnicBin, "inject", "-d", "rnicA", "--tx", "link", "100mbit", "queue", "1MB", "ecn", "off")

	const iters, size = 25000, 4096 // 4 packets a WRITE at MTU 1024
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	port := freePort(t)
	server := rnic(ctx, "ib_write_bw", "-d", "rnicB", "-p", port, "-n", fmt.Sprint(iters), "-s", fmt.Sprint(size))
	var sout, serr bytes.Buffer
	server.Stdout, server.Stderr = &sout, &serr
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	defer server.Process.Kill()
	var cout, cerr bytes.Buffer
	var client *exec.Cmd
	// The server listens a moment after it starts: a refused client is
	// started again, as a user would.
	var clientDone chan error
	for {
		cout.Reset()
		cerr.Reset()
		client = rnic(ctx, "ib_write_bw", "-d", "rnicA", "-p", port, "-n", fmt.Sprint(iters), "-s", fmt.Sprint(size), "127.0.0.1")
		client.Stdout, client.Stderr = &cout, &cerr
		if err := client.Start(); err != nil {
			t.Fatal(err)
		}
		clientDone = make(chan error, 1)
		go func() { clientDone <- client.Wait() }()
		// A client that reaches the server runs for seconds; one that
		// does not exits at once.
		select {
		case err := <-clientDone:
			if err != nil && notListening(cout.String()+cerr.String()) && ctx.Err() == nil {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			t.Fatalf("the client ended before it could be seen: %v\n%s%s", err, cout.String(), cerr.String())
		case <-time.After(300 * time.Millisecond):
		}
		break
	}
	defer client.Process.Kill()

	// rnic res on rnicA: the tool's QP, connected, owned by the tool.
	var lqpn, rqpn uint64
	pid := client.Process.Pid
	deadline := time.Now().Add(20 * time.Second)
	for lqpn == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("rnic res -d rnicA never listed the tool's QP (pid %d) in RTS:\n%s", pid, runTool(t, rnicBin, "res", "-d", "rnicA"))
		}
		for _, line := range strings.Split(runTool(t, rnicBin, "res", "-d", "rnicA"), "\n") {
			// link rnicA/1 lqpn N rqpn M type RC state RTS ... pid P comm rnic
			f := strings.Fields(line)
			if !strings.Contains(line, fmt.Sprintf(" pid %d comm rnic", pid)) || !strings.Contains(line, " type RC state RTS ") ||
				len(f) < 6 || f[2] != "lqpn" || f[4] != "rqpn" {
				continue
			}
			lqpn, _ = strconv.ParseUint(f[3], 10, 32)
			rqpn, _ = strconv.ParseUint(f[5], 10, 32)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// rnic stat (the web view's /api/state) shows it as rnicA's own.
	if stat, want := runTool(t, rnicBin, "stat", "-d", "rnicA"), fmt.Sprintf("qp rnicA %#x RC RTS ", lqpn); !strings.Contains(stat, want) {
		t.Errorf("rnic stat -d rnicA lacks %q:\n%s", want, stat)
	}

	// The web view's Port and DMA engine blocks chart the rates of the
	// port's packet and byte counters (/api/state's port): over a tenth
	// of a second of the run, each moved.
	stateURL := strings.TrimSuffix(mA, "/metrics") + "/api/state"
	portOf := func() map[string]uint64 {
		var st monitor.State
		if err := json.Unmarshal([]byte(get(t, stateURL)), &st); err != nil || len(st.Devices) != 1 {
			t.Fatalf("/api/state: %v, %d devices", err, len(st.Devices))
		}
		return st.Devices[0].Port
	}
	p0 := portOf()
	time.Sleep(100 * time.Millisecond)
	p1 := portOf()
	for _, k := range []string{"sent_pkts", "rcvd_pkts", "sent_bytes", "rcvd_bytes"} {
		if p1[k] <= p0[k] {
			t.Errorf("web view: port %s went from %d to %d in 100 ms of traffic: a rate of 0", k, p0[k], p1[k])
		}
	}

	// rnic trace on rnicA follows the tool's QP.
	tr := runTool(t, rnicBin, "trace", "-d", "rnicA", "-qp", fmt.Sprint(lqpn), "-n", "12")
	lines := strings.Split(strings.TrimSpace(tr), "\n")
	qpWord := fmt.Sprintf("qp %#x", lqpn)
	if len(lines) != 12 {
		t.Errorf("rnic trace -n 12 printed %d lines:\n%s", len(lines), tr)
	}
	for _, l := range lines {
		if !strings.Contains(l, " rnicA ") || !strings.Contains(l, qpWord) {
			t.Errorf("trace line %q is not rnicA's %s", l, qpWord)
		}
	}
	if !strings.Contains(tr, "RDMA_WRITE") && !strings.Contains(tr, "ACKNOWLEDGE") {
		t.Errorf("rnic trace of a WRITE stream shows neither a WRITE nor an ACK:\n%s", tr)
	}

	// One loss, placed: the next packet the tool sends to the server's QP.
	out := runTool(t, rnicBin, "inject", "-d", "rnicA", "--tx", "--qp", fmt.Sprint(rqpn), "dropnth", "1")
	if !strings.Contains(out, "rnicA tx: dropnth 1 ") {
		t.Errorf("rnic inject printed %q", out)
	}
	for a := scrape(t, mA, "rnicA"); a[`fault_dropped{dir="tx"}`] != 1; a = scrape(t, mA, "rnicA") {
		select {
		case err := <-clientDone:
			t.Fatalf("the tool ended (%v) before the loss; rnicA dropped %v\n%s%s", err, a[`fault_dropped{dir="tx"}`], cout.String(), cerr.String())
		case <-time.After(20 * time.Millisecond):
		}
	}

	// The tool finishes: every WRITE completed.
	if err := <-clientDone; err != nil {
		t.Fatalf("client: %v\n%s%s", err, cout.String(), cerr.String())
	}
	if err := server.Wait(); err != nil {
		t.Fatalf("server: %v\n%s%s", err, sout.String(), serr.String())
	}

	// The tool has gone; rnicA's counters keep what it did: nothing else
	// used rnicA, so they are the tool's.
	a, b := scrape(t, mA, "rnicA"), scrape(t, mB, "rnicB")
	t.Logf("rnicA (the tool's): sent %v retransmitted %v rcvd %v rcvd_seq_err %v local_ack_timeout_err %v link_dropped %v; rnicB: rcvd %v naks_sent %v out_of_seq %v duplicate %v kernel drops %v",
		a["sent_pkts"], a["retransmitted_pkts"], a["rcvd_pkts"], a["rcvd_seq_err"], a["local_ack_timeout_err"], a[`fault_link_dropped{dir="tx"}`],
		b["rcvd_pkts"], b["naks_sent"], b["out_of_seq_request"], b["duplicate_request"], b["port_rx_kernel_drops"])
	for _, c := range []struct {
		what      string
		got, want float64
	}{
		{"rnicA fault_dropped tx", a[`fault_dropped{dir="tx"}`], 1},
		{"rnicA rdma_sends", a["rdma_sends"], iters},
		// rnicB took each WRITE's packets once, in order: what it got
		// less the duplicates and those past the gap, which it dropped.
		{"rnicB rcvd_pkts - duplicate_request - out_of_seq_request", b["rcvd_pkts"] - b["duplicate_request"] - b["out_of_seq_request"], iters * size / 1024},
		// Go-back-N by NAK: rnicB's sequence NAKs are what the tool got.
		{"rnicA rcvd_seq_err", a["rcvd_seq_err"], b["naks_sent"]},
		// Every packet the tool sent reached rnicB but the one lost and
		// those the bottleneck's queue could not take (the window sent
		// again behind itself).
		{"rnicB rcvd_pkts", b["rcvd_pkts"], a["sent_pkts"] - 1 - a[`fault_link_dropped{dir="tx"}`]},
		{"rnicA rcvd_pkts (rnicB's ACKs and NAKs)", a["rcvd_pkts"], b["sent_pkts"]},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
		}
	}
	// Go-back-N: the lost packet and every packet rnicB dropped past it
	// sent again (the requester goes back a whole WQE, so a few more).
	// Whether a sequence NAK or the requester's timer starts it is timing:
	// beside CPU hogs the timer has come first (13 ACK timeouts, no NAK),
	// so the NAKs are held only to equal rnicB's, above.
	if a["retransmitted_pkts"] < 1+b["out_of_seq_request"] {
		t.Errorf("no go-back-N: %v NAKs received, %v packets sent again, rnicB dropped %v past the gap",
			a["rcvd_seq_err"], a["retransmitted_pkts"], b["out_of_seq_request"])
	}

	// rnicA's capture, closed: what the tool put on the wire (sent less
	// what the injector dropped before the wire) and what reached it,
	// every frame RoCEv2 to tshark, as many as the daemon logged.
	stopBoth()
	rotated, _ := filepath.Glob(pcA + ".*")
	from, to := tsharkCount(t, tshark, append([]string{pcA}, rotated...), addrA)
	lost := 1 + a[`fault_link_dropped{dir="tx"}`]
	want := a["sent_pkts"] - lost + a["rcvd_pkts"]
	if float64(from+to) != want || float64(to) != a["rcvd_pkts"] {
		t.Errorf("rnicA's capture has %d packets from %s and %d to it; the counters say %v sent (%v lost) and %v received",
			from, addrA, to, a["sent_pkts"], lost, a["rcvd_pkts"])
	}
	m := regexp.MustCompile(`"capture closed" packets=(\d+)`).FindStringSubmatch(da.errb.String())
	if m == nil || m[1] != strconv.Itoa(from+to) {
		t.Errorf("rnicA logged %q for a capture of %d packets:\n%s", m, from+to, da.errb.String())
	}
	t.Logf("capture: %d from, %d to", from, to)
}
