package tests

import (
	"bytes"
	"context"
	"fmt"
	"image/png"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/rnicd/rnicd/internal/chrometest"
)

// TestWebViewLoss is the web view as an operator sees it: two rnicd
// processes, `rnic ib_write_bw -s 65536` from rnicA to rnicB with `rnic
// inject -d rnicA --tx drop 0.2%` losing packets and a congestion point
// in front of rnicB marking others CE (so that DCQCN's Flow Control block
// has CNPs to handle), and rnicA's page (rnicd --http) in headless
// Chromium. The page is drawn, with measured rates, by the load event.
// It waits, as long as a loaded host needs, for a drawing in
// which every block of the NIC passes something per second, and the
// sequence diagram has a run of packets counted in one row, a lost
// packet, a NAK and a retransmission, each a row of its own; it freezes
// that drawing (the page's pause button) and checks it against the
// daemons' /metrics. Then the tools exit: the far end's lane, its rows
// and the QP's rate chart go. With RNICD_SCREENSHOT=1 the frozen page is
// saved to docs/webview-loss.png for the README.
func TestWebViewLoss(t *testing.T) {
	a, b := daemonsWith(t, t.TempDir(), []string{"-http", "127.0.0.1:0"}, []string{"-http", "127.0.0.1:0"})
	page := strings.TrimSuffix(metricsURL(t, a), "metrics")
	rnicBin := filepath.Join(binDir, "rnic")
	runTool(t, rnicBin, "inject", "-d", "rnicA", "--tx", "drop", "0.2%")
	runTool(t, rnicBin, "inject", "-d", "rnicB", "--rx", "link", "100mbit", "queue", "256KB", "ecn", "5KB", "50KB", "10%")

	// The tools run until the test kills them (-D 600): how long the
	// page takes to show everything depends on the host's load.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	port := freePort(t)
	args := []string{"ib_write_bw", "-p", port, "-s", "65536", "-D", "600"}
	server := rnic(ctx, append(args, "-d", "rnicB")...)
	var sout lockedBuf
	server.Stdout, server.Stderr = &sout, &sout
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	defer server.Wait()
	defer server.Process.Kill()
	// The client, again until the server listens; cout is its output.
	var cout atomic.Pointer[lockedBuf]
	cout.Store(&lockedBuf{})
	clientDone := make(chan struct{})
	go func() {
		defer close(clientDone)
		for ctx.Err() == nil {
			out := &lockedBuf{}
			cout.Store(out)
			client := rnic(ctx, append(args, "-d", "rnicA", b.addr.String())...)
			client.Stdout, client.Stderr = out, out
			if err := client.Run(); err == nil || !strings.Contains(out.String(), "connection refused") {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()

	tab := chrometest.Open(t, page, 1400, 1300)
	// The page was drawn by the load event (Open returns on it): the
	// blocks with measured rates, never "connecting..." over nothing.
	first, err := chromedp.Run(tab, chromedp.Evaluate[[]string](`[String(document.querySelectorAll(".block").length),
		document.getElementById("status").textContent, document.body.dataset.firstRates || ""]`))
	if err != nil {
		t.Fatal(err)
	}
	if first[0] != "8" || !strings.HasPrefix(first[1], "live ") || !regexp.MustCompile(`^tx [0-9.]+[kM]?/s\|rx [0-9.]+[kM]?/s$`).MatchString(first[2]) {
		t.Errorf("at the load event: %s blocks, status %q, port rates %q; want 8 blocks, live, measured rates", first[0], first[1], first[2])
	}
	wctx, wcancel := context.WithTimeout(tab, 3*time.Minute) // a hang guard, not a timing check
	defer wcancel()
	// One drawing with all of it, frozen by the same evaluation that
	// finds it (the page draws only between evaluations).
	const ready = `(() => {
		const blocks = Array.from(document.querySelectorAll(".block"));
		const moving = b => Array.from(b.querySelectorAll(".group.rates .fig")).some(f => /[1-9][0-9.]*[kM]?\/s$/.test(f.textContent));
		const rows = Array.from(document.querySelectorAll("#seq g.pkt"));
		if (blocks.length < 8 || !blocks.every(moving) || !rows.some(g => +g.dataset.count > 1) || !rows.some(g => g.dataset.lost) ||
			!rows.some(g => g.dataset.kind === "nak") || !rows.some(g => g.dataset.retx)) return false;
		pause(true);
		return true;
	})()`
	if _, err := chromedp.Run(wctx, chrometest.WaitTrue(ready)); err != nil {
		blocks, _ := chromedp.Run(tab, chromedp.Evaluate[string](`document.querySelector("#devices").innerText + "\n" + Array.from(document.querySelectorAll("#seq text.label")).map(l => l.textContent).join("\n")`))
		t.Fatalf("the page never drew every block moving and a run, a loss, a NAK and a retransmission: %v\n%s\nclient:\n%s\nserver:\n%s", err, blocks, cout.Load().String(), sout.String())
	}

	type block struct {
		Name   string   `json:"name"`
		Rates  []string `json:"rates"`
		Totals []string `json:"totals"`
	}
	blocks, err := chromedp.Run(tab, chromedp.Evaluate[[]block](`Array.from(document.querySelectorAll(".block")).map(b => ({name: b.dataset.name,
		rates: Array.from(b.querySelectorAll(".group.rates .fig")).map(e => e.textContent),
		totals: Array.from(b.querySelectorAll(".group.totals .fig")).map(e => e.textContent)}))`))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, bl := range blocks {
		names = append(names, bl.Name)
		moving := false
		for _, r := range bl.Rates {
			f := strings.Fields(r)
			v := strings.TrimSuffix(f[len(f)-1], "/s")
			n, err := strconv.ParseFloat(strings.TrimRight(v, "kM"), 64)
			if err != nil && v != "\u2013" {
				t.Errorf("block %s: rate %q", bl.Name, r)
			}
			moving = moving || n > 0
		}
		if !moving {
			t.Errorf("block %s: no rate above 0 in %q", bl.Name, bl.Rates)
		}
	}
	want := "Verbs / doorbell|QP manager|WQE engine|DMA engine|RX handler|Completer|Flow Control|Port"
	if strings.Join(names, "|") != want {
		t.Errorf("blocks %q, want %s", names, want)
	}

	// The rows: one device, the far end by its address; runs with their
	// count; the losses no more than rnicA's injector dropped.
	type row struct {
		Op, Class, Kind string
		Count           int
		PSN, LastPSN    uint32
		Lost, Retx      bool
		Label           string
	}
	rows, err := chromedp.Run(tab, chromedp.Evaluate[[]row](`Array.from(document.querySelectorAll("#seq g.pkt")).map(g => ({Op: g.dataset.op, Class: g.dataset.class,
		Kind: g.dataset.kind, Count: +g.dataset.count, PSN: +g.dataset.psn, LastPSN: +g.dataset.lastPsn, Lost: !!g.dataset.lost, Retx: !!g.dataset.retx,
		Label: g.querySelector("text.label").textContent}))`))
	if err != nil {
		t.Fatal(err)
	}
	lanes, err := chromedp.Run(tab, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("#seq g.lane text.lane-name")).map(t => t.textContent)`))
	if err != nil {
		t.Fatal(err)
	}
	if len(lanes) != 2 || lanes[0] != "rnicA" || lanes[1] != b.addr.String() {
		t.Errorf("lanes %q, want rnicA and %s", lanes, b.addr)
	}
	lost, runs := 0, 0
	for _, r := range rows {
		if r.Count > 1 {
			runs++
			if r.Lost || r.Kind == "nak" {
				t.Errorf("row %+v: a loss or a NAK counted in a run", r)
			}
			if want := fmt.Sprintf("%s ×%d", strings.TrimPrefix(r.Class, "ROCE_"), r.Count); !strings.HasPrefix(strings.ReplaceAll(r.Label, ",", ""), want) { // 1,216: the count's thousands
				t.Errorf("run %+v: label does not start %q", r, want)
			}
		}
		if r.Lost {
			lost++
			if r.Kind != "request" || !strings.HasPrefix(r.Op, "RDMA_WRITE_") || r.Count != 1 || !strings.HasSuffix(r.Label, " LOST") {
				t.Errorf("lost row %+v: want one RDMA_WRITE packet, LOST", r)
			}
		}
		if r.Kind == "nak" && (r.Op != "ACKNOWLEDGE" || !strings.Contains(r.Label, "NAK_PSN_SEQ_ERR")) {
			t.Errorf("NAK row %+v", r)
		}
	}
	m := scrape(t, metricsURL(t, a), "rnicA")
	if dropped := m[`fault_dropped{dir="tx"}`]; float64(lost) > dropped || lost == 0 {
		t.Errorf("%d lost rows, rnicA's injector dropped %v", lost, dropped)
	}
	t.Logf("%d rows: %d runs, %d lost; rnicA sent %v packets, dropped %v, retransmitted %v", len(rows), runs, lost,
		m["sent_pkts"], m[`fault_dropped{dir="tx"}`], m["retransmitted_pkts"])

	shot, err := chromedp.Run(tab, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	if cfg, err := png.DecodeConfig(bytes.NewReader(shot)); err != nil || cfg.Width < 1000 || cfg.Height < 800 {
		t.Fatalf("screenshot: %v, %dx%d", err, cfg.Width, cfg.Height)
	}
	if os.Getenv("RNICD_SCREENSHOT") != "" {
		out := filepath.Join("..", "docs", "webview-loss.png")
		if err := os.WriteFile(out, shot, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", out)
	}

	// The tools go, and their QPs with them: the far end's lane, its
	// rows and the rate chart go from the page.
	cancel()
	<-clientDone
	gone := fmt.Sprintf(`(() => { pause(false); const lanes = Array.from(document.querySelectorAll("#seq g.lane text.lane-name")).map(t => t.textContent);
		return !lanes.includes(%q) && !document.querySelector("#seq g.pkt") && !document.querySelector("svg.chart polyline.series"); })()`, b.addr.String())
	if _, err := chromedp.Run(wctx, chrometest.WaitTrue(gone)); err != nil {
		left, _ := chromedp.Run(tab, chromedp.Evaluate[string](`document.querySelector("#seq").textContent`))
		t.Fatalf("the far end's lane or rows stayed after the tools exited: %v\n%s", err, left)
	}
}
