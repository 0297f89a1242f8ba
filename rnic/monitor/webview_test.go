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

	"github.com/rnicd/rnicd/internal/debtool"
	"github.com/rnicd/rnicd/internal/rnictest"
	"github.com/rnicd/rnicd/rnic/monitor"
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
	chromium := debtool.Ensure(t, "chromium", "chromium")
	tr := trace.New(0)
	a, b := rnictest.NewEnds(t, 4, tr)
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
