package tests

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/rnicd/rnicd/internal/debtest"
	"github.com/rnicd/rnicd/internal/promtest"
	"github.com/rnicd/rnicd/verbs"
)

// TestObserveDaemons watches two rnicd processes as a user would: with
// --trace, --pcap and --http, WRITEs between them through verbs, and the
// rnic stat, trace and inject tools reaching them by device name. The
// trace file must tell the WRITE's steps in module order with its QPN and
// PSNs, /metrics and rnic stat the counters that match the packets, the
// capture must decode in tshark packet for packet, and a 100% loss set
// with rnic inject must end a WRITE in RETRY_EXC_ERR with the retries
// counted, until `inject off` lets WRITEs through again.
func TestObserveDaemons(t *testing.T) {
	tshark := debtest.Ensure(t, "tshark", "tshark")
	rnic := filepath.Join(binDir, "rnic")
	dir := t.TempDir()
	files := func(name string) (tr, pc string) {
		return filepath.Join(dir, name+".trace.json"), filepath.Join(dir, name+".pcap")
	}
	trC, pcC := files("rnicC")
	trD, pcD := files("rnicD")
	addrC, addrD := ownAddr(t), ownAddr(t)
	// rnicC with its per-QP series, which /metrics must hold to promtool
	// too.
	dc, err := startDaemon(dir, "rnicC", addrC, "-trace", trC, "-pcap", pcC, "-http", addrC+":0", "-metrics-qp")
	if err != nil {
		t.Fatal(err)
	}
	// rnicD's capture rotates at 8 KiB, every file kept: several files,
	// in pcapng.
	pcD += "ng"
	dd, err := startDaemon(dir, "rnicD", addrD, "-trace", trD, "-pcap", pcD, "-pcap-format", "pcapng", "-pcap-size", "8192", "-pcap-files", "0", "-http", addrD+":0")
	if err != nil {
		dc.stop()
		t.Fatal(err)
	}
	stopBoth := stopper(t, dc, dd)
	t.Setenv("RNICD_DIR", dir)
	t.Setenv("RNIC_HTTP", "")
	mC, mD := metricsURL(t, dc), metricsURL(t, dd)
	checkMetricsText(t, get(t, mC))

	a := newEnd(t, open(t, "rnicC"), endOpts{typ: verbs.QPTypeRC})
	// A QP before b's, so that the QPNs of the two ends differ and the
	// trace check can tell them apart.
	newEnd(t, open(t, "rnicD"), endOpts{typ: verbs.QPTypeRC})
	b := newEnd(t, open(t, "rnicD"), endOpts{typ: verbs.QPTypeRC})
	// Timeout 18 (1.07 s): the counts below are those of a lossless
	// exchange, which a 67 ms ACK timeout run out on a stalled host
	// would change (a retransmission, another ACK).
	connect(t, a, b, verbs.QPTypeRC, 7, 18)
	connect(t, b, a, verbs.QPTypeRC, 7, 18)

	// One WRITE of three packets at MTU 1024.
	writeAndCheck(t, a, b, 0x51, 3000, 64, 9, "WRITE")

	checkWriteTrace(t, trC, trD, a.qp.QPN, b.qp.QPN, 0x51)

	// The counters, over /metrics and from rnic stat.
	c, d := scrape(t, mC, "rnicC"), scrape(t, mD, "rnicD")
	for _, w := range []struct {
		what      string
		got, want float64
	}{
		{"rnicC sent_pkts", c["sent_pkts"], 3},
		{"rnicD rcvd_pkts", d["rcvd_pkts"], 3},
		{"rnicC rdma_sends", c["rdma_sends"], 1},
		{"rnicD rdma_sends", d["rdma_sends"], 0},
		// One ACK, for the last packet, which alone asks for one.
		{"rnicD sent_pkts", d["sent_pkts"], 1},
		{"rnicC rcvd_pkts", c["rcvd_pkts"], 1},
		{"rnicC retransmitted_pkts", c["retransmitted_pkts"], 0},
		{"rnicC fault tx packets", c[`fault_packets{dir="tx"}`], 3},
	} {
		if w.got != w.want {
			t.Errorf("%s = %v, want %v", w.what, w.got, w.want)
		}
	}
	stat := runTool(t, rnic, "stat", "-d", "rnicC")
	for _, k := range []string{"sent_pkts", "rcvd_pkts", "rdma_sends", "retransmitted_pkts"} {
		if want := fmt.Sprintf(" %s %v ", k, c[k]); !strings.Contains(stat+" ", want) {
			t.Errorf("rnic stat lacks %q:\n%s", want, stat)
		}
	}
	if want := fmt.Sprintf("qp rnicC %#x RC RTS ", a.qp.QPN); !strings.Contains(stat, want) {
		t.Errorf("rnic stat lacks %q:\n%s", want, stat)
	}
	// The web view is on the --http port too.
	if page := get(t, strings.TrimSuffix(mC, "/metrics")+"/"); !strings.Contains(page, "<title>rnicd: inside the NIC</title>") {
		t.Errorf("--http / is not the web view:\n%.300s", page)
	}

	followTrace(t, rnic, a, b)

	// A 100% loss on rnicC: a WRITE on a QP with retry_cnt 2 and a 4 ms
	// ACK timeout is sent three times, then completes in RETRY_EXC_ERR.
	if out := runTool(t, rnic, "inject", "-d", "rnicC", "drop", "100%"); out != "rnicC tx: drop 100% \nrnicC rx: drop 100% \n" {
		t.Errorf("rnic inject printed %q", out)
	}
	a2 := newEnd(t, a.ctx, endOpts{typ: verbs.QPTypeRC, pd: a.pd})
	b2 := newEnd(t, b.ctx, endOpts{typ: verbs.QPTypeRC, pd: b.pd})
	connect(t, a2, b2, verbs.QPTypeRC, 2, 10)
	connect(t, b2, a2, verbs.QPTypeRC, 2, 10)
	c0, d0 := scrape(t, mC, "rnicC"), scrape(t, mD, "rnicD")
	post(t, a2, verbs.SendWR{WRID: 0x52, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{a2.mr.SGE(0, 100)}, RemoteAddr: b2.mr.Addr, RKey: b2.mr.RKey})
	if wc := pollN(t, a2.cq, 1)[0]; wc.Status != verbs.WCRetryExcErr || wc.WRID != 0x52 {
		t.Fatalf("WRITE under 100%% loss: %v, want RETRY_EXC_ERR", &wc)
	}
	c1, d1 := scrape(t, mC, "rnicC"), scrape(t, mD, "rnicD")
	for _, w := range []struct {
		name string
		want float64
	}{
		{"sent_pkts", 3}, {"retransmitted_pkts", 2}, {"local_ack_timeout_err", 3},
		{"completer_retry_err", 2}, {"retry_exceeded_err", 1}, {`fault_dropped{dir="tx"}`, 3}, {"rcvd_pkts", 0},
	} {
		if got := c1[w.name] - c0[w.name]; got != w.want {
			t.Errorf("under 100%% loss rnicC %s grew by %v, want %v", w.name, got, w.want)
		}
	}
	if d1["rcvd_pkts"] != d0["rcvd_pkts"] {
		t.Errorf("rnicD received %v packets through a 100%% loss", d1["rcvd_pkts"]-d0["rcvd_pkts"])
	}
	// /metrics again, now with QPs (one in the error state) and the
	// fault injector's counters at work.
	body := get(t, mC)
	checkMetricsText(t, body)
	if want := fmt.Sprintf(`rnicd_qp_info{device="rnicC",qpn="%#x",state="ERR",type="RC"} 1`, a2.qp.QPN); !strings.Contains(body, want+"\n") {
		t.Errorf("/metrics -metrics-qp has no %s", want)
	}

	// Off: WRITEs pass again, and the injector drops nothing more.
	if out := runTool(t, rnic, "inject", "-d", "rnicC", "off"); out != "rnicC tx: off\nrnicC rx: off\n" {
		t.Errorf("rnic inject off printed %q", out)
	}
	// Six packets: with the first WRITE's three they put more than 8 KiB
	// in rnicD's capture whatever the number of WRITEs followTrace made
	// (one, under load), so that its capture rotates.
	writeAndCheck(t, a, b, 0x53, 6000, 8192, 33, "WRITE after inject off")
	c2, d2 := scrape(t, mC, "rnicC"), scrape(t, mD, "rnicD")
	if c2[`fault_dropped{dir="tx"}`] != c1[`fault_dropped{dir="tx"}`] || c2["sent_pkts"]-c1["sent_pkts"] != 6 {
		t.Errorf("after inject off: dropped %v → %v, sent_pkts grew by %v (want 6)",
			c1[`fault_dropped{dir="tx"}`], c2[`fault_dropped{dir="tx"}`], c2["sent_pkts"]-c1["sent_pkts"])
	}

	// The captures, once the daemons have closed them: rnicC's has what
	// rnicC put on the wire (sent_pkts less what the injector dropped) and
	// what reached it; rnicD's, in several files, every packet it sent and
	// received.
	stopBoth()
	fromC, toC := tsharkCount(t, tshark, []string{pcC}, addrC)
	if want := c2["sent_pkts"] - c2[`fault_dropped{dir="tx"}`]; float64(fromC) != want {
		t.Errorf("rnicC's capture has %d packets from %s, want %v", fromC, addrC, want)
	}
	if want := c2["rcvd_pkts"] + c2[`fault_dropped{dir="rx"}`]; float64(toC) != want {
		t.Errorf("rnicC's capture has %d packets to %s, want %v", toC, addrC, want)
	}
	t.Logf("rnicC's capture: %d packets sent, %d received", fromC, toC)
	rotated, _ := filepath.Glob(pcD + ".*")
	if len(rotated) == 0 {
		t.Errorf("rnicD's capture did not rotate at 8 KiB")
	}
	fromD, toD := tsharkCount(t, tshark, append([]string{pcD}, rotated...), addrD)
	tsharkNg(t, tshark, append([]string{pcD}, rotated...), addrD, "rnicD")
	t.Logf("rnicD's capture: %d files, %d packets sent, %d received", 1+len(rotated), fromD, toD)
	if float64(fromD) != d2["sent_pkts"] || float64(toD) != d2["rcvd_pkts"] {
		t.Errorf("rnicD's capture has %d sent and %d received packets, its counters %v and %v",
			fromD, toD, d2["sent_pkts"], d2["rcvd_pkts"])
	}
}

// traceEvent is a line of rnicd --trace, by the names a user's jq sees.
type traceEvent struct {
	Module  string `json:"module"`
	Step    string `json:"step"`
	QPN     uint32 `json:"qpn"`
	DestQPN uint32 `json:"dest_qpn"`
	PSN     uint32 `json:"psn"`
	WRID    uint64 `json:"wr_id"`
	Opcode  string `json:"opcode"`
	WROp    string `json:"wr_opcode"`
	Arg     uint32 `json:"arg"`
}

// writeAndCheck WRITEs n bytes of a pattern from the start of a's MR to
// offset off of b's, and checks the completion and the bytes at the peer.
func writeAndCheck(t *testing.T, a, b *end, wrid uint64, n, off int, seed byte, what string) {
	t.Helper()
	data := pattern(n, seed)
	copy(a.mr.Buf, data)
	post(t, a, verbs.SendWR{WRID: wrid, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{a.mr.SGE(0, n)}, RemoteAddr: b.mr.Addr + uint64(off), RKey: b.mr.RKey})
	wantWC(t, pollN(t, a.cq, 1)[0], verbs.WC{WRID: wrid, Opcode: 1, ByteLen: uint32(n), QPNum: a.qp.QPN})
	if !bytes.Equal(b.mr.Buf[off:off+n], data) {
		t.Fatalf("%s: data differs at the peer", what)
	}
}

func (e traceEvent) String() string {
	return fmt.Sprintf("%s/%s qpn %#x dest_qpn %#x psn %#x wr_id %#x opcode %q wr_opcode %q arg %d",
		e.Module, e.Step, e.QPN, e.DestQPN, e.PSN, e.WRID, e.Opcode, e.WROp, e.Arg)
}

// match reports whether e has every field that w sets (zero fields of w
// are not checked).
func (w traceEvent) match(e traceEvent) bool {
	eqs := func(a, b string) bool { return a == "" || a == b }
	eqn := func(a, b uint64) bool { return a == 0 || a == b }
	return w.Module == e.Module && w.Step == e.Step && eqn(uint64(w.QPN), uint64(e.QPN)) &&
		eqn(uint64(w.DestQPN), uint64(e.DestQPN)) && eqn(uint64(w.PSN), uint64(e.PSN)) && eqn(w.WRID, e.WRID) &&
		eqs(w.Opcode, e.Opcode) && eqs(w.WROp, e.WROp) && eqn(uint64(w.Arg), uint64(e.Arg))
}

// readTrace reads path's events until one matches last, which the daemon
// writes a moment after the event happened.
func readTrace(t *testing.T, path string, last traceEvent) []traceEvent {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		var evs []traceEvent
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var e traceEvent
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
				break // the last line may be half written
			}
			evs = append(evs, e)
		}
		f.Close()
		for _, e := range evs {
			if last.match(e) {
				return evs
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d events, none %v", path, len(evs), last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// inOrder checks that evs has events matching want in that order (others
// may come between).
func inOrder(t *testing.T, who string, evs []traceEvent, want ...traceEvent) {
	t.Helper()
	i := 0
	for _, e := range evs {
		if i < len(want) && want[i].match(e) {
			i++
		}
	}
	if i < len(want) {
		var all strings.Builder
		for _, e := range evs {
			fmt.Fprintln(&all, e)
		}
		t.Errorf("%s trace: no %v after %v; events:\n%s", who, want[i], want[:i], all.String())
	}
}

// checkWriteTrace follows the three-packet WRITE wrid from QP qpn of
// rnicC to QP dqpn of rnicD through both daemons' trace files: each
// block's step in order, each with its QPN and PSN.
func checkWriteTrace(t *testing.T, trC, trD string, qpn, dqpn uint32, wrid uint64) {
	t.Helper()
	const psn = 0x100 // connect's SQ PSN
	ops := []string{"RC_RDMA_WRITE_FIRST", "RC_RDMA_WRITE_MIDDLE", "RC_RDMA_WRITE_LAST"}
	const ack = "RC_ACKNOWLEDGE"
	c := readTrace(t, trC, traceEvent{Module: "comp", Step: "complete", QPN: qpn, WRID: wrid})
	inOrder(t, "rnicC", c,
		traceEvent{Module: "verbs", Step: "post", QPN: qpn, WRID: wrid, WROp: "RDMA_WRITE"},
		traceEvent{Module: "doorbell", Step: "doorbell", QPN: qpn, Arg: 1},
		traceEvent{Module: "wqe", Step: "fetch", QPN: qpn, PSN: psn, WRID: wrid, WROp: "RDMA_WRITE", Arg: 3},
		traceEvent{Module: "wqe", Step: "segment", QPN: qpn, PSN: psn, Opcode: ops[0]})
	for i, op := range ops {
		p := psn + uint32(i)
		inOrder(t, "rnicC", c,
			traceEvent{Module: "wqe", Step: "segment", QPN: qpn, PSN: p, Opcode: op},
			traceEvent{Module: "dma", Step: "dma_read", QPN: qpn, PSN: p},
			traceEvent{Module: "wqe", Step: "headers", QPN: qpn, PSN: p, Opcode: op},
			traceEvent{Module: "port", Step: "icrc", DestQPN: dqpn, PSN: p, Opcode: op},
			traceEvent{Module: "port", Step: "transmit", DestQPN: dqpn, PSN: p, Opcode: op})
	}
	inOrder(t, "rnicC", c,
		traceEvent{Module: "port", Step: "transmit", DestQPN: dqpn, PSN: psn + 2, Opcode: ops[2]},
		traceEvent{Module: "port", Step: "receive", QPN: qpn, PSN: psn + 2, Opcode: ack},
		traceEvent{Module: "comp", Step: "ack_recv", QPN: qpn, PSN: psn + 2, Opcode: ack},
		traceEvent{Module: "comp", Step: "complete", QPN: qpn, PSN: psn, WRID: wrid, WROp: "RDMA_WRITE"})

	d := readTrace(t, trD, traceEvent{Module: "port", Step: "transmit", DestQPN: qpn, PSN: psn + 2, Opcode: ack})
	for i, op := range ops {
		p := psn + uint32(i)
		inOrder(t, "rnicD", d,
			traceEvent{Module: "port", Step: "receive", QPN: dqpn, PSN: p, Opcode: op},
			traceEvent{Module: "port", Step: "icrc_check", QPN: dqpn, PSN: p, Opcode: op},
			traceEvent{Module: "rx", Step: "psn_check", QPN: dqpn, PSN: p, Opcode: op},
			traceEvent{Module: "dma", Step: "dma_write", QPN: dqpn, PSN: p})
	}
	inOrder(t, "rnicD", d,
		traceEvent{Module: "dma", Step: "dma_write", QPN: dqpn, PSN: psn + 2},
		traceEvent{Module: "rx", Step: "ack_sent", QPN: dqpn, PSN: psn + 2, Opcode: ack},
		traceEvent{Module: "port", Step: "transmit", DestQPN: qpn, PSN: psn + 2, Opcode: ack})
}

// followTrace runs `rnic trace -d rnicC -qp QPN -n 12` while WRITEs run and
// checks it printed a timeline of that QP.
func followTrace(t *testing.T, rnic string, a, b *end) {
	t.Helper()
	out := traceWhileWriting(t, rnic, a, b, "-qp", fmt.Sprint(a.qp.QPN), "-n", "12")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 12 {
		t.Fatalf("rnic trace -n 12 printed %d lines:\n%s", len(lines), out)
	}
	qp := fmt.Sprintf("qp %#x", a.qp.QPN)
	for _, l := range lines {
		if !strings.Contains(l, " rnicC ") || !strings.Contains(l, qp) {
			t.Errorf("line %q is not rnicC's %s", l, qp)
		}
	}
	if !strings.Contains(out, "transmit") && !strings.Contains(out, "post") {
		t.Errorf("rnic trace shows neither a post nor a transmit:\n%s", out)
	}

	// -packets: a's WRITEs leaving and their ACKs arriving, nothing
	// else; a sent packet names the QP it left from, so a's are there
	// although the BTH names b's QP.
	out = traceWhileWriting(t, rnic, a, b, "-qp", fmt.Sprint(a.qp.QPN), "-packets", "-json", "-n", "8")
	seen := map[string]int{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var e traceEvent
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("rnic trace -json printed %q: %v", l, err)
		}
		switch {
		case e.Module == "port" && e.Step == "transmit" && e.QPN == a.qp.QPN && e.DestQPN == b.qp.QPN && e.Opcode == "RC_RDMA_WRITE_ONLY",
			e.Module == "port" && e.Step == "receive" && e.QPN == a.qp.QPN && e.Opcode == "RC_ACKNOWLEDGE":
			seen[e.Step]++
		default:
			t.Errorf("rnic trace -qp %#x -packets printed %v", a.qp.QPN, e)
		}
	}
	if seen["transmit"] == 0 || seen["receive"] == 0 {
		t.Errorf("rnic trace -packets: %v, want WRITEs sent and ACKs received:\n%s", seen, out)
	}
}

// traceWhileWriting runs rnic trace -d rnicC with args, which must stop
// by itself (-n), WRITEing from a to b until it has, and returns what it
// printed.
func traceWhileWriting(t *testing.T, rnic string, a, b *end, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, rnic, append([]string{"trace", "-d", "rnicC"}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	// WRITE until the tool has its events: it subscribes at some point
	// after it starts.
	for i := uint64(1); ; i++ {
		post(t, a, verbs.SendWR{WRID: 0x1000 + i, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{a.mr.SGE(0, 64)}, RemoteAddr: b.mr.Addr, RKey: b.mr.RKey})
		if wc := pollN(t, a.cq, 1)[0]; wc.Status != verbs.WCSuccess {
			t.Fatalf("WRITE %d: %v", i, &wc)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("rnic trace %q: %v\n%s", args, err, errb.String())
			}
			return out.String()
		default:
		}
	}
}

// runTool runs the rnic tool and returns its standard output.
func runTool(t *testing.T, rnic string, args ...string) string {
	t.Helper()
	var out, errb bytes.Buffer
	cmd := exec.Command(rnic, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("rnic %v: %v\n%s", args, err, errb.String())
	}
	return out.String()
}

// checkMetricsText holds /metrics to what a Prometheus server and
// promtool check metrics expect: it parses as the text format, every
// family has a HELP of its own (no two share one, none is a placeholder),
// and the build info, the Go runtime's and the process's families are
// there. No series carries a PSN.
func checkMetricsText(t *testing.T, body string) {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	promtest.Check(t, body)
	for name, f := range fams {
		if h := f.GetHelp(); h == "" || strings.Contains(h, "(undescribed)") {
			t.Errorf("%s: HELP %q says nothing", name, h)
		}
		if strings.Contains(name, "psn") {
			t.Errorf("%s: a PSN as a series", name)
		}
	}
	for _, want := range []string{"rnicd_build_info", "rnicd_sent_pkts_total", "rnicd_cm_tx_msgs_req_total", "rnicd_port_icrc_err_total",
		"rnicd_fault_dropped_total", "rnicd_qps", "go_goroutines", "process_open_fds"} {
		if fams[want] == nil {
			t.Errorf("/metrics has no %s", want)
		}
	}
	if bi := fams["rnicd_build_info"]; bi != nil {
		labels := map[string]string{}
		for _, l := range bi.GetMetric()[0].GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["version"] != "0.9.0" || !strings.HasPrefix(labels["goversion"], "go1.") {
			t.Errorf("rnicd_build_info labels %v", labels)
		}
	}
}

// metricsURL is the /metrics of a daemon started with -http, from the
// address its ready line names.
func metricsURL(t *testing.T, d *daemon) string {
	t.Helper()
	_, addr, ok := strings.Cut(d.ready, " http=")
	if !ok {
		t.Fatalf("%s's ready line names no http address: %q", d.name, d.ready)
	}
	addr, _, _ = strings.Cut(addr, " ")
	return "http://" + addr + "/metrics"
}

var metricLine = regexp.MustCompile(`^rnicd_(\w+)_total\{(.*)\} (\S+)$`)

// scrape reads the device's counters from /metrics: rnicd_NAME_total by
// NAME, the fault injector's by NAME{dir="tx"} and NAME{dir="rx"}.
func scrape(t *testing.T, url, device string) map[string]float64 {
	t.Helper()
	body := get(t, url)
	m := map[string]float64{}
	for _, line := range strings.Split(body, "\n") {
		g := metricLine.FindStringSubmatch(line)
		if g == nil {
			continue
		}
		labels := strings.Split(g[2], ",")
		if labels[0] != fmt.Sprintf("device=%q", device) {
			t.Fatalf("metric of another device: %s", line)
		}
		v, err := strconv.ParseFloat(g[3], 64)
		if err != nil {
			t.Fatalf("metric %s: %v", line, err)
		}
		name := g[1]
		if len(labels) > 1 {
			name += "{" + strings.Join(labels[1:], ",") + "}"
		}
		m[name] = v
	}
	for _, k := range []string{"sent_pkts", "rcvd_pkts", "rdma_sends", "retry_exceeded_err", `fault_dropped{dir="tx"}`} {
		if _, ok := m[k]; !ok {
			t.Fatalf("%s has no %s:\n%s", url, k, body)
		}
	}
	return m
}

// get returns the body of url, which must answer 200 OK.
func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %v %s", url, err, resp.Status)
	}
	return string(body)
}

// tsharkCount has tshark read the capture files, fails on any frame it
// does not decode as InfiniBand or finds malformed, and counts the
// packets from and to addr.
// tsharkNg checks, by tshark, that every frame of the pcapng files paths
// names the device's interface and is marked sent (p2p_dir 0) when it
// comes from addr, received (1) when it goes to addr.
func tsharkNg(t *testing.T, tshark string, paths []string, addr, dev string) {
	t.Helper()
	for _, p := range paths {
		out, err := exec.Command(tshark, "-r", p, "-T", "fields", "-E", "separator=,",
			"-e", "frame.interface_name", "-e", "frame.p2p_dir", "-e", "ip.src", "-e", "ip.dst").Output()
		if err != nil {
			t.Fatalf("tshark %s: %v", p, err)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			want := dev + ",1,"
			if strings.HasSuffix(line, ","+addr) == strings.Contains(line, ","+addr+",") {
				t.Errorf("%s: frame %q neither from nor to %s", p, line, addr)
			} else if strings.Contains(line, ","+addr+",") {
				want = dev + ",0,"
			}
			if !strings.HasPrefix(line, want) {
				t.Errorf("%s: frame %q, want interface %s and direction %s", p, line, dev, want[len(dev)+1:len(want)-1])
			}
		}
	}
}

func tsharkCount(t *testing.T, tshark string, paths []string, addr string) (from, to int) {
	t.Helper()
	for _, p := range paths {
		bad, err := exec.Command(tshark, "-r", p, "-Y", "_ws.malformed || !infiniband").Output()
		if err != nil {
			t.Fatalf("tshark %s: %v", p, err)
		}
		if s := strings.TrimSpace(string(bad)); s != "" {
			t.Errorf("tshark finds malformed or undecoded frames in %s:\n%s", p, s)
		}
		out, err := exec.Command(tshark, "-r", p, "-T", "fields", "-E", "separator=,",
			"-e", "ip.src", "-e", "ip.dst", "-e", "udp.dstport", "-e", "infiniband.bth.opcode").Output()
		if err != nil {
			t.Fatalf("tshark %s: %v", p, err)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			f := strings.Split(line, ",")
			if len(f) != 4 || f[2] != "4791" || f[3] == "" {
				t.Errorf("%s: frame %q is not RoCEv2", p, line)
				continue
			}
			switch addr {
			case f[0]:
				from++
			case f[1]:
				to++
			default:
				t.Errorf("%s: frame %q neither from nor to %s", p, line, addr)
			}
		}
	}
	return from, to
}
