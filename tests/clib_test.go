package tests

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/rnicd/rnicd/internal/debtool"
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
	debtool.Ensure(t, "make", "make")
	debtool.Ensure(t, "gcc", "gcc")
	if _, err := os.Stat("/usr/include/infiniband/verbs.h"); err != nil {
		msg := "no <infiniband/verbs.h>: apt-get install libibverbs-dev to build the C library"
		if os.Getenv("RNICD_REQUIRE_TOOLS") != "" {
			t.Fatal(msg + " (RNICD_REQUIRE_TOOLS is set)")
		}
		t.Skip(msg)
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
	bin := debtool.Ensure(t, tool, pkg)
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
	newToolBench(t)
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
	if len(one) != 1 || !strings.Contains(one["rnicB"], "\tnode_guid:\t\t\t0200:0000:7f00:0002\n") {
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
			checkPingpongOutput(t, 1, tc.size, tc.flags, srv, cli)
		})
	}
}
