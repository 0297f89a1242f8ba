package tests

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// One rping (one ping) between two rnicd with monitors: /metrics counts
// the CM messages of its connect and disconnect on the side that sent
// and on the side that received each (the client sends REQ, RTU and the
// DREQ; the server REP and DREP), and rnic stat prints the same values.
// A connect the client tried before the server listened was refused
// with a REJ: the REQ and REJ counts take those attempts in.
func TestCMCounters(t *testing.T) {
	dir := t.TempDir()
	a, err := startDaemon(dir, "rnicA", ownAddr(t), "-http", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b, err := startDaemon(dir, "rnicB", ownAddr(t), "-http", "127.0.0.1:0")
	if err != nil {
		a.stop()
		t.Fatal(err)
	}
	t.Setenv("RNICD_DIR", dir)
	t.Setenv("RNIC_HTTP", "")
	t.Cleanup(func() {
		for _, d := range []*daemon{a, b} {
			if err := d.stop(); err != nil {
				t.Errorf("%v\n%s", err, d.errb.String())
			}
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	port := freePort(t)
	srv, _, srvErr := startRpingServer(t, ctx, a, port)
	attempts := 0
	for {
		attempts++
		cmd := rnic(ctx, "rping", "-c", "-a", a.addr.String(), "-I", b.addr.String(), "-p", port, "-C", "1")
		errb := &lockedBuf{}
		cmd.Stderr = errb
		err := cmd.Run()
		if err != nil && strings.Contains(errb.String(), "connection refused") && ctx.Err() == nil {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		if err != nil {
			t.Fatalf("client: %v: %s", err, errb.String())
		}
		break
	}
	if err := srv.Wait(); err != nil {
		t.Fatalf("server: %v\n%s", err, srvErr.String())
	}
	refused := float64(attempts - 1)
	want := map[*daemon]map[string]float64{
		b: {"cm_tx_msgs_req": float64(attempts), "cm_rx_msgs_rej": refused, "cm_rx_msgs_rep": 1, "cm_tx_msgs_rtu": 1,
			"cm_tx_msgs_dreq": 1, "cm_rx_msgs_drep": 1,
			"cm_rx_msgs_req": 0, "cm_tx_msgs_rep": 0, "cm_rx_msgs_dreq": 0, "cm_tx_msgs_drep": 0, "cm_timeouts": 0},
		a: {"cm_rx_msgs_req": float64(attempts), "cm_tx_msgs_rej": refused, "cm_tx_msgs_rep": 1, "cm_rx_msgs_rtu": 1,
			"cm_rx_msgs_dreq": 1, "cm_tx_msgs_drep": 1,
			"cm_tx_msgs_req": 0, "cm_rx_msgs_rep": 0, "cm_tx_msgs_dreq": 0, "cm_rx_msgs_drep": 0, "cm_timeouts": 0},
	}
	rnicBin := filepath.Join(binDir, "rnic")
	for _, d := range []*daemon{a, b} {
		// The client may end before its DREP arrives: rping exits on the
		// DISCONNECTED event, which a DREQ sent raises at once.
		var got map[string]float64
		for deadline := time.Now().Add(5 * time.Second); ; {
			got = scrape(t, metricsURL(t, d), d.name)
			if got["cm_rx_msgs_drep"]+got["cm_tx_msgs_drep"] == 1 || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		stat := runTool(t, rnicBin, "stat", "-d", d.name)
		for k, v := range want[d] {
			if got[k] != v {
				t.Errorf("%s: /metrics rnicd_%s_total = %v, want %v", d.name, k, got[k], v)
			}
			if w := fmt.Sprintf(" %s %v ", k, v); !strings.Contains(stat+" ", w) {
				t.Errorf("%s: rnic stat lacks %q:\n%s", d.name, w, stat)
			}
		}
	}
}
