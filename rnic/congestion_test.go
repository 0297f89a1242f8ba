package rnic_test

import (
	"strings"
	"testing"
	"time"

	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/rnic"
	"github.com/rnicd/rnicd/rnic/trace"
	"github.com/rnicd/rnicd/wire/fault"
)

// congested runs a 512 KB WRITE from a to b through a bottleneck in
// front of b's receive side that marks every ECN-capable packet meeting
// a queue of 8 KB or more, and checks the data arrived byte for byte.
func congested(t *testing.T, o pairOpts) *pair {
	t.Helper()
	// Retries: under -race on a busy host a packet may wait in the 1 MB
	// queue longer than an ACK timeout; a resent one is marked and
	// answered like the first, so the counts below still agree.
	o.faulty, o.memLen, o.retry, o.timeout = true, 2<<20, 7, 14
	p := newPair(t, o)
	p.b.faulty.SetRX(fault.Faults{Link: fault.Link{Rate: 1e9, Queue: 1 << 20, KMin: 8 << 10, KMax: 8 << 10, PMax: 1}})
	const n = 512 << 10
	fill(p.a.mem[:n], 7)
	mustPost(t, p.a, p.qa, ib.SendWR{WRID: 1, Opcode: ib.WRRDMAWrite, Flags: ib.SendSignaled,
		SGL: []ib.SGE{sge(p.a, 0, n)}, RemoteAddr: memVA + 1<<20, RKey: p.b.mr.RKey})
	if wc := p.a.poll(1, 30*time.Second); wc[0].Status != ib.WCSuccess {
		t.Fatalf("WRITE: %v", &wc[0])
	}
	p.b.fence()
	sameBytes(t, "WRITE", p.b.mem[1<<20:1<<20+n], p.a.mem[:n])
	return p
}

// settle waits until the bottleneck's queue is empty and the marks it
// made have all been counted where they land (b's notification point
// and, with cnps, a's reaction point), the same for 50 ms, and returns
// the marks. The WRITE's completion is not the end of the traffic: on a
// busy host a resent packet waits in the queue behind the first, and
// is marked and answered after it (beside stress-ng, 1,276 marks when
// the WRITE completed and 1,332 once the queue had drained).
func settle(t *testing.T, p *pair, cnps bool) uint64 {
	t.Helper()
	counted := func() (uint64, bool) {
		st := p.b.faulty.FaultStats().RX
		b, a := p.b.dev.Observer().Counters(), p.a.dev.Observer().Counters()
		ok := st.QueueDepth == 0 && b["np_ecn_marked_roce_packets"] == st.Marked
		if cnps {
			ok = ok && b["np_cnp_sent"] == st.Marked && a["rp_cnp_handled"]+a["rp_cnp_ignored"] == st.Marked
		}
		return st.Marked, ok
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		m, ok := counted()
		if !ok {
			time.Sleep(time.Millisecond)
			continue
		}
		time.Sleep(50 * time.Millisecond)
		if m2, ok := counted(); ok && m2 == m {
			return m
		}
	}
	m, _ := counted()
	return m // the test's own checks say what disagrees
}

// DCQCN end to end on real sockets: data leaves ECT(0), the bottleneck
// marks it, b's notification point answers every mark with a CNP
// (np_min_time_between_cnps 0), a's reaction point takes each one and
// paces the QP below the line rate; the counters on both sides agree
// exactly with the congestion point's.
func TestDCQCNEndToEnd(t *testing.T) {
	p := congested(t, pairOpts{cc: "dcqcn"})
	// The QP's rate now, when the last CNPs came: left alone, the
	// reaction point climbs back to the line rate within tens of ms.
	var qi rnic.QPInfo
	for _, q := range p.a.dev.Observer().QPInfo() {
		if q.QPN == p.qa.QPN {
			qi = q
		}
	}
	marked := settle(t, p, true)
	a, b := p.a.dev.Observer().Counters(), p.b.dev.Observer().Counters()
	if marked == 0 || b["np_ecn_marked_roce_packets"] != marked || b["np_cnp_sent"] != marked {
		t.Fatalf("link marked %d; b: np_ecn_marked_roce_packets %d np_cnp_sent %d", marked, b["np_ecn_marked_roce_packets"], b["np_cnp_sent"])
	}
	// The last CNPs may still be on their way.
	deadline := time.Now().Add(5 * time.Second)
	for a["rp_cnp_handled"] != marked && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
		a = p.a.dev.Observer().Counters()
	}
	if a["rp_cnp_handled"] != marked || a["rp_cnp_ignored"] != 0 || b["rp_cnp_handled"] != 0 {
		t.Fatalf("a handled %d CNPs and ignored %d, b sent %d", a["rp_cnp_handled"], a["rp_cnp_ignored"], b["np_cnp_sent"])
	}
	if !qi.CC.HasCongestion || qi.CC.CurrentRate == 0 || qi.CC.CurrentRate >= 10e9 || qi.CC.Alpha > 1023 {
		t.Fatalf("a's QP after %d CNPs: %+v", marked, qi.CC)
	}
	if p.a.dev.Observer().CongestionControl() != "dcqcn" {
		t.Fatal(p.a.dev.Observer().CongestionControl())
	}
}

// With -cc none on the sender its data is not ECN-capable: the
// bottleneck marks nothing and no CNP goes.
func TestNoCCNotECT(t *testing.T) {
	p := congested(t, pairOpts{cc: "none", ccB: "dcqcn"})
	if st := p.b.faulty.FaultStats().RX; st.Marked != 0 || st.LinkPackets == 0 {
		t.Fatalf("link %+v", st)
	}
	if b := p.b.dev.Observer().Counters(); b["np_ecn_marked_roce_packets"] != 0 || b["np_cnp_sent"] != 0 {
		t.Fatalf("b: %v", b)
	}
}

// A receiver without congestion control counts the marks and sends no
// CNP; the sender is never paced.
func TestNoCCNoCNP(t *testing.T) {
	p := congested(t, pairOpts{cc: "dcqcn", ccB: "none"})
	marked := settle(t, p, false)
	b, a := p.b.dev.Observer().Counters(), p.a.dev.Observer().Counters()
	if marked == 0 || b["np_ecn_marked_roce_packets"] != marked || b["np_cnp_sent"] != 0 || a["rp_cnp_handled"] != 0 {
		t.Fatalf("marked %d; b %d marked, %d CNPs; a handled %d", marked, b["np_ecn_marked_roce_packets"], b["np_cnp_sent"], a["rp_cnp_handled"])
	}
}

// The trace shows DCQCN at work: each CE packet the receiver took and
// the CNP it sent, each CNP the sender took, and its reaction point's
// rate steps, as many as the counters say.
func TestDCQCNTraced(t *testing.T) {
	tr := trace.New(1 << 20)
	sub := tr.Subscribe(trace.Filter{})
	defer sub.Close()
	p := congested(t, pairOpts{cc: "dcqcn", trace: tr})
	marked := settle(t, p, true)
	buf := make([]trace.Event, 1<<20)
	n := sub.TryRead(buf)
	if sub.Lost() != 0 {
		t.Fatalf("%d events lost", sub.Lost())
	}
	count := map[string]uint64{}
	for _, e := range buf[:n] {
		if e.Module != trace.ModFlowCtl {
			continue
		}
		key := e.NIC + " " + e.Step.String()
		if e.Step == trace.StepRate {
			key += " " + e.Detail()[:strings.Index(e.Detail(), ":")]
		}
		count[key]++
		if e.Detail() == "" || e.Detail() == e.Step.String() {
			t.Fatalf("event %+v has no detail", e)
		}
	}
	if count["rnic1 ce_received"] != marked || count["rnic1 cnp_sent"] != marked || count["rnic0 cnp_received"] != marked ||
		count["rnic0 rate cnp"] != marked || count["rnic0 rate rate_decrease"] == 0 {
		t.Fatalf("%d marks; flowctl events %v", marked, count)
	}
}
