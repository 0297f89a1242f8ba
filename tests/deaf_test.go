package tests

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rnicd/rnicd/verbs"
)

// TestDaemonNeverDeaf is a lock-out: a client that takes every
// descriptor the daemon may open makes its accept fail with EMFILE. The
// daemon must say so once, keep serving, and take a new client as soon as
// the hog has left, not let Serve return on EMFILE, which left a daemon
// that never accepted again. The daemon's limit is lowered from outside (prlimit)
// to what it holds plus 8, so the hog needs 8 connections, not 20,000
// CQs. It also checks that rnicd raised its soft limit to the hard one
// at start (it logs max_fds).
func TestDaemonNeverDeaf(t *testing.T) {
	dir := t.TempDir()
	// The daemon starts with a soft limit of 256, below the hard one,
	// as on most systems (1,024): a child inherits the limit set with
	// syscall.Setrlimit.
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	if lim.Max <= 256 {
		t.Fatalf("hard limit on descriptors %d: too low to test", lim.Max)
	}
	soft := lim
	soft.Cur = 256
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &soft); err != nil {
		t.Fatal(err)
	}
	d, err := startDaemon(dir, "rnicH", ownAddr(t))
	if rerr := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); rerr != nil {
		t.Fatal(rerr)
	}
	if err != nil {
		t.Fatal(err)
	}
	stop := stopper(t, d)
	want := fmt.Sprintf("max_fds=%d", lim.Max)
	for i := 0; !strings.Contains(d.errb.String(), want); i++ {
		if i == 100 { // the log is read concurrently with the ready line
			t.Fatalf("rnicd did not raise its descriptor limit to the hard limit (%s):\n%s", want, d.errb.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	pid := d.cmd.Process.Pid
	limits, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("Max open files            %-20d %-20d", lim.Max, lim.Max); !strings.Contains(string(limits), want) {
		t.Errorf("rnicd's limits, want %q:\n%s", want, limits)
	}
	t.Setenv("RNICD_DIR", dir)
	fds := func() int {
		ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		if err != nil {
			t.Fatal(err)
		}
		return len(ents)
	}
	// One client first, as if an application were using the NIC.
	useDevice(t, "rnicH")
	held := uint64(fds())
	low := unix.Rlimit{Cur: held + 8, Max: held + 8}
	if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, &low, nil); err != nil {
		t.Fatalf("prlimit: %v", err)
	}

	// The hog: connections until the daemon holds all it may.
	path := filepath.Join(dir, "rnicH.sock")
	var hog []net.Conn
	deadline := time.Now().Add(20 * time.Second)
	for uint64(fds()) < low.Cur {
		if time.Now().After(deadline) {
			t.Fatalf("daemon holds %d descriptors of %d after %d connections", fds(), low.Cur, len(hog))
		}
		if len(hog) < 64 {
			c, err := net.Dial("unixpacket", path)
			if err != nil {
				t.Fatalf("hog connection %d: %v", len(hog), err)
			}
			hog = append(hog, c)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// More wait in the backlog, each accept of which fails now.
	for range 4 {
		c, err := net.Dial("unixpacket", path)
		if err != nil {
			t.Fatal(err)
		}
		hog = append(hog, c)
	}
	for !strings.Contains(d.errb.String(), "accept failing") {
		if time.Now().After(deadline) {
			t.Fatalf("daemon out of descriptors never said its accept fails:\n%s", d.errb.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // several failed accepts, one log line
	for _, c := range hog {
		c.Close()
	}

	// The hog gone, a new client connects and works.
	done := make(chan struct{})
	go func() {
		defer close(done)
		useDevice(t, "rnicH")
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("no new client served 20 s after the hog left: the daemon went deaf\n%s", d.errb.String())
	}
	// Each burst of failed accepts (the hog's, and maybe a short one
	// while the hog's queued connections are taken and dropped) is one
	// line when it starts and one when it ends, however many accepts
	// failed: the counters at exit say how many did.
	stop()
	log := d.errb.String()
	bursts, recovered := strings.Count(log, "accept failing"), strings.Count(log, "accepting again")
	var failed int
	// The exit's "counters" line is slog's: hostif_accept_err=N.
	if _, rest, ok := strings.Cut(log, " hostif_accept_err="); ok {
		fmt.Sscan(rest, &failed)
	}
	if bursts == 0 || bursts != recovered || failed <= bursts {
		t.Errorf("%d accepts failed, %d lines say so, %d say it accepts again; want a line per burst, and a recovery each:\n%s",
			failed, bursts, recovered, log)
	}
	t.Logf("%d failed accepts in %d burst(s)", failed, bursts)
}

// useDevice opens name, creates a PD, a CQ and an RC QP, and closes
// them: the daemon serves this client.
func useDevice(t *testing.T, name string) {
	t.Helper()
	c, err := verbs.Open(name)
	if err != nil {
		t.Errorf("open %s: %v", name, err)
		return
	}
	defer c.Close()
	pd, err := c.AllocPD()
	if err != nil {
		t.Errorf("alloc PD: %v", err)
		return
	}
	cq, err := c.CreateCQ(16, nil)
	if err != nil {
		t.Errorf("create CQ: %v", err)
		return
	}
	if _, err := pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		t.Errorf("create QP: %v", err)
	}
}
