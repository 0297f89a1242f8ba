package tests

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// rnic res cm_id between two rnicd while an rping holds its connection
// open: the server's listener, then on each side the connected ID with
// its QP, owner, port space and both addresses, as `rdma res show
// cm_id` prints them; after the client is killed (its daemon sends the
// DREQ) and the server ends, no CM ID is left on either side.
func TestResCMIDs(t *testing.T) {
	a, b := daemons(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	bin := filepath.Join(binDir, "rnic")
	res := func(dev string, args ...string) string {
		return strings.TrimSpace(runTool(t, bin, append([]string{"res", "-d", dev}, args...)...))
	}
	// waitRes polls dev's CM IDs until ok says so, and returns their rows.
	waitRes := func(dev, what string, ok func([]string) bool) []string {
		t.Helper()
		var rows []string
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			rows = nil
			if out := res(dev, "show", "cm_id"); out != "" {
				rows = strings.Split(out, "\n")
			}
			if ok(rows) {
				return rows
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: waiting for %s, rows:\n%s", dev, what, strings.Join(rows, "\n"))
			}
		}
	}
	port := freePort(t)
	srv, _, srvErr := startRpingServer(t, ctx, a, port)
	listen := fmt.Sprintf("link rnicA/1 state LISTEN ps TCP pid %d comm rnic cm-idn 0 src-addr %s:%s dst-addr 0.0.0.0:0",
		srv.Process.Pid, a.addr, port)
	waitRes("rnicA", "the listener", func(rows []string) bool { return len(rows) == 1 })
	if got := res("rnicA", "cm_id"); got != listen {
		t.Fatalf("listener:\n got %s\nwant %s", got, listen)
	}

	// A client that pings until it is killed.
	cli := rnic(ctx, "rping", "-c", "-a", a.addr.String(), "-I", b.addr.String(), "-p", port, "-C", "0")
	cliErr := &lockedBuf{}
	cli.Stderr = cliErr
	if err := cli.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cli.Process.Kill(); cli.Wait() }()
	// The source port is the one rdma_cm picked on the client; the
	// client's row names it, the server's must name the same.
	cliRow := regexp.MustCompile(fmt.Sprintf(`^link rnicB/1 lqpn (\d+) qp-type RC state CONNECT ps TCP pid %d comm rnic cm-idn 0 src-addr %s:(\d+) dst-addr %s:%s$`,
		cli.Process.Pid, regexp.QuoteMeta(b.addr.String()), regexp.QuoteMeta(a.addr.String()), port))
	var cm []string
	waitRes("rnicB", "the client's connected ID", func(rows []string) bool {
		if len(rows) == 1 {
			cm = cliRow.FindStringSubmatch(rows[0])
		}
		return cm != nil
	})
	cliQPN, srcPort := cm[1], cm[2]
	t.Logf("rnicB: %s", cm[0])
	srvRows := waitRes("rnicA", "the server's connected ID", func(rows []string) bool {
		return len(rows) == 2 && strings.Contains(rows[1], "state CONNECT")
	})
	t.Logf("rnicA:\n%s", strings.Join(srvRows, "\n"))
	// The QPNs the rows name are the RC QPs each rping owns.
	qpOf := func(dev string, pid int) string {
		for _, line := range strings.Split(res(dev), "\n") {
			if strings.Contains(line, " type RC ") && strings.HasSuffix(line, fmt.Sprintf(" pid %d comm rnic", pid)) {
				f := strings.Fields(line)
				return f[3] // link DEV/1 lqpn N
			}
		}
		t.Fatalf("%s: no RC QP of pid %d:\n%s", dev, pid, res(dev))
		return ""
	}
	if q := qpOf("rnicB", cli.Process.Pid); q != cliQPN {
		t.Errorf("client's CM ID names QP %s, its RC QP is %s", cliQPN, q)
	}
	want := []string{listen, fmt.Sprintf("link rnicA/1 lqpn %s qp-type RC state CONNECT ps TCP pid %d comm rnic cm-idn 1 src-addr %s:%s dst-addr %s:%s",
		qpOf("rnicA", srv.Process.Pid), srv.Process.Pid, a.addr, port, b.addr, srcPort)}
	for i := range want {
		if srvRows[i] != want[i] {
			t.Errorf("server row %d:\n got %s\nwant %s", i, srvRows[i], want[i])
		}
	}

	// Killed, the client's daemon disconnects for it; the server sees
	// DISCONNECTED and ends.
	cli.Process.Kill()
	cli.Wait()
	if err := srv.Wait(); err != nil {
		t.Fatalf("server: %v\n%s", err, srvErr.String())
	}
	for _, dev := range []string{"rnicA", "rnicB"} {
		waitRes(dev, "no CM ID", func(rows []string) bool { return len(rows) == 0 })
	}
}
