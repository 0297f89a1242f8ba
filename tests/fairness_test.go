package tests

import (
	"bytes"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/rnicd/rnicd/verbs"
)

// The congestion point of TestFairness: rnicR's port behind a 50 Mb/s
// switch queue of 512 KB (rnic inject's bottleneck link), ECN marking from
// 5 KB to 50 KB, 20% at 50 KB, on the depth a packet leaves behind (mark
// dequeue: the receiver sees the congestion without the queue's delay).
// 50 Mb/s is low enough that the link, not the CPU, is the bottleneck
// on a 2-core host at load 15 (the senders overflow its queue with -cc
// none; at 100 Mb/s and that load the QPs carried 38-45% of the link in
// two runs of three, the host the limit), and the daemons are built
// without -race; the marking range is a twentieth of the queue, as on a
// switch, whose buffer is megabytes to the paper's 5 KB to 200 KB.
var fairnessLink = []string{"link", "50mbit", "queue", "512KB", "ecn", "5KB", "50KB", "20%", "mark", "dequeue"}

// fairnessWindow is every daemon's -window: 256 PSNs of 1 KiB. Four QPs
// then have 1 MB in flight, twice what the queue holds, so that without
// congestion control the queue overflows; and a QP that starts sends its
// first 256 KB before any CNP can reach it, which the queue absorbs
// beside the others' (a switch's buffer is there for such bursts; 256 KB
// is 42 ms of queueing at 50 Mb/s, well inside the ACK timeout).
const fairnessWindow = "256"

// fairnessTimeout is the QPs' ACK timeout: 16, 268 ms. This test is
// about congestion, not loss: on a 2-core host at load 15, a daemon can
// go 67 ms (timeout 14) without running, and the go-back-N of an ACK
// timeout for which nothing was lost resends a window the link had
// already carried. Tail drops are still found at once, by the NAK of
// the gap they leave.
const fairnessTimeout = 16

const (
	fairnessRate  = 50_000_000
	fairnessMsg   = 32 << 10               // bytes a WRITE
	fairnessDepth = 16                     // WRITEs outstanding a QP: 512 KB, more than the window
	fairnessStart = 200 * time.Millisecond // between one QP's start and the next's
	fairnessMeas  = 3 * time.Second        // the measured time, once all four run
)

// fairnessRun is what one run of fairness measured.
type fairnessRun struct {
	goodput   float64    // share of the link's payload capacity, %
	jain      float64    // Jain's index of the QPs' goodputs
	perQP     [4]float64 // Mb/s
	queued    float64    // packets through the link's queue in the measured time
	dropped   float64    // the link's tail drops in the measured time
	sent      float64    // the senders' sent_pkts in the measured time
	retx      float64    // the senders' retransmitted_pkts in the measured time
	startDrop float64    // tail drops before it, while the QPs started
	startRetx float64    // retransmissions before it
	marked    float64    // packets the link marked CE, the whole run
	ceRcvd    float64    // rnicR's np_ecn_marked_roce_packets
	cnpSent   float64    // rnicR's np_cnp_sent
	cnpHandld float64    // the senders' rp_cnp_handled
}

func (r fairnessRun) String() string {
	return fmt.Sprintf("goodput %.1f%% of the link (%.1f %.1f %.1f %.1f Mb/s), Jain %.3f, %v tail drops of %v packets queued, %v of %v sent retransmitted (while starting: %v drops, %v retransmitted), %v marked CE, np_cnp_sent %v, rp_cnp_handled %v",
		r.goodput, r.perQP[0], r.perQP[1], r.perQP[2], r.perQP[3], r.jain, r.dropped, r.queued, r.retx, r.sent, r.startDrop, r.startRetx, r.marked, r.cnpSent, r.cnpHandld)
}

// TestFairness is the congestion-control run end to end: 4 RC QPs, two from each of
// two rnicd senders, stream 32 KiB WRITEs into one rnicd receiver whose
// port sits behind a 50 Mb/s congestion point; the QPs start 200 ms
// apart, and each one's goodput is measured over 3 s once all four run.
// With DCQCN (docs/dcqcn-slow-link.conf: mlx5's rules, time constants
// for a slow link) the queue drops less than it does without it (on a
// calm host: nothing, and 97.5% of the link), the QPs share it fairly (Jain's index >= 0.9), and
// every CE mark became a CNP that a sender's
// reaction point handled. With -cc none the
// same run overflows the queue: tail drops and retransmissions. The
// README quotes both lines of the log.
func TestFairness(t *testing.T) {
	conf, err := filepath.Abs("../docs/dcqcn-slow-link.conf")
	if err != nil {
		t.Fatal(err)
	}
	d := fairness(t, "-cc", "dcqcn", "-cc-config", conf)
	t.Logf("dcqcn: %v", d)
	n := fairness(t, "-cc", "none")
	t.Logf("none:  %v", n)

	// What DCQCN guarantees against the same run without it, on a host
	// as busy as it is: fewer tail drops and a fair share. How many
	// fewer depends on how promptly the host runs the daemons: beside
	// stress-ng and the suite DCQCN had 6% to 53% of -cc none's drops
	// and 11% to 92% of its retransmissions (2026-11-26). The absolute figures
	// (at most 0.1% dropped and 1% retransmitted, 90% of the link) hold
	// on a calm host (97.5% and no drop on 2026-11-24, 96.9-97.7% on
	// 2026-11-26), but a daemon that the host does not run for tens of
	// ms lets its queue build: on a loaded host the same build gave
	// 75-96% with 6-28% of -cc none's drops and 6-52% of its
	// retransmissions. The log keeps both lines for the README.
	if d.dropped >= n.dropped {
		t.Errorf("DCQCN, in the measured time: %v tail drops and %v retransmitted, against %v and %v with -cc none; want fewer drops",
			d.dropped, d.retx, n.dropped, n.retx)
	}
	// Goodput is not among them: beside stress-ng and the suite, DCQCN's
	// senders carried 68.5% of the link against -cc none's 72.8%
	// (2026-11-26), a pacer whose daemon waits for a core sending less
	// than it may; the log keeps both figures.
	if d.jain < 0.9 {
		t.Errorf("DCQCN: Jain %.3f (want >= 0.9), goodput %.1f%% (-cc none: %.1f%%)", d.jain, d.goodput, n.goodput)
	}
	// np_min_time_between_cnps 0: one CNP for every CE-marked packet.
	if d.marked == 0 || d.ceRcvd != d.marked || d.cnpSent != d.marked || d.cnpHandld != d.cnpSent {
		t.Errorf("DCQCN: %v marked CE, np_ecn_marked_roce_packets %v, np_cnp_sent %v, rp_cnp_handled %v; want them all equal",
			d.marked, d.ceRcvd, d.cnpSent, d.cnpHandld)
	}
	if n.dropped+n.startDrop == 0 || n.retx+n.startRetx == 0 || n.marked != 0 || n.cnpSent != 0 || n.cnpHandld != 0 {
		t.Errorf("-cc none: %v tail drops, %v retransmitted, %v marked, %v CNPs sent, %v handled; want drops and retransmissions, no marks, no CNPs",
			n.dropped, n.retx, n.marked, n.cnpSent, n.cnpHandld)
	}
}

// fairness runs the four QPs with rnicd flags cc on all three daemons.
func fairness(t *testing.T, cc ...string) fairnessRun {
	t.Helper()
	rnic := filepath.Join(binDir, "rnic")
	dir := t.TempDir()
	names := []string{"rnicS1", "rnicS2", "rnicR"}
	ds := make([]*daemon, len(names))
	for i, name := range names {
		addr := ownAddr(t)
		d, err := startDaemon(dir, name, addr, append([]string{"-http", addr + ":0", "-window", fairnessWindow}, cc...)...)
		if err != nil {
			t.Fatal(err)
		}
		ds[i] = d
		t.Cleanup(func() {
			if err := d.stop(); err != nil {
				t.Errorf("%v\n%s", err, d.errb.String())
			}
		})
	}
	t.Setenv("RNICD_DIR", dir)
	t.Setenv("RNIC_HTTP", "")
	runTool(t, rnic, append([]string{"inject", "-d", "rnicR", "--rx"}, fairnessLink...)...)

	recv := open(t, "rnicR")
	senders := []*verbs.Context{open(t, "rnicS1"), open(t, "rnicS2")}
	type flow struct {
		s, r   *end
		posted int
		done   int // completions in the measured time
		wc     [8]verbs.WC
	}
	flows := make([]*flow, 4)
	data := pattern(fairnessMsg, 0x5c)
	for i := range flows {
		f := &flow{s: newEnd(t, senders[i/2], endOpts{typ: verbs.QPTypeRC}), r: newEnd(t, recv, endOpts{typ: verbs.QPTypeRC})}
		connect(t, f.s, f.r, verbs.QPTypeRC, 7, fairnessTimeout)
		connect(t, f.r, f.s, verbs.QPTypeRC, 7, fairnessTimeout)
		copy(f.s.mr.Buf, data)
		flows[i] = f
	}
	post := func(f *flow) {
		post(t, f.s, verbs.SendWR{WRID: uint64(f.posted), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{f.s.mr.SGE(0, fairnessMsg)}, RemoteAddr: f.r.mr.Addr, RKey: f.r.mr.RKey})
		f.posted++
	}
	poll := func(f *flow, counting bool) int {
		n := f.s.cq.Poll(f.wc[:])
		for _, w := range f.wc[:n] {
			if w.Status != verbs.WCSuccess {
				t.Fatalf("QP %#x: %+v", f.s.qp.QPN, w)
			}
			if counting {
				f.done++
			}
		}
		return n
	}

	// The link's and the senders' counters, at the start and at the end
	// of the measured time: a QP that starts sends a window at line rate
	// before the first CNP can reach it (DCQCN starts every QP at full
	// rate, as ConnectX does), so the start-up's drops are reported
	// apart; the claims are about the steady state the measured time sees.
	counters := func() (link map[string]float64, senders [2]map[string]float64) {
		for i := range senders {
			senders[i] = scrape(t, metricsURL(t, ds[i]), names[i])
		}
		return scrape(t, metricsURL(t, ds[2]), names[2]), senders
	}
	var link0 map[string]float64
	var snd0 [2]map[string]float64

	start := time.Now()
	settle := time.Duration(len(flows))*fairnessStart + 300*time.Millisecond
	var measStart time.Time
	started := 0
	for {
		el := time.Since(start)
		if started < len(flows) && el >= time.Duration(started)*fairnessStart {
			for range fairnessDepth {
				post(flows[started])
			}
			started++
		}
		if measStart.IsZero() && el >= settle {
			link0, snd0 = counters()
			measStart = time.Now()
		}
		if !measStart.IsZero() && time.Since(measStart) >= fairnessMeas {
			break
		}
		busy := false
		for _, f := range flows[:started] {
			for range poll(f, !measStart.IsZero()) {
				post(f)
				busy = true
			}
		}
		if !busy {
			time.Sleep(200 * time.Microsecond)
		}
	}
	el := time.Since(measStart).Seconds()
	link1, snd1 := counters()
	// Let the WRITEs in flight finish: no QP ends with work on the wire.
	for _, f := range flows {
		left := fairnessDepth
		eventually(t, "the last WRITEs complete", func() bool {
			left -= poll(f, false)
			return left == 0
		})
		if !bytes.Equal(f.r.mr.Buf[:fairnessMsg], data) {
			t.Fatalf("QP %#x: the data differs at the receiver", f.s.qp.QPN)
		}
	}

	var r fairnessRun
	// The link carries frames: a 1024-byte payload is 1086 bytes of
	// Ethernet frame (BTH 12, ICRC 4, IPv4 20, UDP 8, Ethernet 14 and FCS
	// 4; the first packet's RETH aside).
	capacity := float64(fairnessRate) * 1024 / 1086 * el // bits of payload
	var sum, sq float64
	for i, f := range flows {
		bits := float64(f.done) * fairnessMsg * 8
		r.perQP[i] = bits / el / 1e6
		sum += bits
		sq += bits * bits
	}
	r.goodput = sum / capacity * 100
	r.jain = sum * sum / (float64(len(flows)) * sq)
	m := make([]map[string]float64, len(ds))
	for i, d := range ds {
		m[i] = scrape(t, metricsURL(t, d), names[i])
	}
	const queued, dropped = `fault_link_queued{dir="rx"}`, `fault_link_dropped{dir="rx"}`
	r.queued, r.dropped = link1[queued]-link0[queued], link1[dropped]-link0[dropped]
	r.startDrop = link0[dropped]
	r.marked = m[2][`fault_link_marked{dir="rx"}`]
	r.ceRcvd, r.cnpSent = m[2]["np_ecn_marked_roce_packets"], m[2]["np_cnp_sent"]
	for i, s := range m[:2] {
		r.sent += snd1[i]["sent_pkts"] - snd0[i]["sent_pkts"]
		r.retx += snd1[i]["retransmitted_pkts"] - snd0[i]["retransmitted_pkts"]
		r.startRetx += snd0[i]["retransmitted_pkts"]
		r.cnpHandld += s["rp_cnp_handled"]
	}
	return r
}
