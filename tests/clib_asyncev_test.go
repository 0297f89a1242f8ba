package tests

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestCLibAsyncEvents runs clib/test/asyncev.c: every asynchronous event
// a QP, SRQ or CQ raises reaches ibv_get_async_event with its element
// pointing at the program's own object, on the context that owns it
// only: COMM_EST at the first SEND into a QP in RTR, SRQ_LIMIT_REACHED
// once after ibv_modify_srq armed it (query_srq then reads 0),
// QP_ACCESS_ERR then QP_LAST_WQE_REACHED for a bad rkey at an SRQ's QP,
// QP_REQ_ERR for a SEND too long, CQ_ERR once for an overflow; the
// async fd readable while an event waits, O_NONBLOCK's EAGAIN otherwise,
// and ibv_destroy_qp waiting for its event's ibv_ack_async_event.
func TestCLibAsyncEvents(t *testing.T) {
	lib := clibDir(t)
	dir := t.TempDir()
	d, err := startDaemon(dir, "rnicV", ownAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	defer d.cmd.Process.Kill()
	cmd := exec.Command(filepath.Join(lib, "asyncev"), "rnicV")
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+lib, "RNICD_DIR="+dir)
	want := `no event yet: the fd not readable, O_NONBLOCK: EAGAIN: ok
ibv_modify_srq IBV_SRQ_LIMIT 3: query_srq reads 8 WRs, 1 SGE, limit 3: ok
a limit above max_wr, or a resize: EINVAL: ok
a SEND to the QP in RTR: success: ok
COMM_EST, element.qp the receiving QP: ok
3 WQEs left, limit 3: no SRQ_LIMIT_REACHED yet: ok
a second SEND: success: ok
2 WQEs left: SRQ_LIMIT_REACHED, element.srq the SRQ: ok
the limit fired once: query_srq reads 0: ok
a WRITE with a bad rkey: REM_ACCESS_ERR at the sender: ok
QP_ACCESS_ERR, element.qp the receiving QP: ok
QP_LAST_WQE_REACHED, element.qp the SRQ's QP: ok
ibv_destroy_qp waited for the event's ibv_ack_async_event: ok
nothing more, and nothing for the sender, whose error its completion told: ok
a SEND of 64 bytes into 4: REM_INV_REQ_ERR at the sender: ok
QP_REQ_ERR, element.qp the receiving QP: ok
no LAST_WQE_REACHED for a QP without an SRQ: ok
CQ_ERR, element.cq the CQ that overflowed: ok
CQ_ERR once: ok
every object destroyed: ok
PASS
`
	if out := runOut(t, cmd); out != want {
		t.Fatalf("asyncev printed\n%s\nwant\n%s", out, want)
	}
}

// TestCLibAsyncPortEvents runs rnicd in a network namespace of its own
// on a veth (198.18.7.1), and on it clib/test/asyncev -port and Debian's
// unmodified ibv_asyncwatch and rnic's clone: setting the veth's link down and up gives
// each PORT_ERR then PORT_ACTIVE on port 1, as rxe gives them for its
// netdev, with the port's state PORT_DOWN (phys_state DISABLED) between
// in Debian's ibv_devinfo and rnic's, and the daemon's SIGKILL
// DEVICE_FATAL once.
func TestCLibAsyncPortEvents(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipped: needs root to make a network namespace; CI runs as root")
	}
	lib := clibDir(t)
	watch := debianTool(t, "ibv_asyncwatch", "ibverbs-utils")
	ns, ip := namedNetns(t, "port")
	ip("link", "add", "rnv0", "type", "veth", "peer", "name", "rnv1")
	ip("addr", "add", "198.18.7.1/24", "dev", "rnv0")
	ip("link", "set", "lo", "up")
	ip("link", "set", "rnv1", "up")
	ip("link", "set", "rnv0", "up")
	dir := t.TempDir()
	d, err := startDaemonIn("/run/netns/"+ns, dir, "rnicP", "198.18.7.1")
	if err != nil {
		t.Fatal(err)
	}
	defer d.cmd.Process.Kill()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The programs need not be in the namespace: they reach the daemon
	// through its unix socket in dir.
	start := func(cmd *exec.Cmd, first string) *bufio.Reader {
		t.Helper()
		cmd.Env = append(cmd.Env, "RNICD_DIR="+dir)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		r := bufio.NewReader(out)
		if l, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(l, first) {
			t.Fatalf("%v began with %q, %v", cmd.Args, l, err)
		}
		return r
	}
	ev := exec.CommandContext(ctx, filepath.Join(lib, "asyncev"), "-port", "rnicP")
	ev.Env = append(os.Environ(), "LD_LIBRARY_PATH="+lib)
	evOut := start(ev, "ready")
	aw := watch(ctx, "", "-d", "rnicP")
	awOut := start(aw, "rnicP: async event FD ")
	// rnic's clone, on the Go API, prints what Debian's does.
	clone := exec.CommandContext(ctx, filepath.Join(binDir, "rnic"), "ibv_asyncwatch", "-d", "rnicP")
	clone.Env = os.Environ()
	cloneOut := start(clone, "rnicP: async event FD ")
	devinfo := debianTool(t, "ibv_devinfo", "ibverbs-utils")
	// portState checks the port's state and phys_state as Debian's
	// ibv_devinfo -v (on the C library) and rnic's clone print them.
	portState := func(state, phys string) {
		t.Helper()
		want := "\t\t\tstate:\t\t\t" + state + "\n"
		wantPhys := "\t\t\tphys_state:\t\t" + phys + "\n"
		c := devinfo(ctx, "", "-v", "-d", "rnicP")
		c.Env = append(c.Env, "RNICD_DIR="+dir)
		clone := exec.CommandContext(ctx, filepath.Join(binDir, "rnic"), "ibv_devinfo", "-v", "-d", "rnicP")
		clone.Env = append(os.Environ(), "RNICD_DIR="+dir)
		for _, c := range []*exec.Cmd{c, clone} {
			if out := runOut(t, c); !strings.Contains(out, want) || !strings.Contains(out, wantPhys) {
				t.Fatalf("%v printed no %q or %q:\n%s", c.Args, want, wantPhys, out)
			}
		}
	}
	portState("PORT_ACTIVE (4)", "LINK_UP (5)")
	line := func(r *bufio.Reader, who, want string) {
		t.Helper()
		if l, err := r.ReadString('\n'); err != nil || l != want {
			t.Fatalf("%s printed %q, %v; want %q\ndaemon:\n%s", who, l, err, want, d.errb.String())
		}
	}
	ip("link", "set", "rnv0", "down")
	line(evOut, "asyncev -port", "port error port 1\n")
	line(awOut, "ibv_asyncwatch", "  event_type IBV_EVENT_PORT_ERR (10), port 1\n")
	line(cloneOut, "rnic ibv_asyncwatch", "  event_type IBV_EVENT_PORT_ERR (10), port 1\n")
	portState("PORT_DOWN (1)", "DISABLED (3)")
	ip("link", "set", "rnv0", "up")
	line(evOut, "asyncev -port", "port active port 1\n")
	line(awOut, "ibv_asyncwatch", "  event_type IBV_EVENT_PORT_ACTIVE (9), port 1\n")
	line(cloneOut, "rnic ibv_asyncwatch", "  event_type IBV_EVENT_PORT_ACTIVE (9), port 1\n")
	portState("PORT_ACTIVE (4)", "LINK_UP (5)")
	d.cmd.Process.Signal(syscall.SIGKILL)
	<-d.done
	line(evOut, "asyncev -port", "local catastrophic error port 0\n")
	if err := ev.Wait(); err != nil {
		t.Fatalf("asyncev -port: %v", err)
	}
	for _, w := range []struct {
		name string
		cmd  *exec.Cmd
		out  *bufio.Reader
	}{{"ibv_asyncwatch", aw, awOut}, {"rnic ibv_asyncwatch", clone, cloneOut}} {
		rest, _ := io.ReadAll(w.out)
		err = w.cmd.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 || string(rest) != "  event_type IBV_EVENT_DEVICE_FATAL (8), port 0\n" {
			t.Fatalf("%s after its daemon was killed: %v, printed\n%q", w.name, err, rest)
		}
	}
}
