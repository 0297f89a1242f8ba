package tests

import (
	"bytes"
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rnicd/rnicd/verbs"
)

// TestServerKilledMidRun is a dead peer: ib_write_bw's server is
// SIGKILLed mid-run. rnicA destroys its QP and answers nothing more, so
// the client's QP (perftest's retry_cnt 7, timeout 14: 67 ms) hears no
// ACK: after 8 ACK timeouts (67 ms doubled up to 8x, 3.2 s in all) its
// WRITE completes with RETRY_EXC_ERR and the tool fails, saying the peer
// stopped answering. Were retry_cnt 7 to retry forever (rxe's reading),
// the client would wait for its own 2-minute watchdog.
func TestServerKilledMidRun(t *testing.T) {
	tb := newToolBench(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	args := []string{"-p", freePort(t), "-s", "65536", "-D", "60"}
	server := rnicTool(ctx, "ib_write_bw", append(args, "-d", "rnicA")...)
	var sout bytes.Buffer
	server.Stdout, server.Stderr = &sout, &sout
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	defer server.Process.Kill()
	var cout bytes.Buffer
	var done chan error
	for running := false; !running; {
		cout.Reset()
		client := rnicTool(ctx, "ib_write_bw", append(args, "-d", "rnicB", "127.0.0.1")...)
		client.Stdout, client.Stderr = &cout, &cout
		if err := client.Start(); err != nil {
			t.Fatal(err)
		}
		done = make(chan error, 1)
		go func() { done <- client.Wait() }()
		// Running once the server's NIC has taken a few hundred packets.
		for !running {
			select {
			case err := <-done:
				if !notListening(cout.String()) || ctx.Err() != nil {
					t.Fatalf("client ended before the kill: %v\n%s\nserver:\n%s", err, cout.String(), sout.String())
				}
				time.Sleep(50 * time.Millisecond)
			case <-time.After(20 * time.Millisecond):
				running = counterOf(t, tb.ca, "rcvd_pkts") > 500
				continue
			}
			break
		}
	}
	if err := server.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	server.Wait()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		t.Fatalf("client still running %v after its server was killed\n%s", time.Since(killed), cout.String())
	}
	// The retry budget is 3.2 s; 30 s leaves room for a loaded host and
	// is far below the tool's 2-minute watchdog, which is what this
	// tells apart.
	if took := time.Since(killed); took > 30*time.Second {
		t.Errorf("client failed %v after the kill, want within its retry budget", took)
	}
	out := cout.String()
	if err == nil || !strings.Contains(out, "RETRY_EXC_ERR") || !strings.Contains(out, "peer stopped answering") {
		t.Fatalf("client: %v, want a failure naming RETRY_EXC_ERR and the peer stopped answering\n%s", err, out)
	}
	if c := counterOf(t, tb.cb, "retry_exceeded_err"); c != 1 {
		t.Errorf("rnicB retry_exceeded_err = %d, want 1", c)
	}
	if c := counterOf(t, tb.cb, "local_ack_timeout_err"); c < 8 {
		t.Errorf("rnicB local_ack_timeout_err = %d, want 8 or more (retry_cnt 7: 7 retries, then the 8th timeout fails)", c)
	}
	tb.idle(t)
}

// counterOf reads one of a daemon's counters.
func counterOf(t testing.TB, c *verbs.Context, name string) uint64 {
	t.Helper()
	m := must[map[string]uint64](t)(c.Counters())
	v, ok := m[name]
	if !ok {
		t.Fatalf("%s has no counter %q", c.Name(), name)
	}
	return v
}
