package monitor_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rnicd/rnicd/internal/promtest"
	"github.com/rnicd/rnicd/internal/rnictest"
	"github.com/rnicd/rnicd/monitor"
	"github.com/rnicd/rnicd/wire/fault"
)

// TestMetricsPromtool holds /metrics, with every family it can have
// (per-QP series, a QP under DCQCN with its rate, target and alpha, the
// fault injector's bottleneck link, the Go and process collectors), to
// promtool check metrics: exit 0, no lint finding, no HELP shared by two
// families.
func TestMetricsPromtool(t *testing.T) {
	a, b := rnictest.NewEndsCC(t, nil, "dcqcn")
	m, err := monitor.New(monitor.Config{Devices: []monitor.Device{{Dev: a.Dev, Faulty: a.Faulty}, {Dev: b.Dev, Faulty: b.Faulty}}, QPMetrics: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()

	// A 1 Gbit/s bottleneck in front of b that marks every packet
	// meeting a queue of 8 KB: a 512 KB WRITE at 10 Gbit/s fills it, b
	// answers the marks with CNPs and a's QP comes under DCQCN.
	b.Faulty.SetRX(fault.Faults{Link: fault.Link{Rate: 1e9, Queue: 1 << 20, KMin: 8 << 10, KMax: 8 << 10, PMax: 1}})
	rnictest.Write(t, a, b, 1, 512<<10)
	rate := fmt.Sprintf("rnicd_qp_cc_rate_bps{device=%q,qpn=\"%#x\",type=\"RC\"} ", a.Dev.Name(), a.QP.QPN)
	var body string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		resp, err := http.Get(srv.URL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		raw, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		body = string(raw)
		if strings.Contains(body, rate) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q in /metrics after b marked %d packets and a handled %d CNPs",
				rate, b.Faulty.FaultStats().RX.Marked, a.Dev.Observer().Counters()["rp_cnp_handled"])
		}
	}
	for _, want := range []string{"rnicd_qp_cc_alpha_ratio{", "rnicd_fault_link_queue_peak_bytes{", "rnicd_qp_info{", "go_goroutines ", "process_open_fds "} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics has no %s series", strings.TrimRight(want, "{ "))
		}
	}
	promtest.Check(t, body)
}
