package tests

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rnicd/rnicd/internal/debtest"
)

// The software people run on RDMA (UCX, libfabric, Open MPI) links
// rdma-core's provider libraries libmlx5 and libefa directly: the C
// library's stand-ins must carry every symbol and version those import,
// or the program (or the plugin holding its verbs transports) does not
// load at all, and must answer "not this device" so the program falls
// back to plain verbs.

// TestCLibProviderStubs runs clib/test/dvstubs: the mlx5dv_* and efadv_*
// calls a program makes on an rnicd device answer as rdma-core's
// providers do for a foreign device, and ibv_get_sysfs_path has
// rdma-core's prototype and answer (Open MPI's openib read a garbage
// pointer from the old one and faulted).
func TestCLibProviderStubs(t *testing.T) {
	newToolBench(t)
	lib := clibDir(t)
	want := strings.Join([]string{
		"mlx5dv_is_supported is false: ok",
		"mlx5dv_open_device: NULL, EOPNOTSUPP: ok",
		"mlx5dv_query_device: EOPNOTSUPP: ok",
		"mlx5dv_create_cq: NULL, EOPNOTSUPP: ok",
		"mlx5dv_devx_alloc_uar: NULL, EOPNOTSUPP: ok",
		"mlx5dv_devx_general_cmd: EOPNOTSUPP: ok",
		"mlx5dv_devx_create_event_channel: NULL, EOPNOTSUPP: ok",
		"mlx5dv_init_obj: EOPNOTSUPP: ok",
		"efadv_query_device: EOPNOTSUPP: ok",
		"efadv_create_cq: NULL, EOPNOTSUPP: ok",
		"ibv_get_sysfs_path: ok",
		"PASS", "",
	}, "\n")
	for _, env := range [][]string{
		nil,
		// rdma-core's honours SYSFS_PATH, trailing slashes dropped.
		{"SYSFS_PATH=/tmp/sysfs//", "DVSTUBS_SYSFS=/tmp/sysfs"},
	} {
		cmd := exec.Command(filepath.Join(lib, "dvstubs"), "rnicB")
		cmd.Env = append(append(os.Environ(), "LD_LIBRARY_PATH="+lib), env...)
		if out := runOut(t, cmd); out != want {
			t.Errorf("dvstubs with %v printed\n%s\nwant\n%s", env, out, want)
		}
	}
}

// TestCLibWorldLoads runs Debian's ucx_info and fi_info on the C
// library: UCX's verbs plugin (libuct_ib, which needs 22 mlx5dv symbols
// of versions MLX5_1.1 to MLX5_1.11) loads, which ucx_info shows by
// listing rdmacm, the connection manager that plugin carries; libfabric
// (which needs EFA_1.2) loads and its verbs provider lists both devices.
func TestCLibWorldLoads(t *testing.T) {
	newToolBench(t)
	ucxInfo := debianTool(t, "ucx_info", "ucx-utils")
	fiInfo := debianTool(t, "fi_info", "libfabric-bin")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if out := runOut(t, ucxInfo(ctx, "", "-d")); !strings.Contains(out, "# Connection manager: rdmacm\n") {
		t.Errorf("ucx_info -d lists no rdmacm connection manager: libuct_ib did not load\n%s", out)
	}
	out := runOut(t, fiInfo(ctx, "", "-p", "verbs"))
	for _, dev := range []string{"rnicA", "rnicB"} {
		if !strings.Contains(out, "provider: verbs\n") || !strings.Contains(out, "    domain: "+dev+"-dgram\n") {
			t.Errorf("fi_info -p verbs lists no datagram domain of %s:\n%s", dev, out)
		}
	}
}

// TestCLibCQEvents runs clib/test/cqevents: on a completion channel
// whose fd the program made non-blocking (UCX does), ibv_get_cq_event
// fails with EAGAIN when no event waits, the fd is readable exactly while
// one does, and one arm gives one event; a UD receive carries what rxe
// and a ConnectX report; on a blocking channel a SIGALRM without
// SA_RESTART ends the wait with EINTR and one with SA_RESTART does not,
// as libibverbs' read of its event file (qperf's timed tests hung for
// ever before); QPs of 0 send or 0 receive WRs are made (qperf asks for
// them) and refuse posts with ENOMEM.
func TestCLibCQEvents(t *testing.T) {
	newToolBench(t)
	lib := clibDir(t)
	cmd := exec.Command(filepath.Join(lib, "cqevents"), "rnicA")
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+lib)
	want := strings.Join([]string{
		"the channel fd starts blocking: ok",
		"no event: ibv_get_cq_event fails with EAGAIN: ok",
		"no event: the fd is not readable: ok",
		"a completion: the fd is readable: ok",
		"a completion: ibv_get_cq_event returns its CQ: ok",
		"both completions polled: ok",
		"UD receive: GRH flag, sl 2 (IPv4), byte_len, src_qp: ok",
		"UD receive: IPv4 header at byte 20, addresses, payload at 40: ok",
		"event taken: ibv_get_cq_event fails with EAGAIN: ok",
		"event taken: the fd is not readable: ok",
		"blocking, a signal without SA_RESTART: EINTR: ok",
		"blocking, a signal with SA_RESTART: the wait goes on to the event: ok",
		"QPs of 0 receive WRs and of 0 send WRs: created: ok",
		"QPs of 0 WRs: ibv_query_qp reports 0: ok",
		"QPs of 0 WRs: posting fails with ENOMEM: ok",
		"PASS", "",
	}, "\n")
	if out := runOut(t, cmd); out != want {
		t.Errorf("cqevents printed\n%s\nwant\n%s", out, want)
	}
}

// TestCLibSendLatEvents runs Debian's ib_send_lat -e 50 times in a row
// between two rnicd, each run bounded (pairRun's minute). Its loop waits
// for "the receive" and then "the send" on one channel shared by both
// CQs and polls each CQ once per event, so it works only if the ACK of
// each message completes at the sender before the reply to it does: a
// reply that overtook the ACK left both ends asleep in ibv_get_cq_event
// (9 runs of 25 hung before the responder sent a pending or unsent ACK
// ahead of its own next request).
func TestCLibSendLatEvents(t *testing.T) {
	tb := newToolBench(t)
	real := debianTool(t, "ib_send_lat", "perftest")
	gidA, gidB := perftestGID(tb.a.addr), perftestGID(tb.b.addr)
	const iters = "100"
	for i := 0; i < 50; i++ {
		srv, cli := tb.pairRun(t, real, real, "rnicA", "rnicB", "ib_send_lat", "-e", "-n", iters, "-s", "64")
		checkPerftest(t, "client", cli, "rnicB", gidB, gidA, "64", iters)
		checkPerftest(t, "server", srv, "rnicA", gidA, gidB, "64", iters)
		if t.Failed() {
			t.Fatalf("run %d of 50", i+1)
		}
	}
}

// TestCLibUCX: UCX 1.13 lists a verbs device only if
// /dev/infiniband/<dev_name> is a character device the program may read
// and write; rnicd makes that node (the null device's number, the control
// socket's owner and mode) and removes it when it stops. ucx_info -d then
// lists the device with rc_verbs and ud_verbs, and Debian's ucx_perftest
// runs between two rnicd: UCT's am_lat and UCP's tag_lat, tag_bw,
// ucp_put_bw and ucp_get, over rc_verbs (with ud_verbs, which UCP's
// wireup of an RC lane needs) and over ud_verbs alone.
// UCT's perftest gives the server the client's device name, so the two
// daemons share one name, each in a directory of its own.
func TestCLibUCX(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("making /dev/infiniband nodes needs root (CAP_MKNOD)")
	}
	ucxInfo := debianTool(t, "ucx_info", "ucx-utils")
	perf := debianTool(t, "ucx_perftest", "ucx-utils")
	// A name no other test's daemon has: the node is one for the host.
	name := fmt.Sprintf("ux%06x", time.Now().UnixNano()&0xffffff)
	node := "/dev/infiniband/rnicd-" + name
	dirA, dirB := t.TempDir(), t.TempDir()
	a, err := startDaemon(dirA, name, ownAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	b, err := startDaemon(dirB, name, ownAddr(t))
	if err != nil {
		a.stop()
		t.Fatal(err)
	}
	defer func() {
		for _, d := range []*daemon{b, a} {
			if err := d.stop(); err != nil {
				t.Errorf("%v\n%s", err, d.errb.String())
			}
		}
		if _, err := os.Lstat(node); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s after both daemons stopped: %v", node, err)
		}
	}()
	var st unix.Stat_t
	if err := unix.Stat(node, &st); err != nil {
		t.Fatal(err)
	}
	if st.Mode != unix.S_IFCHR|0o600 || unix.Major(st.Rdev) != 1 || unix.Minor(st.Rdev) != 3 || st.Uid != 0 {
		t.Errorf("%s: mode %#o, device %d:%d, uid %d; want a 0600 character device 1:3 of root's",
			node, st.Mode, unix.Major(st.Rdev), unix.Minor(st.Rdev), st.Uid)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	env := func(cmd *exec.Cmd, dir string) *exec.Cmd {
		cmd.Env = append(cmd.Env, "RNICD_DIR="+dir, "UCX_NET_DEVICES="+name+":1", "UCX_TLS=rc_verbs")
		return cmd
	}
	out := runOut(t, env(ucxInfo(ctx, "", "-d"), dirA))
	for _, tl := range []string{"rc_verbs", "ud_verbs"} {
		if !strings.Contains(out, "#      Transport: "+tl+"\n#         Device: "+name+":1\n") {
			t.Errorf("ucx_info -d lists no %s on %s:1:\n%s", tl, name, out)
		}
	}

	// UCT's active messages on the transport alone; UCP's tagged
	// messages, PUTs and GETs on rc_verbs with ud_verbs for the wireup
	// (whose datagrams UCX 1.13 takes only with the completion's sl
	// saying IPv4), and on ud_verbs alone, where UCP emulates RMA over
	// active messages.
	type run struct{ tls, uct, test string }
	var runs []run
	for _, tr := range []struct{ tls, uct string }{{"rc_verbs,ud_verbs", "rc_verbs"}, {"ud_verbs", "ud_verbs"}} {
		for _, test := range []string{"am_lat", "tag_lat", "tag_bw", "ucp_put_bw", "ucp_get"} {
			runs = append(runs, run{tr.tls, tr.uct, test})
		}
	}
	for _, c := range runs {
		args := []string{"-t", c.test, "-n", "1000"}
		if c.test == "am_lat" {
			args = append(args, "-d", name+":1", "-x", c.uct)
		}
		cli := ucxPerftest(ctx, t, perf, perf, dirA, dirB, "UCX_NET_DEVICES="+name+":1", "UCX_TLS="+c.tls, "UCX_NET_DEVICES="+name+":1", "UCX_TLS="+c.tls, args...)
		if !regexp.MustCompile(`(?m)^Final:\s+1000\s`).MatchString(cli) {
			t.Errorf("ucx_perftest %v printed no Final line of 1000 iterations:\n%s", args, cli)
		}
		t.Logf("UCX_TLS=%s ucx_perftest %v:\n%s", c.tls, args, cli)
	}
}

// ucxPerftest runs ucx_perftest's server (srvPerf) on the rnicd of
// dirA with env1 and env2 and its client (cliPerf) with args on dirB's
// with cenv1 and cenv2, and returns what the client printed once both
// exited 0.
func ucxPerftest(ctx context.Context, t *testing.T, srvPerf, cliPerf runner, dirA, dirB, env1, env2, cenv1, cenv2 string, args ...string) string {
	t.Helper()
	env := func(cmd *exec.Cmd, dir, e1, e2 string) *exec.Cmd {
		cmd.Env = append(cmd.Env, "RNICD_DIR="+dir, e1, e2)
		return cmd
	}
	port := freePort(t)
	srv := env(srvPerf(ctx, "", "-p", port), dirA, env1, env2)
	var sout bytes.Buffer
	srv.Stdout, srv.Stderr = &sout, &sout
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	for {
		c := env(cliPerf(ctx, "", append([]string{"127.0.0.1", "-p", port}, args...)...), dirB, cenv1, cenv2)
		o, err := c.CombinedOutput()
		if err == nil || ctx.Err() != nil || !strings.Contains(string(o), "Connection refused") {
			if err != nil {
				srv.Process.Kill()
				srv.Wait()
				t.Fatalf("ucx_perftest client %v: %v\n%s\nserver:\n%s", args, err, o, sout.String())
			}
			if err := srv.Wait(); err != nil {
				t.Fatalf("ucx_perftest server: %v\n%s", err, sout.String())
			}
			return string(o)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestCLibAsyncWatch runs Debian's ibv_asyncwatch on an rnicd that is
// then SIGKILLed: it reports DEVICE_FATAL once, and its next
// ibv_get_async_event fails (EIO, as the kernel's async event file of a
// device that is gone), which ends it with status 1. It printed the event
// 209,500 times a second before.
func TestCLibAsyncWatch(t *testing.T) {
	watch := debianTool(t, "ibv_asyncwatch", "ibverbs-utils")
	dir := t.TempDir()
	d, err := startDaemon(dir, "rnicW", ownAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	defer d.cmd.Process.Kill()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := watch(ctx, "", "-d", "rnicW")
	cmd.Env = append(cmd.Env, "RNICD_DIR="+dir)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(stdout)
	first, err := r.ReadString('\n')
	if err != nil || !strings.HasPrefix(first, "rnicW: async event FD ") {
		cmd.Process.Kill()
		t.Fatalf("ibv_asyncwatch began with %q, %v", first, err)
	}
	d.cmd.Process.Signal(syscall.SIGKILL)
	<-d.done
	rest, _ := io.ReadAll(r)
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || string(rest) != "  event_type IBV_EVENT_DEVICE_FATAL (8), port 0\n" {
		t.Fatalf("ibv_asyncwatch after its daemon was killed: %v, printed\n%q", err, rest)
	}
}

// TestCLibUCXDefault runs Debian's ucx_perftest between two rnicd with
// UCX's default transport selection (no UCX_TLS; UCX_NET_DEVICES names
// each side's device), as between two hosts: the client and its rnicd
// in an IPC namespace of their own, so that UCX finds no shared memory
// between the two processes and puts every lane on the verbs devices.
// UCX allocates the buffers it registers from System V shared memory,
// which clib registers in place and the daemon attaches
// (hostif/shm.go); clib refused it before, and every test failed
// with "Out of memory". The client's rnicd's counters show the traffic.
func TestCLibUCXDefault(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("making /dev/infiniband nodes and IPC namespaces needs root")
	}
	perf := debianTool(t, "ucx_perftest", "ucx-utils")
	debtest.Ensure(t, "unshare", "util-linux")
	debtest.Ensure(t, "nsenter", "util-linux")
	p := startApart(t, "ud", []string{"unshare", "--ipc", "--"})
	dirA, dirB, nameA, nameB, cb := p.dirA, p.dirB, p.nameA, p.nameB, p.cb
	ipcB := fmt.Sprintf("--ipc=/proc/%d/ns/ipc", p.b.cmd.Process.Pid)
	// The client runs in b's IPC namespace.
	cli := func(ctx context.Context, tool string, args ...string) *exec.Cmd {
		c := perf(ctx, tool, args...)
		w := exec.CommandContext(ctx, "nsenter", append([]string{ipcB, "--", c.Path}, c.Args[1:]...)...)
		w.Env = c.Env
		return w
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	for _, test := range []string{"tag_lat", "tag_bw", "ucp_put_bw", "ucp_get"} {
		before := must[map[string]uint64](t)(cb.Counters())
		// UCX_TLS=all is UCX's default (ucx_info -c), set only so that
		// no UCX_TLS of this process's environment applies.
		out := ucxPerftest(ctx, t, perf, cli, dirA, dirB, "UCX_NET_DEVICES="+nameA+":1", "UCX_TLS=all",
			"UCX_NET_DEVICES="+nameB+":1", "UCX_TLS=all", "-t", test, "-n", "1000")
		if !regexp.MustCompile(`(?m)^Final:\s+1000\s`).MatchString(out) {
			t.Errorf("ucx_perftest -t %s printed no Final line of 1000 iterations:\n%s", test, out)
		}
		after := must[map[string]uint64](t)(cb.Counters())
		// 1000 messages, PUTs or GETs, each at least a packet from the
		// client's rnicd (the bandwidth tests' replies may be few).
		if got := after["sent_pkts"] - before["sent_pkts"]; got < 1000 {
			t.Errorf("ucx_perftest -t %s: the client's rnicd sent %d packets, want at least 1000", test, got)
		}
		if got := after["rcvd_pkts"] - before["rcvd_pkts"]; got == 0 {
			t.Errorf("ucx_perftest -t %s: the client's rnicd received no packet", test)
		}
		t.Logf("ucx_perftest -t %s, UCX's default transports:\n%s", test, out)
	}
}
