package tests

import (
	"context"
	"fmt"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestRpingPersistent: rnic's rping -s -P serves a client, then another,
// then rnic's and Debian's (on the C library) at the same time, each
// client's pings validated and printed byte for byte, the server printing
// every ping of every client; after each client it holds no QP of its
// own in rnicd, only its listening CM ID, and it runs until killed.
func TestRpingPersistent(t *testing.T) {
	tb := newToolBench(t)
	real := debianTool(t, "rping", "rdmacm-utils")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	port := freePort(t)
	server := rnicTool(ctx, "rping", "-s", "-P", "-v", "-a", tb.a.addr.String(), "-p", port)
	sout := &lockedBuf{}
	server.Stdout, server.Stderr = sout, sout
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- server.Wait() }()
	defer func() {
		server.Process.Kill()
		<-done
	}()
	// client returns what the client printed to stdout, its pings; its
	// stderr goes into the error. Debian's rping prints its CM events
	// to stderr, unbuffered, and its pings to a buffered stdout: in one
	// pipe "client DISCONNECT EVENT..." (the server disconnected first)
	// landed in the middle of ping 54, where the first 4 KiB were
	// flushed.
	client := func(run runner, n int) (string, error) {
		for {
			var out, errb strings.Builder
			c := run(ctx, "rping", "-c", "-v", "-V", "-C", fmt.Sprint(n), "-a", tb.a.addr.String(), "-I", tb.b.addr.String(), "-p", port)
			c.Stdout, c.Stderr = &out, &errb
			err := c.Run()
			if err != nil && rpingRejected(out.String()+errb.String()) && ctx.Err() == nil {
				time.Sleep(20 * time.Millisecond) // the server does not listen yet
				continue
			}
			if err != nil {
				err = fmt.Errorf("%w; stderr:\n%s", err, errb.String())
			}
			return out.String(), err
		}
	}
	want := func(n int) string {
		var b strings.Builder
		for i := range n {
			fmt.Fprintf(&b, "ping data: %s\n", rpingData(i))
		}
		return b.String()
	}
	// The server holds its listening ID and nothing else once a client
	// is gone.
	settled := func(after string) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			qps, ids := resRows(t, "rnicA", server.Process.Pid, false), resRows(t, "rnicA", server.Process.Pid, true)
			if len(qps) == 0 && len(ids) == 1 && strings.Contains(ids[0], " state LISTEN ") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("after %s the server holds\n%s\n%s", after, strings.Join(qps, "\n"), strings.Join(ids, "\n"))
			}
		}
		select {
		case err := <-done:
			t.Fatalf("the persistent server ended after %s: %v\n%s", after, err, sout.String())
		default:
		}
	}
	var serverWant []string
	for i, n := range []int{5, 7} {
		out, err := client(rnicTool, n)
		if err != nil || out != want(n) {
			t.Fatalf("client %d: %v\n%s", i+1, err, out)
		}
		for j := range n {
			serverWant = append(serverWant, "server ping data: "+rpingData(j))
		}
		settled(fmt.Sprintf("client %d", i+1))
	}
	// Two at once, rnic's and Debian's.
	const n = 100
	var wg sync.WaitGroup
	for _, c := range []struct {
		name string
		run  runner
	}{{"rnic", rnicTool}, {"Debian", real}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if out, err := client(c.run, n); err != nil || out != want(n) {
				t.Errorf("%s's client beside another: %v\n%s", c.name, err, out)
			}
		}()
		for j := range n {
			serverWant = append(serverWant, "server ping data: "+rpingData(j))
		}
	}
	wg.Wait()
	settled("two clients at once")
	got := strings.Split(strings.TrimSuffix(sout.String(), "\n"), "\n")
	sort.Strings(got)
	sort.Strings(serverWant)
	if strings.Join(got, "\n") != strings.Join(serverWant, "\n") {
		t.Errorf("the server printed %d lines, want the %d pings of its four clients:\n%s", len(got), len(serverWant), sout.String())
	}
	if out, err := exec.CommandContext(ctx, rnicTool(ctx, "rping").Path, "rping", "-c", "-P", "-a", "127.0.0.1").CombinedOutput(); err == nil || !strings.Contains(string(out), "-P is a server's") {
		t.Errorf("rping -c -P: %v %s", err, out)
	}
}
