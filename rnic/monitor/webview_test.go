package monitor_test

import (
	"bytes"
	"context"
	"fmt"
	"image/png"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/rnicd/rnicd/internal/debtest"
	"github.com/rnicd/rnicd/rnic/monitor"
	"github.com/rnicd/rnicd/rnic/rnictest"
	"github.com/rnicd/rnicd/rnic/trace"
	"github.com/rnicd/rnicd/wire/ibudp"
)

// pagePacket is one arrow of the sequence diagram as the page drew it.
type pagePacket struct {
	Op    string `json:"op"`
	PSN   uint32 `json:"psn"`
	Kind  string `json:"kind"`
	Lost  bool   `json:"lost"`
	Retx  bool   `json:"retx"`
	Label string `json:"label"`
}

// TestWebView loads the web view in headless Chromium while two devices
// exchange RDMA WRITEs, every tenth of which loses a packet: the sequence
// diagram must show real packets (write opcodes and ACKs with PSNs of the
// QP's range, a lost packet, its NAK and the retransmission), and once the
// traffic stops the QP table must show both devices' real QPNs and their
// final PSNs. With RNICD_SCREENSHOT=1 the page is saved to
// docs/webview.png for the README.
func TestWebView(t *testing.T) {
	chromium := debtest.Ensure(t, "chromium", "chromium")
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
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var werr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := uint64(1); ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if i%10 == 0 {
				a.Faulty.SetTX(ibudp.Faults{FilterQPN: true, QPN: b.QP.QPN, DropNth: 2})
			}
			if werr = rnictest.TryWrite(a, b, i, 3*1024); werr != nil {
				return
			}
			time.Sleep(5 * time.Millisecond) // pace it for the eye
		}
	}()
	stopped := false
	stopTraffic := func() {
		if !stopped {
			stopped = true
			close(stop)
			wg.Wait()
		}
	}
	defer stopTraffic()

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.NoSandbox,
		chromedp.Flag("disable-gpu", true), chromedp.WindowSize(1400, 1100))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelA()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/")); err != nil {
		t.Fatalf("chromium: %v", err)
	}
	// Wait (a hang guard, not a timing check) for the diagram to show a
	// loss, a NAK and a retransmission.
	wctx, wcancel := context.WithTimeout(ctx, 90*time.Second)
	defer wcancel()
	for _, sel := range []string{`#seq g.pkt[data-lost="1"]`, `#seq g.pkt[data-kind="nak"]`, `#seq g.pkt[data-retx="1"]`, `tr.qp`} {
		if err := chromedp.Do(wctx, chromedp.WaitVisible(sel)); err != nil {
			t.Fatalf("page never showed %s: %v", sel, err)
		}
	}
	pkts, err := chromedp.Run(ctx, chromedp.Evaluate[[]pagePacket](`Array.from(document.querySelectorAll("#seq g.pkt")).map(g => ({
		op: g.dataset.op, psn: +g.dataset.psn, kind: g.dataset.kind, lost: !!g.dataset.lost, retx: !!g.dataset.retx,
		label: g.querySelector("text.label").textContent}))`))
	if err != nil {
		t.Fatal(err)
	}
	if len(pkts) < 10 {
		t.Fatalf("diagram shows %d packets", len(pkts))
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
		if p.PSN < first || p.PSN >= last {
			t.Errorf("%+v: PSN outside the %#x..%#x the QP sent", p, first, last)
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
	if err := chromedp.Do(ctx1, chromedp.Navigate(srv1.URL+"/")); err != nil {
		t.Fatal(err)
	}
	wctx1, wcancel1 := context.WithTimeout(ctx1, 60*time.Second)
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
	stopTraffic()
	if werr != nil {
		t.Fatal(werr)
	}
	for _, e := range []*rnictest.End{a, b} {
		for _, q := range e.Dev.QPInfo() {
			sel := fmt.Sprintf(`.device[data-name=%q] tr.qp[data-qpn="%d"]`, e.Dev.Name(), q.QPN)
			cond := fmt.Sprintf(`(() => { const r = document.querySelector(%q); return !!r && r.querySelector(".sqpsn").textContent === "0x%06x" && r.querySelector(".rqpsn").textContent === "0x%06x" && r.cells[0].textContent === "0x%x" && r.cells[2].textContent === %q; })()`,
				sel, q.SQPSN, q.RQPSN, q.QPN, q.State)
			if _, err := chromedp.Run(wctx, chromedp.Poll[bool](cond)); err != nil {
				row, _ := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(`(document.querySelector(%q)||{}).textContent||"none"`, sel)))
				t.Fatalf("%s QP %#x: table never showed SQ PSN %#x RQ PSN %#x %s: row %q (%v)", e.Dev.Name(), q.QPN, q.SQPSN, q.RQPSN, q.State, row, err)
			}
		}
	}
	// An impairment set: the port block is highlighted and says why.
	b.Faulty.SetRX(ibudp.Faults{Delay: time.Microsecond})
	why := fmt.Sprintf(`(() => { const e = document.querySelector('.device[data-name=%q] .block.busy[data-name="Port"] .why'); return !!e && e.textContent.includes("fault injector"); })()`, b.Dev.Name())
	if _, err := chromedp.Run(wctx, chromedp.Poll[bool](why)); err != nil {
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
		out := filepath.Join("..", "..", "docs", "webview.png")
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
