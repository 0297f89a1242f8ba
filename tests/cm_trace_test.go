package tests

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rnicd/rnicd/rnic/trace"
)

// One rping between two rnicd that write their trace to a file: each
// daemon's cm events are the MADs its side sent and received, in order,
// with the connection's state changes.
func TestTraceCMDaemons(t *testing.T) {
	dir := t.TempDir()
	trA, trB := filepath.Join(dir, "a.json"), filepath.Join(dir, "b.json")
	a, err := startDaemon(dir, "rnicA", ownAddr(t), "-trace", trA)
	if err != nil {
		t.Fatal(err)
	}
	b, err := startDaemon(dir, "rnicB", ownAddr(t), "-trace", trB)
	if err != nil {
		a.stop()
		t.Fatal(err)
	}
	t.Setenv("RNICD_DIR", dir)
	stopped := false
	stopBoth := func() {
		if stopped {
			return
		}
		stopped = true
		for _, d := range []*daemon{a, b} {
			if err := d.stop(); err != nil {
				t.Errorf("%v\n%s", err, d.errb.String())
			}
		}
	}
	t.Cleanup(stopBoth)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	port := freePort(t)
	srv, _, srvErr := startRpingServer(t, ctx, a, port)
	// Connect only once the server listens: no refused REQ in the trace.
	bin := filepath.Join(binDir, "rnic")
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(runTool(t, bin, "res", "-d", "rnicA", "cm_id"), "state LISTEN"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the rping server never listened")
		}
	}
	if _, err := rpingClient(t, ctx, a, b, port, "-C", "3"); err != nil {
		t.Fatal(err)
	}
	if err := srv.Wait(); err != nil {
		t.Fatalf("server: %v\n%s", err, srvErr.String())
	}
	// The DREP may reach the client's daemon after the client has gone:
	// wait until it counts it before stopping.
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(runTool(t, bin, "stat", "-d", "rnicB")+" ", " cm_rx_msgs_drep 1 "); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("rnicB never received the DREP")
		}
	}
	stopBoth()

	cmEvents := func(path string) []string {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		var out []string
		if err := trace.ReadJSON(f, func(e *trace.Event) error {
			if e.Module == trace.ModCM {
				d := e.Detail()
				out = append(out, d[:strings.Index(d+" comm_id", " comm_id")])
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	for _, c := range []struct {
		path string
		want []string
	}{
		{trB, []string{"REQ sent: IDLE -> REQ_SENT", "REP received: REQ_SENT -> REP_RCVD", "RTU sent: REP_RCVD -> ESTABLISHED",
			"DREQ sent: ESTABLISHED -> DREQ_SENT", "DREP received: DREQ_SENT -> TIMEWAIT"}},
		{trA, []string{"REQ received: IDLE -> REQ_RCVD", "REP sent: REQ_RCVD -> REP_SENT", "RTU received: REP_SENT -> ESTABLISHED",
			"DREQ received: ESTABLISHED -> DREQ_RCVD", "DREP sent: DREQ_RCVD -> TIMEWAIT"}},
	} {
		if got := cmEvents(c.path); !slices.Equal(got, c.want) {
			t.Errorf("%s: cm events\n%s\nwant\n%s", filepath.Base(c.path), strings.Join(got, "\n"), strings.Join(c.want, "\n"))
		}
	}
}
