package tests

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rnicd/rnicd/internal/looptest"
	"github.com/rnicd/rnicd/internal/syncbuf"
	"github.com/rnicd/rnicd/verbs"
)

// binDir holds the programs TestMain builds once for every test: rnicd
// and rnic.
var binDir string

// helperEnv names the role of a test binary re-executed as a client
// process (see helper_test.go).
const helperEnv = "RNICD_TEST_HELPER"

func TestMain(m *testing.M) {
	if role := os.Getenv(helperEnv); role != "" {
		if err := runHelper(role); err != nil {
			fmt.Fprintln(os.Stderr, "helper:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	var err error
	if binDir, err = os.MkdirTemp("", "rnicd-tests-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(binDir)
	build := exec.Command("go", "build", "-o", binDir, "../cmd/rnicd", "../cmd/rnic")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

// daemon is one rnicd process the tests started.
type daemon struct {
	name  string
	addr  netip.Addr
	cmd   *exec.Cmd
	ready string     // its ready line, the log's "device up"
	errb  *lockedBuf // its log
	done  chan error
}

// startDaemon starts rnicd -d name on addr with its socket in dir and
// waits for its ready line.
func startDaemon(dir, name, addr string, extra ...string) (*daemon, error) {
	return startDaemonIn("", dir, name, addr, extra...)
}

// ownDaemon starts rnicd -d name on the test's own loopback address
// with its socket in dir, ends the test if it cannot, and stops it when
// the test ends, failing the test with the daemon's log if it did not
// stop cleanly.
func ownDaemon(t *testing.T, dir, name string, extra ...string) *daemon {
	t.Helper()
	d, err := startDaemon(dir, name, ownAddr(t), extra...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.stop(); err != nil {
			t.Errorf("%v\n%s", err, d.errb.String())
		}
	})
	return d
}

// startDaemonIn is startDaemon in the network namespace at path (see
// nsenter(1)), or this process's for "".
func startDaemonIn(netns, dir, name, addr string, extra ...string) (*daemon, error) {
	var wrap []string
	if netns != "" {
		wrap = []string{"nsenter", "--net=" + netns, "--"}
	}
	return startDaemonWrapped(wrap, dir, name, addr, extra...)
}

// startDaemonWrapped is startDaemon run by the command line wrap (a
// program that execs its last arguments, as nsenter and unshare do, so
// that the daemon's pid is the command's), or directly for nil.
func startDaemonWrapped(wrap []string, dir, name, addr string, extra ...string) (*daemon, error) {
	args := append([]string{"-d", name, "-addr", addr, "-mtu", "1024"}, extra...)
	cmd := exec.Command(filepath.Join(binDir, "rnicd"), args...)
	if len(wrap) > 0 {
		cmd = exec.Command(wrap[0], append(append(append([]string{}, wrap[1:]...), cmd.Path), args...)...)
	}
	cmd.Env = append(os.Environ(), "RNICD_DIR="+dir)
	d := &daemon{name: name, addr: netip.MustParseAddr(addr), cmd: cmd, errb: &lockedBuf{}, done: make(chan error, 1)}
	cmd.Stdout = d.errb
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	log := bufio.NewScanner(stderr)
	log.Buffer(nil, 1<<20)
	for log.Scan() {
		d.errb.Write(append(log.Bytes(), '\n'))
		if strings.Contains(log.Text(), `msg="device up"`) {
			d.ready = log.Text()
			break
		}
	}
	if d.ready == "" {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("rnicd %s did not come up:\n%s", name, d.errb.String())
	}
	go func() {
		// Keep reading so a full pipe never blocks the daemon.
		for log.Scan() {
			d.errb.Write(append(log.Bytes(), '\n'))
		}
		io.Copy(d.errb, stderr) // past a line too long to scan
		d.done <- cmd.Wait()
	}()
	return d, nil
}

// stop sends SIGTERM and waits for the exit status.
func (d *daemon) stop() error {
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-d.done:
		return err
	case <-time.After(20 * time.Second):
		d.cmd.Process.Kill()
		return fmt.Errorf("rnicd %s did not stop on SIGTERM", d.name)
	}
}

// stopper returns a function that stops ds (SIGTERM, each exit status
// checked) the first time it is called, and has it called when the test
// ends: a test that reads what the daemons write as they stop (a
// capture, a trace file) calls it first.
func stopper(t testing.TB, ds ...*daemon) func() {
	var once sync.Once
	stop := func() {
		once.Do(func() {
			for _, d := range ds {
				if err := d.stop(); err != nil {
					t.Errorf("%v\n%s", err, d.errb.String())
				}
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// lockedBuf is the tests' name for a buffer goroutines write while a
// test reads it.
type lockedBuf = syncbuf.Buffer

// daemons starts the pair of daemons a test uses, rnicA and rnicB as
// users run them (the README puts them on 127.0.0.1 and 127.0.0.2; a test
// takes addresses of its own from ownAddr), points this process's
// verbs.Open at their sockets, and stops them (SIGTERM, exit 0) when the
// test ends.
func daemons(t testing.TB) (*daemon, *daemon) {
	t.Helper()
	return daemonsWith(t, t.TempDir(), nil, nil)
}

// daemonsWith is daemons with their sockets in dir and extra flags for
// each.
func daemonsWith(t testing.TB, dir string, extraA, extraB []string) (*daemon, *daemon) {
	t.Helper()
	a, err := startDaemon(dir, "rnicA", ownAddr(t), extraA...)
	if err != nil {
		t.Fatal(err)
	}
	b, err := startDaemon(dir, "rnicB", ownAddr(t), extraB...)
	if err != nil {
		a.stop()
		t.Fatal(err)
	}
	t.Setenv("RNICD_DIR", dir)
	t.Cleanup(func() {
		for _, d := range []*daemon{a, b} {
			if err := d.stop(); err != nil {
				t.Errorf("%v\n%s", err, d.errb.String())
			}
		}
	})
	return a, b
}

// ownAddr is a loopback address for one NIC of this test, which no
// other test, here or in a run beside this one, binds UDP 4791 on.
func ownAddr(t testing.TB) string {
	t.Helper()
	return looptest.Get(t).String()
}

// nodeGUID is the node GUID a NIC on IPv4 address a reports, as
// ibv_devices prints it: 02:00:00:00 and the address's four bytes,
// written out here rather than by the code under test.
func nodeGUID(a netip.Addr) string {
	v := a.As4()
	return fmt.Sprintf("02000000%02x%02x%02x%02x", v[0], v[1], v[2], v[3])
}

// nodeGUIDColons is nodeGUID as ibv_devinfo prints it.
func nodeGUIDColons(a netip.Addr) string {
	g := nodeGUID(a)
	return g[0:4] + ":" + g[4:8] + ":" + g[8:12] + ":" + g[12:16]
}

// open opens name on its daemon: these tests are of the daemon's engine
// (and read its counters and listings through the Context).
func open(t testing.TB, name string) *verbs.Context {
	t.Helper()
	c, err := verbs.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func must[T any](t testing.TB) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

// pollN polls cq until n completions arrived, waiting in between.
func pollN(t testing.TB, cq *verbs.CQ, n int) []verbs.WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var out []verbs.WC
	wcs := make([]verbs.WC, 16)
	for len(out) < n {
		k := cq.Poll(wcs[:min(len(wcs), n-len(out))])
		out = append(out, wcs[:k]...)
		if k == 0 {
			if err := cq.Wait(ctx); err != nil {
				t.Fatalf("%d of %d completions, then: %v", len(out), n, err)
			}
		}
	}
	return out
}

// apart is two rnicd, each with its sockets in a directory of its own,
// so that a program given one directory (RNICD_DIR) sees one daemon, as
// on a host of its own; ca and cb are the test's contexts on them.
type apart struct {
	a, b         *daemon
	dirA, dirB   string
	nameA, nameB string
	ca, cb       *verbs.Context
}

// startApart starts two such daemons named prefix plus a random part (no
// other test's daemon has the name: rnicd makes /dev/infiniband nodes by
// it) and "a" or "b"; wrapB, if not nil, runs the second (see
// startDaemonWrapped). They stop when the test ends.
func startApart(t *testing.T, prefix string, wrapB []string) *apart {
	t.Helper()
	name := fmt.Sprintf("%s%06x", prefix, time.Now().UnixNano()&0xffffff)
	p := &apart{dirA: t.TempDir(), dirB: t.TempDir(), nameA: name + "a", nameB: name + "b"}
	var err error
	if p.a, err = startDaemon(p.dirA, p.nameA, ownAddr(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.a.stop() })
	if p.b, err = startDaemonWrapped(wrapB, p.dirB, p.nameB, ownAddr(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.b.stop() })
	t.Setenv("RNICD_DIR", p.dirA)
	p.ca = open(t, p.nameA)
	t.Setenv("RNICD_DIR", p.dirB)
	p.cb = open(t, p.nameB)
	return p
}
