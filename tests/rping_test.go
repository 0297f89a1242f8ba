package tests

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// startRpingServer starts `rnic rping -s` on a's address with args.
func startRpingServer(t *testing.T, ctx context.Context, a *daemon, port string, args ...string) (*exec.Cmd, *bytes.Buffer, *lockedBuf) {
	t.Helper()
	cmd := rnic(ctx, append([]string{"rping", "-s", "-a", a.addr.String(), "-p", port}, args...)...)
	var out bytes.Buffer
	errb := &lockedBuf{}
	cmd.Stdout, cmd.Stderr = &out, errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd, &out, errb
}

// rpingClient runs the client until it connects: while the server is not
// listening yet the connect is refused (REJ 8), and the client is run
// again, as a user would.
// It runs on b's address towards a's.
func rpingClient(t *testing.T, ctx context.Context, a, b *daemon, port string, args ...string) (string, error) {
	t.Helper()
	for {
		cmd := rnic(ctx, append([]string{"rping", "-c", "-a", a.addr.String(), "-I", b.addr.String(), "-p", port}, args...)...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		if err != nil && strings.Contains(errb.String(), "connection refused") && ctx.Err() == nil {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		if err != nil {
			return out.String(), fmt.Errorf("%v: %s", err, errb.String())
		}
		return out.String(), nil
	}
}

// rping between two rnicd through their CM agents: 1,000 pings with the
// data verified on the client, each printed by both sides, then the
// disconnect ends the server with status 0.
func TestRping(t *testing.T) {
	a, b := daemons(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	port := freePort(t)
	srv, srvOut, srvErr := startRpingServer(t, ctx, a, port, "-v")
	out, err := rpingClient(t, ctx, a, b, port, "-C", "1000", "-V", "-v")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 1000 {
		t.Fatalf("client printed %d lines, want 1000:\n%s", len(lines), out)
	}
	// rping's data: the ping number, then letters from 'A' + ping, A..z
	// rotating, in a 64-byte buffer less its NUL.
	if want := "ping data: rdma-ping-0: ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqr"; lines[0] != want {
		t.Fatalf("first ping %q, want %q", lines[0], want)
	}
	if want := "ping data: rdma-ping-999: "; !strings.HasPrefix(lines[999], want) || len(lines[999]) != len("ping data: ")+63 {
		t.Fatalf("last ping %q", lines[999])
	}
	if err := srv.Wait(); err != nil {
		t.Fatalf("server: %v\n%s", err, srvErr.String())
	}
	srvLines := strings.Split(strings.TrimSpace(srvOut.String()), "\n")
	if len(srvLines) != 1000 || srvLines[0] != "server "+lines[0] {
		t.Fatalf("server printed %d lines, first %q", len(srvLines), srvLines[0])
	}
}

// A connect to a port nobody listens on fails at once: REJ reason 8,
// "connection refused", exit status 1. The daemons say the same by
// value: one REQ from the client's, one REJ back from the server's, no
// retry, and neither keeps a CM ID.
func TestRpingRefused(t *testing.T) {
	a, b := daemons(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	cmd := rnic(ctx, "rping", "-c", "-a", a.addr.String(), "-I", b.addr.String(), "-p", freePort(t), "-C", "1")
	var errb bytes.Buffer
	cmd.Stderr = &errb
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(errb.String(), "connection refused") ||
		!strings.Contains(errb.String(), "REJ reason 8") {
		t.Fatalf("rping to a closed port: %v, %q", err, errb.String())
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("refused after %v, want at once", d)
	}
	for name, want := range map[string]map[string]uint64{
		"rnicB": {"cm_tx_msgs_req": 1, "cm_rx_msgs_rej": 1, "cm_tx_retries": 0, "hostif_objects_cm_id": 0},
		"rnicA": {"cm_rx_msgs_req": 1, "cm_tx_msgs_rej": 1, "cm_ids": 0, "hostif_objects_cm_id": 0},
	} {
		// The client's daemon frees its CM ID once it sees the client gone.
		c := open(t, name)
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			m, bad := must[map[string]uint64](t)(c.Counters()), ""
			for k, v := range want {
				if m[k] != v {
					bad += fmt.Sprintf(" %s = %d, want %d;", k, m[k], v)
				}
			}
			if bad == "" {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("%s:%s", name, bad)
				break
			}
		}
	}
}

// A client killed in the middle of its pings: its daemon destroys its
// CM ID, which sends the DREQ, so the server sees DISCONNECTED and ends;
// neither daemon keeps a CM ID or channel.
func TestRpingClientKilled(t *testing.T) {
	a, b := daemons(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	port := freePort(t)
	srv, _, srvErr := startRpingServer(t, ctx, a, port)
	var cli *exec.Cmd
	for {
		cli = rnic(ctx, "rping", "-c", "-a", a.addr.String(), "-I", b.addr.String(), "-p", port, "-v")
		stdout, err := cli.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var errb bytes.Buffer
		cli.Stderr = &errb
		if err := cli.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(stdout)
		if sc.Scan() && strings.HasPrefix(sc.Text(), "ping data: ") {
			go func() {
				for sc.Scan() {
				}
			}()
			break
		}
		cli.Wait()
		if !strings.Contains(errb.String(), "connection refused") || ctx.Err() != nil {
			t.Fatalf("client: %s", errb.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	cli.Process.Kill()
	cli.Wait()
	if err := srv.Wait(); err != nil {
		t.Fatalf("server after the client died: %v\n%s", err, srvErr.String())
	}
	for _, name := range []string{"rnicA", "rnicB"} {
		c := open(t, name)
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			m, err := c.Counters()
			if err != nil {
				t.Fatal(err)
			}
			if m["hostif_objects_cm_id"] == 0 && m["hostif_objects_cm_event_channel"] == 0 && m["hostif_objects_qp"] == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s keeps %d CM IDs, %d channels, %d QPs", name, m["hostif_objects_cm_id"],
					m["hostif_objects_cm_event_channel"], m["hostif_objects_qp"])
			}
		}
	}
}
