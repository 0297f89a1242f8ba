package monitor_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/rnicd/rnicd/internal/chrometest"
	"github.com/rnicd/rnicd/internal/rnictest"
	"github.com/rnicd/rnicd/monitor"
	"github.com/rnicd/rnicd/rnic/trace"
	"github.com/rnicd/rnicd/wire/fault"
)

// pagePacket is one row of the sequence diagram as the page drew it: a
// packet, or a run of Count like packets from PSN to LastPSN.
type pagePacket struct {
	Op      string `json:"op"`
	PSN     uint32 `json:"psn"`
	LastPSN uint32 `json:"lastPSN"`
	Count   int    `json:"count"`
	Kind    string `json:"kind"`
	Lost    bool   `json:"lost"`
	Retx    bool   `json:"retx"`
	Label   string `json:"label"`
}

// pageRows is the JavaScript that reads the diagram's rows as pagePackets.
const pageRows = `Array.from(document.querySelectorAll("#seq g.pkt")).map(g => ({
	op: g.dataset.op, psn: +g.dataset.psn, lastPSN: +g.dataset.lastPsn, count: +g.dataset.count, kind: g.dataset.kind,
	lost: !!g.dataset.lost, retx: !!g.dataset.retx, label: g.querySelector("text.label").textContent}))`

// TestWebView loads the web view in headless Chromium while two devices
// exchange RDMA WRITEs, every tenth of which loses a packet: the sequence
// diagram must show real packets (write opcodes and ACKs with PSNs of the
// QP's range, runs of them counted in one row, a lost packet, its NAK and
// the retransmission), and once the traffic stops the QP table must show
// both devices' real QPNs and their final PSNs. With RNICD_SCREENSHOT=1
// the page is saved to docs/webview.png for the README.
func TestWebView(t *testing.T) {
	tr := trace.New(0)
	a, b := rnictest.NewEnds(t, tr)
	m, err := monitor.New(monitor.Config{Devices: []monitor.Device{{Dev: a.Dev, Faulty: a.Faulty}, {Dev: b.Dev, Faulty: b.Faulty}}, Tracer: tr})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()

	// Traffic until told to stop: a WRITE of 3 packets every few ms, and
	// every tenth loses its second packet.
	stopTraffic := traffic(func(i uint64) error {
		if i%10 == 0 {
			a.Faulty.SetTX(fault.Faults{FilterQPN: true, QPN: b.QP.QPN, DropNth: 2})
		}
		err := rnictest.TryWrite(a, b, i, 3*1024)
		time.Sleep(5 * time.Millisecond) // pace it for the eye
		return err
	})
	defer stopTraffic()
	ctx := chrometest.Open(t, srv.URL+"/", 1400, 1100)
	// Wait (a hang guard, not a timing check) for the diagram to show a
	// loss, a NAK, a retransmission and a run of packets in one row.
	wctx, wcancel := context.WithTimeout(ctx, 90*time.Second)
	defer wcancel()
	for _, sel := range []string{`#seq g.pkt[data-lost="1"]`, `#seq g.pkt[data-kind="nak"]`, `#seq g.pkt[data-retx="1"]`, `tr.qp`} {
		if err := chromedp.Do(wctx, chromedp.WaitVisible(sel)); err != nil {
			t.Fatalf("page never showed %s: %v", sel, err)
		}
	}
	if _, err := chromedp.Run(wctx, chrometest.WaitTrue(`Array.from(document.querySelectorAll("#seq g.pkt")).some(g => +g.dataset.count > 1)`)); err != nil {
		t.Fatalf("page never counted a run of packets in one row: %v", err)
	}
	pkts, err := chromedp.Run(ctx, chromedp.Evaluate[[]pagePacket](pageRows))
	if err != nil {
		t.Fatal(err)
	}
	if len(pkts) < 4 {
		t.Fatalf("diagram shows %d rows", len(pkts))
	}
	first := 0x1000 + a.QP.QPN // the SQ PSN the QP started at
	a.QP.Lock()
	last := a.QP.Req.PSN
	a.QP.Unlock()
	for _, p := range pkts {
		switch {
		case p.Op == "RDMA_WRITE_FIRST" || p.Op == "RDMA_WRITE_MIDDLE" || p.Op == "RDMA_WRITE_LAST":
			if p.Kind != "request" {
				t.Errorf("%+v: a WRITE drawn as %s", p, p.Kind)
			}
		case p.Op == "ACKNOWLEDGE":
			if p.Kind != "ack" && p.Kind != "nak" {
				t.Errorf("%+v: an ACKNOWLEDGE drawn as %s", p, p.Kind)
			}
		default:
			t.Errorf("%+v: not a packet of this traffic", p)
		}
		if p.PSN < first || p.LastPSN >= last || p.LastPSN < p.PSN || p.Count < 1 {
			t.Errorf("%+v: PSNs outside the %#x..%#x the QP sent", p, first, last)
		}
		if p.Count > 1 && (p.Lost || p.Kind == "nak" || !strings.Contains(strings.ReplaceAll(p.Label, ",", ""), fmt.Sprintf("×%d psn 0x%06x…0x%06x", p.Count, p.PSN, p.LastPSN))) {
			t.Errorf("row %+v: a loss or a NAK in a run, or a label without the count and PSNs", p)
		}
		if !strings.Contains(p.Label, fmt.Sprintf("psn 0x%06x", p.PSN)) {
			t.Errorf("label %q does not say the PSN", p.Label)
		}
	}

	// It opened on figures: the first drawing already had the port's
	// rates measured, packets going out, and packets in the diagram.
	opened, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[document.body.dataset.firstRates || "", document.body.dataset.firstPackets || ""]`))
	if err != nil {
		t.Fatal(err)
	}
	rates := strings.Split(opened[0], "|") // tx and rx of each device
	if len(rates) != 4 || opened[1] == "0" || opened[1] == "" {
		t.Errorf("first drawing: port rates %q, %s packets; want 4 rates and packets", opened[0], opened[1])
	}
	for _, r := range rates {
		if !strings.HasSuffix(r, "/s") || strings.HasSuffix(r, " 0/s") {
			t.Errorf("first drawing: port rate %q, want one above 0 (traffic runs)", r)
		}
	}
	checkBlocks(t, ctx)

	// A monitor of one device, as rnicd serves it: the diagram's far end
	// is b by its address and QPN, never an anonymous "peer".
	m1, err := monitor.New(monitor.Config{Devices: []monitor.Device{{Dev: a.Dev, Faulty: a.Faulty}}, Tracer: tr})
	if err != nil {
		t.Fatal(err)
	}
	defer m1.Close()
	srv1 := httptest.NewServer(m1.Handler())
	defer srv1.Close()
	ctx1, cancel1 := chromedp.NewContext(ctx) // a second tab
	defer cancel1()
	wctx1, wcancel1 := context.WithTimeout(ctx1, 60*time.Second)
	if err := chromedp.Do(wctx1, chromedp.Navigate(srv1.URL+"/")); err != nil {
		t.Fatal(err)
	}
	defer wcancel1()
	if err := chromedp.Do(wctx1, chromedp.WaitVisible(`#seq g.pkt`)); err != nil {
		t.Fatalf("one-device page never drew a packet: %v", err)
	}
	lanes, err := chromedp.Run(ctx1, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("#seq g.lane")).map(g => g.textContent)`))
	if err != nil {
		t.Fatal(err)
	}
	wantFar := fmt.Sprintf("%sqp 0x%x", b.Dev.QueryPort().Addr, b.QP.QPN)
	if len(lanes) != 2 || lanes[0] != a.Dev.Name()+"device" || lanes[1] != wantFar {
		t.Errorf("one-device lanes %q, want [%q %q]", lanes, a.Dev.Name()+"device", wantFar)
	}
	labels, err := chromedp.Run(ctx1, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("#seq g.pkt text.label")).map(t => t.textContent)`))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range labels {
		if !strings.Contains(l, fmt.Sprintf(" qp 0x%x→0x%x", a.QP.QPN, b.QP.QPN)) && !strings.Contains(l, fmt.Sprintf(" qp 0x%x→0x%x", b.QP.QPN, a.QP.QPN)) {
			t.Errorf("one-device arrow %q does not name the QPs at its ends", l)
		}
	}
	cancel1()

	// Stopped, the table must settle on the devices' real QPNs and PSNs.
	if err := stopTraffic(); err != nil {
		t.Fatal(err)
	}
	for _, e := range []*rnictest.End{a, b} {
		for _, q := range e.Dev.Observer().QPInfo() {
			sel := fmt.Sprintf(`.device[data-name=%q] tr.qp[data-qpn="%d"]`, e.Dev.Name(), q.QPN)
			cond := fmt.Sprintf(`(() => { const r = document.querySelector(%q); return !!r && r.querySelector(".sqpsn").textContent === "0x%06x" && r.querySelector(".rqpsn").textContent === "0x%06x" && r.cells[0].textContent === "0x%x" && r.cells[2].textContent === %q; })()`,
				sel, q.SQPSN, q.RQPSN, q.QPN, q.State)
			if _, err := chromedp.Run(wctx, chrometest.WaitTrue(cond)); err != nil {
				row, _ := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(`(document.querySelector(%q)||{}).textContent||"none"`, sel)))
				t.Fatalf("%s QP %#x: table never showed SQ PSN %#x RQ PSN %#x %s: row %q (%v)", e.Dev.Name(), q.QPN, q.SQPSN, q.RQPSN, q.State, row, err)
			}
		}
	}
	// An impairment set: the port block is highlighted and says why.
	b.Faulty.SetRX(fault.Faults{Delay: time.Microsecond})
	why := fmt.Sprintf(`(() => { const e = document.querySelector('.device[data-name=%q] .block.busy[data-name="Port"] .why'); return !!e && e.textContent.includes("fault injector"); })()`, b.Dev.Name())
	if _, err := chromedp.Run(wctx, chrometest.WaitTrue(why)); err != nil {
		t.Fatalf("port block with a fault set never said why it is highlighted: %v", err)
	}
	checkBlocks(t, ctx)
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := png.DecodeConfig(bytes.NewReader(shot))
	if err != nil || cfg.Width < 800 || cfg.Height < 600 {
		t.Fatalf("screenshot: %v, %dx%d", err, cfg.Width, cfg.Height)
	}
	if os.Getenv("RNICD_SCREENSHOT") != "" {
		out := filepath.Join("..", "docs", "webview.png")
		if err := os.WriteFile(out, shot, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", out)
	}
}

// checkBlocks checks the blocks as drawn: every figure is in one of the
// groups now, per second, since start, with rates (and only rates) per
// second; every highlighted block says why, and no other block does.
func checkBlocks(t *testing.T, ctx context.Context) {
	t.Helper()
	type block struct {
		Name  string   `json:"name"`
		Busy  bool     `json:"busy"`
		Why   string   `json:"why"`
		Title string   `json:"title"`
		Loose int      `json:"loose"`
		Rates []string `json:"rates"`
		Total []string `json:"totals"`
	}
	bs, err := chromedp.Run(ctx, chromedp.Evaluate[[]block](`Array.from(document.querySelectorAll(".block")).map(b => ({
		name: b.dataset.name, busy: b.classList.contains("busy"), why: (b.querySelector(".why") || {}).textContent || "",
		title: b.title || "", loose: b.querySelectorAll(":scope > .fig").length,
		rates: Array.from(b.querySelectorAll(".group.rates .fig")).map(e => e.textContent),
		totals: Array.from(b.querySelectorAll(".group.totals .fig")).map(e => e.textContent)}))`))
	if err != nil {
		t.Fatal(err)
	}
	if len(bs) == 0 {
		t.Fatal("no blocks drawn")
	}
	for _, b := range bs {
		if b.Busy != (b.Why != "") || b.Busy != strings.HasPrefix(b.Title, "highlighted: ") {
			t.Errorf("block %s: highlighted %v, why %q, title %q", b.Name, b.Busy, b.Why, b.Title)
		}
		if b.Loose != 0 {
			t.Errorf("block %s: %d figures outside now/per second/since start", b.Name, b.Loose)
		}
		for _, r := range b.Rates {
			if !strings.HasSuffix(r, "/s") {
				t.Errorf("block %s: per-second figure %q is not a rate", b.Name, r)
			}
		}
		for _, c := range b.Total {
			if strings.Contains(c, "/s") {
				t.Errorf("block %s: since-start figure %q is a rate", b.Name, c)
			}
		}
	}
}

// TestWebViewDCQCN loads the web view while a sends RDMA WRITEs to b
// through a bottleneck in front of b (a congestion point of 300 Mbit/s
// marking with RED, as `rnic inject --rx link 300mbit queue 256KB ecn
// 20KB 200KB 10%` sets it), both devices running DCQCN: the Flow Control
// block must be in each device's diagram, between the Completer and the
// Port, and show the devices' real mlx5 counters; a's rate chart must
// draw its QP's current and target rate below the line rate, with
// values the QP really had, and b's queue chart the congestion point's
// depth, never above the peak it recorded. With RNICD_SCREENSHOT=1 the
// page is saved to docs/webview-dcqcn.png for the README.
func TestWebViewDCQCN(t *testing.T) {
	tr := trace.New(0)
	a, b := rnictest.NewEndsCC(t, tr, "dcqcn")
	b.Faulty.SetRX(fault.Faults{Link: fault.Link{Rate: 300e6, Queue: 256 << 10, KMin: 20 << 10, KMax: 200 << 10, PMax: 0.1}})
	m, err := monitor.New(monitor.Config{Devices: []monitor.Device{{Dev: a.Dev, Faulty: a.Faulty}, {Dev: b.Dev, Faulty: b.Faulty}}, Tracer: tr, QPMetrics: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	// served keeps every (rate, target) of a's QP that /api/state gave
	// the page, and servedSteps every one of the rate steps /api/packets
	// gave it, to check the chart draws those and nothing else.
	var mu sync.Mutex
	served, servedSteps := map[[2]uint64]bool{}, map[[2]uint64]bool{}
	h := m.Handler()
	type reply struct {
		monitor.State
		Rates []monitor.RateStep `json:"rates"`
	}
	note := func(st reply) {
		mu.Lock()
		defer mu.Unlock()
		for _, d := range st.Devices {
			for _, q := range d.QPs {
				if d.Name == a.Dev.Name() && q.QPN == a.QP.QPN && q.CCRate != 0 {
					served[[2]uint64{q.CCRate, q.CCTarget}] = true
				}
			}
		}
		for _, r := range st.Rates {
			if r.NIC == a.Dev.Name() && r.QPN == a.QP.QPN {
				servedSteps[[2]uint64{r.Rate, r.Target}] = true
			}
		}
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/state" && r.URL.Path != "/api/packets" && r.URL.Path != "/api/boot.js" {
			h.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		body := rec.Body.Bytes()
		if r.URL.Path == "/api/boot.js" {
			// const boot = {prev, state, packets};
			var boot struct {
				Prev, State reply
				Packets     reply
			}
			js, ok := bytes.CutPrefix(bytes.TrimSuffix(body, []byte(";\n")), []byte("const boot = "))
			if err := json.Unmarshal(js, &boot); !ok || err != nil {
				t.Errorf("%s: %v: %.100q", r.URL.Path, err, body)
			}
			note(boot.Prev)
			note(boot.State)
			note(boot.Packets)
		} else {
			var st reply
			if err := json.Unmarshal(body, &st); err != nil {
				t.Errorf("%s: %v", r.URL.Path, err)
			}
			note(st)
		}
		w.Header().Set("Content-Type", rec.Header().Get("Content-Type"))
		w.Write(body)
	}))
	defer srv.Close()

	// WRITEs of 256 KB back to back, more than the bottleneck drains.
	stopTraffic := traffic(func(i uint64) error { return rnictest.TryWrite(a, b, i, 256<<10) })
	defer stopTraffic()
	ctx := chrometest.Open(t, srv.URL+"/", 1400, 1000)
	// Wait (a hang guard, not a timing check) until a's chart has drawn
	// its QP's rate and the page has polled 8 times, and b's queue chart
	// some depth.
	wctx, wcancel := context.WithTimeout(ctx, 90*time.Second)
	defer wcancel()
	rateSel := fmt.Sprintf(`#rate-%s polyline[data-name="qp 0x%x rate"]`, a.Dev.Name(), a.QP.QPN)
	queueSel := fmt.Sprintf(`#queue-%s polyline[data-name="rx queue"]`, b.Dev.Name())
	enough := fmt.Sprintf(`(() => { const r = document.querySelector(%q), q = document.querySelector(%q); return !!r && (history[%q] || []).length >= 8 && !!q && +q.dataset.max > 0; })()`, rateSel, queueSel, a.Dev.Name())
	if _, err := chromedp.Run(wctx, chrometest.WaitTrue(enough)); err != nil {
		parts, _ := chromedp.Run(ctx, chromedp.Evaluate[[]any](fmt.Sprintf(`[!!document.querySelector(%q), (history[%q] || []).length, +((document.querySelector(%q)||{dataset:{}}).dataset.max||0)]`, rateSel, a.Dev.Name(), queueSel)))
		t.Fatalf("charts never drew 8 rate samples and a queue: %v; rate line, polls, queue max: %v; congestion point's peak %d B, b np_cnp_sent %d, a rp_cnp_handled %d",
			err, parts, b.Faulty.FaultStats().RX.QueuePeak, b.Dev.Observer().Counters()["np_cnp_sent"], a.Dev.Observer().Counters()["rp_cnp_handled"])
	}
	type line struct {
		N        int     `json:"n"`
		Last     float64 `json:"last"`
		Min, Max float64
	}
	get := func(sel string) line {
		t.Helper()
		l, err := chromedp.Run(ctx, chromedp.Evaluate[line](fmt.Sprintf(`(() => { const e = document.querySelector(%q); return {n: +e.dataset.n, last: +e.dataset.last, Min: +e.dataset.min, Max: +e.dataset.max}; })()`, sel)))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	rl := get(rateSel)
	tl := get(fmt.Sprintf(`#rate-%s polyline[data-name="qp 0x%x target"]`, a.Dev.Name(), a.QP.QPN))
	ql := get(queueSel)
	polled, err := chromedp.Run(ctx, chromedp.Evaluate[[][]float64](fmt.Sprintf(`history[%q].filter(s => s.qps[%d]).map(s => s.qps[%d])`, a.Dev.Name(), a.QP.QPN, a.QP.QPN)))
	if err != nil {
		t.Fatal(err)
	}
	drawn, err := chromedp.Run(ctx, chromedp.Evaluate[[][]float64](fmt.Sprintf(`(steps[%q] || {})[%d] || []`, a.Dev.Name(), a.QP.QPN)))
	if err != nil {
		t.Fatal(err)
	}
	// The devices, congested, for the README (the packet diagram below
	// them is the other screenshot's).
	shot, err := chromedp.Run(ctx, chromedp.Screenshot("#devices"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg, err := png.DecodeConfig(bytes.NewReader(shot)); err != nil || cfg.Width < 800 || cfg.Height < 600 {
		t.Fatalf("screenshot: %v, %dx%d", err, cfg.Width, cfg.Height)
	}
	if err := stopTraffic(); err != nil {
		t.Fatal(err)
	}
	// Every point the chart drew is a (rate, target) /api/state served
	// for a's QP, and DCQCN keeps the rate at or below the target.
	mu.Lock()
	for _, p := range polled {
		if len(p) != 2 || !served[[2]uint64{uint64(p[0]), uint64(p[1])}] {
			t.Errorf("rate chart drew %v, which /api/state never served", p)
		} else if p[0] > p[1] {
			t.Errorf("rate chart: rate %v above target %v", p[0], p[1])
		}
	}
	// The steps the page drew come from the trace through /api/packets,
	// and they are a sawtooth: cuts and increases.
	cuts, ups := 0, 0
	for i, p := range drawn {
		if len(p) != 3 || !servedSteps[[2]uint64{uint64(p[1]), uint64(p[2])}] {
			t.Errorf("rate chart drew step %v, which /api/packets never served", p)
			continue
		}
		if i > 0 && p[1] < drawn[i-1][1] {
			cuts++
		}
		if i > 0 && p[1] > drawn[i-1][1] {
			ups++
		}
	}
	if cuts == 0 || ups == 0 {
		t.Errorf("rate chart: %d steps, %d cuts and %d increases; want a sawtooth", len(drawn), cuts, ups)
	}
	mu.Unlock()
	t.Logf("rate chart: %d steps (%d cuts, %d increases), %d polls", len(drawn), cuts, ups, len(polled))
	t.Logf("rate chart: %d points, rate %+v, target %+v; queue %+v", len(polled), rl, tl, ql)
	const line10G = 10e9 // flowctl.DefaultLineRate
	if rl.Min <= 0 || rl.Min >= line10G || rl.Max > line10G || tl.Max > line10G || rl.Min > tl.Max {
		t.Errorf("rate chart: rate %+v target %+v, want a rate below the line rate and the target", rl, tl)
	}
	if peak := b.Faulty.FaultStats().RX.QueuePeak; ql.Max <= 0 || ql.Max > float64(peak) || peak > 256<<10 {
		t.Errorf("queue chart: max %v, congestion point's peak %d of a 256 KB queue", ql.Max, peak)
	}

	// The Flow Control block sits between the Completer and the Port and
	// settles on the devices' real counters.
	for _, e := range []*rnictest.End{a, b} {
		order, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](fmt.Sprintf(`Array.from(document.querySelectorAll('.device[data-name=%q] .block')).map(b => b.dataset.name)`, e.Dev.Name())))
		if err != nil {
			t.Fatal(err)
		}
		if n := len(order); n < 3 || order[n-3] != "Completer" || order[n-2] != "Flow Control" || order[n-1] != "Port" {
			t.Errorf("%s blocks %q: want Completer, Flow Control, Port at the end", e.Dev.Name(), order)
		}
		c := e.Dev.Observer().Counters()
		for _, name := range []string{"np_ecn_marked_roce_packets", "np_cnp_sent", "rp_cnp_handled", "rp_cnp_ignored"} {
			cond := fmt.Sprintf(`Array.from(document.querySelectorAll('.device[data-name=%q] .block[data-name="Flow Control"] .group.totals .fig')).some(f => f.textContent === %q)`,
				e.Dev.Name(), fmt.Sprintf("%s %d", name, c[name]))
			if _, err := chromedp.Run(wctx, chrometest.WaitTrue(cond)); err != nil {
				t.Errorf("%s Flow Control block never showed %s %d: %v", e.Dev.Name(), name, c[name], err)
			}
		}
	}
	if c := b.Dev.Observer().Counters(); c["np_cnp_sent"] == 0 || a.Dev.Observer().Counters()["rp_cnp_handled"] == 0 {
		t.Errorf("no congestion: b sent %d CNPs, a handled %d", c["np_cnp_sent"], a.Dev.Observer().Counters()["rp_cnp_handled"])
	}
	// /metrics has the same counters by mlx5's names, and a's QP's rate,
	// target and alpha.
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	var body bytes.Buffer
	body.ReadFrom(resp.Body)
	resp.Body.Close()
	bc := b.Dev.Observer().Counters()
	for _, want := range []string{
		fmt.Sprintf("rnicd_np_ecn_marked_roce_packets_total{device=%q} %d\n", b.Dev.Name(), bc["np_ecn_marked_roce_packets"]),
		fmt.Sprintf("rnicd_np_cnp_sent_total{device=%q} %d\n", b.Dev.Name(), bc["np_cnp_sent"]),
		fmt.Sprintf("rnicd_rp_cnp_ignored_total{device=%q} 0\n", a.Dev.Name()),
		fmt.Sprintf("rnicd_qp_cc_rate_bps{device=%q,qpn=\"%#x\",type=\"RC\"} ", a.Dev.Name(), a.QP.QPN),
		fmt.Sprintf("rnicd_qp_cc_target_rate_bps{device=%q,qpn=\"%#x\",type=\"RC\"} ", a.Dev.Name(), a.QP.QPN),
		fmt.Sprintf("rnicd_qp_cc_alpha_ratio{device=%q,qpn=\"%#x\",type=\"RC\"} ", a.Dev.Name(), a.QP.QPN),
	} {
		if !strings.Contains(body.String(), want) {
			t.Errorf("/metrics has no %q", want)
		}
	}
	checkBlocks(t, ctx)
	if os.Getenv("RNICD_SCREENSHOT") != "" {
		out := filepath.Join("..", "docs", "webview-dcqcn.png")
		if err := os.WriteFile(out, shot, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", out)
	}
}

// traffic runs step(1), step(2), ... in a goroutine until step fails or
// the returned stop is called; stop waits for it and returns step's
// error. Calling stop again returns the same.
func traffic(step func(i uint64) error) (stop func() error) {
	quit := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		for i := uint64(1); ; i++ {
			select {
			case <-quit:
				done <- nil
				return
			default:
			}
			if err := step(i); err != nil {
				done <- err
				return
			}
		}
	}()
	var once sync.Once
	var err error
	return func() error {
		once.Do(func() { close(quit); err = <-done })
		return err
	}
}
