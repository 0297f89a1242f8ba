package tests

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A CM message lost on the wire between two rnicd is sent again at its
// timeout and the connection still forms: the fault injector on QP1
// (`rnic inject --tx --qp 1 dropnth 1`, the next MAD the daemon sends)
// loses the client's REQ, then in a second run the server's REP. rping's
// one ping then passes, data checked, and the daemons' CM counters say by
// value what happened: the lost message sent twice, one retry, on the
// side that lost it; no timeout anywhere.
//
// The REQ is resent after two packet lifetimes and the server's CM
// response time (2 * 1.07 s + 4.3 s, ib_send_cm_req's timeout); the REP
// after the REQ's local CM response time (4.3 s), before the REQ's own
// retry would come: the REP case sees one REQ, not two.
func TestCMLostMADRetried(t *testing.T) {
	for _, tc := range []struct {
		name   string
		lossOn string // the daemon whose next MAD is lost: rnicB the client, rnicA the server
		want   map[string]map[string]uint64
	}{
		{name: "REQ", lossOn: "rnicB", want: map[string]map[string]uint64{
			"rnicB": {"cm_tx_msgs_req": 2, "cm_tx_retries": 1, "cm_rx_msgs_rep": 1, "cm_tx_msgs_rtu": 1, "cm_timeouts": 0},
			"rnicA": {"cm_rx_msgs_req": 1, "cm_tx_msgs_rep": 1, "cm_tx_retries": 0, "cm_rx_msgs_rtu": 1, "cm_rx_duplicates": 0, "cm_timeouts": 0},
		}},
		{name: "REP", lossOn: "rnicA", want: map[string]map[string]uint64{
			"rnicB": {"cm_tx_msgs_req": 1, "cm_tx_retries": 0, "cm_rx_msgs_rep": 1, "cm_tx_msgs_rtu": 1, "cm_timeouts": 0},
			"rnicA": {"cm_rx_msgs_req": 1, "cm_tx_msgs_rep": 2, "cm_tx_retries": 1, "cm_rx_msgs_rtu": 1, "cm_timeouts": 0},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := daemons(t)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			bin := filepath.Join(binDir, "rnic")
			port := freePort(t)
			srv, srvOut, srvErr := startRpingServer(t, ctx, a, port, "-v")
			// The loss must hit the connection's message, not a REQ sent
			// before the server listens (refused): wait for the listener.
			for deadline := time.Now().Add(20 * time.Second); !strings.Contains(runTool(t, bin, "res", "-d", "rnicA", "show", "cm_id"), "state LISTEN"); time.Sleep(20 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("the rping server never listened: %s", srvErr.String())
				}
			}
			if out := runTool(t, bin, "inject", "-d", tc.lossOn, "--tx", "--qp", "1", "dropnth", "1"); !strings.Contains(out, tc.lossOn+" tx: dropnth 1 ") {
				t.Fatalf("rnic inject printed %q", out)
			}
			start := time.Now()
			cli := rnic(ctx, "rping", "-c", "-a", a.addr.String(), "-I", b.addr.String(), "-p", port, "-C", "1", "-V", "-v")
			errb := &lockedBuf{}
			cli.Stderr = errb
			out, err := cli.Output()
			if err != nil {
				t.Fatalf("client: %v: %s", err, errb.String())
			}
			t.Logf("connected and pinged in %.1f s with the %s lost", time.Since(start).Seconds(), tc.name)
			if want := "ping data: rdma-ping-0: ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqr\n"; string(out) != want {
				t.Errorf("client printed %q, want %q", out, want)
			}
			if err := srv.Wait(); err != nil {
				t.Fatalf("server: %v\n%s", err, srvErr.String())
			}
			if !strings.HasPrefix(srvOut.String(), "server ping data: rdma-ping-0: ") {
				t.Errorf("server printed %q", srvOut.String())
			}
			for name, want := range tc.want {
				m := must[map[string]uint64](t)(open(t, name).Counters())
				for k, v := range want {
					if m[k] != v {
						t.Errorf("%s: %s = %d, want %d", name, k, m[k], v)
					}
				}
			}
		})
	}
}
