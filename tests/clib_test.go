package tests

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/rnicd/rnicd/internal/debtest"
)

// The C library (clib/) lets Debian's own libibverbs programs run on
// rnicd: these tests build it with make, as its README says, and run
// ibverbs-utils and perftest from Debian's packages against the two
// daemons with LD_LIBRARY_PATH pointing at it.

var clibBuild struct {
	once sync.Once
	dir  string
	out  []byte
	err  error
}

// clibDir builds the library once per test binary into binDir and
// returns the directory LD_LIBRARY_PATH must name. A machine without a C
// compiler or the rdma-core headers skips, unless RNICD_REQUIRE_TOOLS
// is set (CI installs them).
func clibDir(t *testing.T) string {
	t.Helper()
	debtest.Ensure(t, "make", "make")
	debtest.Ensure(t, "gcc", "gcc")
	for _, h := range []struct{ file, pkg string }{
		{"/usr/include/infiniband/verbs.h", "libibverbs-dev"},
		{"/usr/include/rdma/rdma_cma.h", "librdmacm-dev"},
	} {
		if _, err := os.Stat(h.file); err != nil {
			msg := fmt.Sprintf("no %s: apt-get install %s to build the C library", h.file, h.pkg)
			if os.Getenv("RNICD_REQUIRE_TOOLS") != "" {
				t.Fatal(msg + " (RNICD_REQUIRE_TOOLS is set)")
			}
			t.Skip(msg)
		}
	}
	b := &clibBuild
	b.once.Do(func() {
		b.dir = filepath.Join(binDir, "clib")
		b.out, b.err = exec.Command("make", "-C", "../clib", "B="+b.dir).CombinedOutput()
	})
	if b.err != nil {
		t.Fatalf("make -C clib: %v\n%s", b.err, b.out)
	}
	return b.dir
}

// debianTool returns a runner of Debian's program tool (from package
// pkg) on the C library.
func debianTool(t *testing.T, tool, pkg string) runner {
	t.Helper()
	lib := clibDir(t)
	bin := debtest.Ensure(t, tool, pkg)
	return func(ctx context.Context, _ string, args ...string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+lib)
		return cmd
	}
}

func runOut(t *testing.T, cmd *exec.Cmd) string {
	t.Helper()
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("%v: %v\n%s%s", cmd.Args, err, out, stderr)
	}
	return string(out)
}

// TestCLibInfoTools runs Debian's ibv_devices and ibv_devinfo -v: they
// must list both daemons as rnic's clones do, and print every line of
// each device's attributes that `rnic ibv_devinfo -v` prints.
func TestCLibInfoTools(t *testing.T) {
	tb := newToolBench(t)
	devices := debianTool(t, "ibv_devices", "ibverbs-utils")
	devinfo := debianTool(t, "ibv_devinfo", "ibverbs-utils")
	ctx := context.Background()
	if got, want := runOut(t, devices(ctx, "")), rnicOutput(t, "ibv_devices"); got != want {
		t.Errorf("ibv_devices printed\n%q\nrnic ibv_devices\n%q", got, want)
	}
	real := devinfoBlocks(runOut(t, devinfo(ctx, "", "-v")))
	clone := devinfoBlocks(rnicOutput(t, "ibv_devinfo", "-v"))
	if len(real) != 2 || len(clone) != 2 {
		t.Fatalf("ibv_devinfo -v printed devices %v, rnic's %v", keys(real), keys(clone))
	}
	for name, block := range clone {
		for _, line := range strings.Split(strings.TrimSpace(block), "\n") {
			if !strings.Contains(real[name], line+"\n") {
				t.Errorf("ibv_devinfo -v printed no %q for %s:\n%s", line, name, real[name])
			}
		}
	}
	one := devinfoBlocks(runOut(t, devinfo(ctx, "", "-d", "rnicB")))
	if len(one) != 1 || !strings.Contains(one["rnicB"], "\tnode_guid:\t\t\t"+nodeGUIDColons(tb.b.addr)+"\n") {
		t.Errorf("ibv_devinfo -d rnicB printed\n%v", one)
	}
}

// TestCLibPingpong runs Debian's ibv_rc_pingpong --chk against itself
// and against rnic's clone in both roles: the payload is checked by the
// tools, the addresses and totals by checkPingpongOutput, and both
// daemons must hold nothing of the tools afterwards (pairRun).
func TestCLibPingpong(t *testing.T) {
	tb := newToolBench(t)
	real := debianTool(t, "ibv_rc_pingpong", "ibverbs-utils")
	for _, tc := range []struct {
		name     string
		srv, cli runner
		flags    []string
		size     int
	}{
		{"real-real", real, real, []string{"-s", "4096", "-n", "200", "--chk"}, 4096},
		{"real-real events", real, real, []string{"-s", "65536", "-n", "20", "--chk", "-e", "-m", "1024"}, 65536},
		{"real-rnic", real, rnicTool, []string{"-s", "3000", "-n", "50", "--chk"}, 3000},
		{"rnic-real", rnicTool, real, []string{"-s", "3000", "-n", "50", "--chk"}, 3000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, cli := tb.pairRun(t, tc.srv, tc.cli, "rnicA", "rnicB", "ibv_rc_pingpong", append([]string{"-g", "1"}, tc.flags...)...)
			tb.checkPingpongOutput(t, 1, tc.size, tc.flags, srv, cli)
		})
	}
	// The other transports, real against real and against the clones.
	for _, tc := range []struct {
		tool  string
		flags []string
		size  int
		qps   int
	}{
		{"ibv_uc_pingpong", []string{"-s", "2048", "-n", "50", "--chk"}, 2048, 1},
		{"ibv_ud_pingpong", []string{"-s", "1024", "-n", "50", "--chk"}, 1024, 1},
		{"ibv_srq_pingpong", []string{"-s", "5000", "-n", "60", "-q", "3", "--chk"}, 5000, 3},
	} {
		real := debianTool(t, tc.tool, "ibverbs-utils")
		for _, p := range []struct {
			name     string
			srv, cli runner
		}{{"real-real", real, real}, {"real-rnic", real, rnicTool}, {"rnic-real", rnicTool, real}} {
			t.Run(tc.tool+"/"+p.name, func(t *testing.T) {
				srv, cli := tb.pairRun(t, p.srv, p.cli, "rnicA", "rnicB", tc.tool, append([]string{"-g", "1"}, tc.flags...)...)
				tb.checkPingpongOutput(t, tc.qps, tc.size, tc.flags, srv, cli)
			})
		}
	}
}

// TestCLibMemoryBounds runs the C test program mrbounds: a WRITE into a
// malloc'd region lands byte for byte, a WRITE one byte past its end
// with the right rkey completes with REM_ACCESS_ERR, and the bytes
// around the region never change.
func TestCLibMemoryBounds(t *testing.T) {
	tb := newToolBench(t)
	lib := clibDir(t)
	cmd := exec.Command(filepath.Join(lib, "mrbounds"), "rnicA", "rnicB")
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+lib)
	out := runOut(t, cmd)
	want := "WRITE of 5000 bytes inside the region: success, data checked\n" +
		"WRITE one byte past the end: remote access error, guards unchanged\n" +
		"after fork: the child had its own copy, a WRITE still lands in the parent\n" +
		"ibv_wr_* API: an SGE WRITE and an inline WRITE in one batch landed\n" +
		"a buffer on the stack: the WRITE landed and the frames below it survived\n" +
		"WRITE from one byte past the source region: local protection error, nothing sent\n" +
		"ibv_close_device gave the pages of a region left registered back\nPASS\n"
	if out != want {
		t.Fatalf("mrbounds printed\n%s\nwant\n%s", out, want)
	}
	// The target's QP saw the access error; nothing else was refused.
	tb.idle(t)
}

// TestCLibMemoryBoundsShm runs mrbounds -shm: a region in System V
// shared memory (UCX's allocator) is registered in place, the daemon
// attaching the segment: a WRITE lands where a second attachment sees
// it, also after the program detached the registered one (the daemon's
// attachment keeps the segment), and one byte past the region completes
// with REM_ACCESS_ERR, the bytes around it unchanged; a shared file
// mapping, which could be truncated under the daemon, is refused.
func TestCLibMemoryBoundsShm(t *testing.T) {
	tb := newToolBench(t)
	lib := clibDir(t)
	cmd := exec.Command(filepath.Join(lib, "mrbounds"), "-shm", "rnicA", "rnicB")
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+lib)
	out := runOut(t, cmd)
	want := "shm: WRITE of 5000 bytes: success, data checked in both attachments\n" +
		"shm: detached by the program, a WRITE still lands in the segment\n" +
		"shm: WRITE one byte past the end: remote access error, guards unchanged\n" +
		"shm: a shared file mapping: EINVAL\nPASS\n"
	if out != want {
		t.Fatalf("mrbounds -shm printed\n%s\nwant\n%s", out, want)
	}
	tb.idle(t)
}

// TestCLibCompChannel runs mrbounds -events: the completion channel's
// fd is the read end of the daemon's wake pipe, blocking until the
// program sets O_NONBLOCK, after which ibv_get_cq_event says EAGAIN when
// there is no event and takes the one an armed CQ's completion makes.
func TestCLibCompChannel(t *testing.T) {
	newToolBench(t)
	lib := clibDir(t)
	cmd := exec.Command(filepath.Join(lib, "mrbounds"), "-events", "rnicA")
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+lib)
	want := "no event, O_NONBLOCK: EAGAIN\nan armed CQ's completion: the fd readable, one event, then EAGAIN\nPASS\n"
	if out := runOut(t, cmd); out != want {
		t.Fatalf("mrbounds -events printed\n%s\nwant\n%s", out, want)
	}
}

// TestCLibClientKilled: a C client holding a QP, a CQ, a PD and a
// registered malloc'd buffer is SIGKILLed; its daemon destroys them all
// (`rnic res` shows its QP before and nothing after).
func TestCLibClientKilled(t *testing.T) {
	tb := newToolBench(t)
	m := startMrbounds(t, nil, "-hold", "rnicA")
	cmd := m.cmd
	held := objects(t, tb.ca)
	for _, k := range []string{"hostif_objects_qp", "hostif_objects_cq", "hostif_objects_pd", "hostif_objects_mr"} {
		if held[k] != 1 {
			t.Errorf("with the client up, %s is %d, want 1", k, held[k])
		}
	}
	if res := rnicOutput(t, "res", "-d", "rnicA"); !strings.Contains(res, "mrbounds") {
		t.Errorf("rnic res shows no QP of mrbounds:\n%s", res)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	tb.idle(t)
	if res := rnicOutput(t, "res", "-d", "rnicA"); res != "" {
		t.Errorf("rnic res after the kill:\n%s", res)
	}
}

// TestCLibPerftest runs Debian's perftest binaries on the C library
// against themselves and against rnic's clones in both roles;
// checkPerftest reads each side's result line by value.
func TestCLibPerftest(t *testing.T) {
	tb := newToolBench(t)
	gidA, gidB := perftestGID(tb.a.addr), perftestGID(tb.b.addr)
	const iters = "100"
	cases := []struct {
		tool  string
		flags []string
		size  string
	}{
		{"ib_write_bw", []string{"-c", "RC"}, "65536"},
		{"ib_write_bw", []string{"-c", "UC"}, "4096"},
		{"ib_read_bw", []string{"-c", "RC"}, "65536"},
		{"ib_send_bw", []string{"-c", "RC"}, "65536"},
		{"ib_send_bw", []string{"-c", "UD"}, "1024"},
		{"ib_atomic_bw", []string{"-A", "FETCH_AND_ADD"}, "8"},
		{"ib_atomic_bw", []string{"-A", "CMP_AND_SWAP"}, "8"},
		{"ib_send_lat", []string{"-c", "RC"}, "1025"},
		{"ib_send_lat", []string{"-c", "UD"}, "1024"},
		{"ib_write_lat", []string{"-c", "RC"}, "4096"},
		{"ib_read_lat", []string{"-c", "RC"}, "4096"},
	}
	for _, c := range cases {
		real := debianTool(t, c.tool, "perftest")
		for _, p := range []struct {
			name     string
			srv, cli runner
		}{{"real-real", real, real}, {"real-rnic", real, rnicTool}, {"rnic-real", rnicTool, real}} {
			t.Run(fmt.Sprintf("%s/%s/%s/%s", c.tool, c.flags[1], c.size, p.name), func(t *testing.T) {
				args := append([]string{"-n", iters}, c.flags...)
				if c.tool != "ib_atomic_bw" {
					args = append(args, "-s", c.size)
				}
				srv, cli := tb.pairRun(t, p.srv, p.cli, "rnicA", "rnicB", c.tool, args...)
				checkPerftest(t, "client", cli, "rnicB", gidB, gidA, c.size, iters)
				if c.tool != "ib_read_lat" { // its server prints no result table
					checkPerftest(t, "server", srv, "rnicA", gidA, gidB, c.size, iters)
				}
			})
		}
	}
}

// TestCLibDaemonKilled: a C program spinning on an empty CQ whose rnicd
// is SIGKILLed does not spin forever: ibv_poll_cq fails and says the
// daemon hung up, as on a device's fatal error.
func TestCLibDaemonKilled(t *testing.T) {
	dir := t.TempDir()
	d, err := startDaemon(dir, "rnicK", ownAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	defer d.cmd.Process.Kill()
	m := startMrbounds(t, []string{"RNICD_DIR=" + dir}, "-spin", "rnicK")
	d.cmd.Process.Signal(syscall.SIGKILL)
	<-d.done
	rest, _ := io.ReadAll(m.out)
	if err := m.cmd.Wait(); err != nil || string(rest) != "ibv_poll_cq: -1\n" ||
		!strings.Contains(m.stderr.String(), "poll_cq: the rnicd of rnicK hung up") {
		t.Fatalf("mrbounds -spin after its daemon was killed: %v\n%s%s", err, rest, m.stderr.String())
	}
}

// mrboundsProc is a mrbounds process started in one of its waiting modes.
type mrboundsProc struct {
	cmd    *exec.Cmd
	out    *bufio.Reader // its stdout after "ready"
	stderr *strings.Builder
}

// startMrbounds starts mrbounds with args and env on the C library and
// waits for its "ready"; the test's end kills it.
func startMrbounds(t *testing.T, env []string, args ...string) *mrboundsProc {
	t.Helper()
	lib := clibDir(t)
	m := &mrboundsProc{cmd: exec.Command(filepath.Join(lib, "mrbounds"), args...), stderr: &strings.Builder{}}
	m.cmd.Env = append(append(os.Environ(), "LD_LIBRARY_PATH="+lib), env...)
	m.cmd.Stderr = m.stderr
	stdout, err := m.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := m.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.cmd.Process.Kill() })
	m.out = bufio.NewReader(stdout)
	if line, err := m.out.ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("mrbounds %v: %q, %v\n%s", args, line, err, m.stderr.String())
	}
	return m
}

// TestCLibPerftestHugepages runs Debian's ib_write_bw and ib_read_bw with
// --use_hugepages, real against real: perftest allocates its buffers as
// System V shared memory with SHM_HUGETLB, which the library registers
// in place and the daemon attaches as any System V segment (hostif/shm.go),
// in huge pages.
func TestCLibPerftestHugepages(t *testing.T) {
	requireRoot(t)
	reserveHugePages(t, 8)
	tb := newToolBench(t)
	gidA, gidB := perftestGID(tb.a.addr), perftestGID(tb.b.addr)
	const iters, size = "100", "65536"
	for _, tool := range []string{"ib_write_bw", "ib_read_bw"} {
		real := debianTool(t, tool, "perftest")
		srv, cli := tb.pairRun(t, real, real, "rnicA", "rnicB", tool, "-n", iters, "-s", size, "--use_hugepages")
		checkPerftest(t, "client", cli, "rnicB", gidB, gidA, size, iters)
		checkPerftest(t, "server", srv, "rnicA", gidA, gidB, size, iters)
	}
}
