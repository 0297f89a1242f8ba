package tests

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rnicd/rnicd/internal/debtest"
)

// namedNetns makes the network namespace rnicd-KIND-PID with ip netns
// add (so that `ip netns exec` and /run/netns/NAME reach it), deletes it
// when the test ends, and returns its name and a runner of `ip -n NAME
// ARGS...` that ends the test if ip fails.
func namedNetns(t *testing.T, kind string) (string, func(args ...string)) {
	t.Helper()
	ipCmd := debtest.Ensure(t, "ip", "iproute2")
	ns := fmt.Sprintf("rnicd-%s-%d", kind, os.Getpid())
	if out, err := exec.Command(ipCmd, "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v\n%s", ns, err, out)
	}
	t.Cleanup(func() { exec.Command(ipCmd, "netns", "del", ns).Run() })
	return ns, func(args ...string) {
		t.Helper()
		if out, err := exec.Command(ipCmd, append([]string{"-n", ns}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("ip -n %s %v: %v\n%s", ns, args, err, out)
		}
	}
}

// TestNetnsEachItsOwnDevices runs `rnicd -d rnic0` in two network
// namespaces at once (ip netns add, as an operator or a container
// runtime makes them), with no RNICD_DIR: both start, and in each
// namespace `rnic ibv_devices` and Debian's ibv_devices (on the C library)
// list only that namespace's daemon, by its GUID, which comes from its
// address (127.0.0.1 in one, 127.0.0.2 in the other).
func TestNetnsEachItsOwnDevices(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipped: needs root to make network namespaces; CI runs as root")
	}
	ipCmd := debtest.Ensure(t, "ip", "iproute2")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	type ns struct {
		name, addr, guid string
		dir              string // its socket directory, found from the daemon's ready line
	}
	spaces := []*ns{
		{name: fmt.Sprintf("rnicd-op-%d-a", os.Getpid()), addr: "127.0.0.1", guid: "0200:0000:7f00:0001"},
		{name: fmt.Sprintf("rnicd-op-%d-b", os.Getpid()), addr: "127.0.0.2", guid: "0200:0000:7f00:0002"},
	}
	env := []string{"PATH=" + binDir + ":" + os.Getenv("PATH")}
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "RNICD_DIR=") && !strings.HasPrefix(e, "PATH=") {
			env = append(env, e)
		}
	}
	in := func(n *ns, prog string, args ...string) *exec.Cmd {
		c := exec.CommandContext(ctx, ipCmd, append([]string{"netns", "exec", n.name, prog}, args...)...)
		c.Env = env
		return c
	}
	for _, n := range spaces {
		if out, err := exec.Command(ipCmd, "netns", "add", n.name).CombinedOutput(); err != nil {
			t.Fatalf("ip netns add %s: %v\n%s", n.name, err, out)
		}
		defer exec.Command(ipCmd, "netns", "del", n.name).Run()
		if out, err := in(n, ipCmd, "addr", "add", "127.0.0.2/8", "dev", "lo").CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", n.name, err, out)
		}
		if out, err := in(n, ipCmd, "link", "set", "lo", "up").CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", n.name, err, out)
		}
	}
	for _, n := range spaces {
		d := in(n, filepath.Join(binDir, "rnicd"), "-d", "rnic0", "-addr", n.addr)
		var logb lockedBuf
		d.Stdout = &logb
		stderr, err := d.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		defer func() {
			d.Process.Signal(syscall.SIGTERM)
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("rnicd in %s: %v\n%s", n.name, err, logb.String())
				}
			case <-time.After(20 * time.Second):
				d.Process.Kill()
				t.Errorf("rnicd in %s did not stop", n.name)
			}
			os.Remove(n.dir) // the namespace's directory, empty once its daemon is gone
		}()
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			logb.Write(append(sc.Bytes(), '\n'))
			if l := sc.Text(); strings.Contains(l, `msg="device up"`) {
				_, sock, _ := strings.Cut(l, " socket=")
				sock, _, _ = strings.Cut(sock, " ")
				n.dir = filepath.Dir(sock)
				break
			}
		}
		go func() {
			for sc.Scan() {
				logb.Write(append(sc.Bytes(), '\n'))
			}
			done <- d.Wait()
		}()
		if n.dir == "" {
			t.Fatalf("rnicd -d rnic0 in %s did not come up:\n%s", n.name, logb.String())
		}
		// ip netns exec is a new mount namespace, not a new /run: the
		// namespace's inode is what keeps the two apart.
		if !strings.HasPrefix(filepath.Base(n.dir), "net-") || filepath.Dir(n.dir) != "/run/rnicd" {
			t.Fatalf("rnicd in %s serves in %s, want /run/rnicd/net-INODE", n.name, n.dir)
		}
		t.Logf("%s: rnicd -d rnic0 on %s serves in %s", n.name, n.addr, n.dir)
	}
	if spaces[0].dir == spaces[1].dir {
		t.Fatalf("both namespaces' daemons serve in %s", spaces[0].dir)
	}
	var clib string
	if _, err := os.Stat("/usr/bin/ibv_devices"); err == nil {
		clib = clibDir(t)
	}
	for _, n := range spaces {
		out, err := in(n, filepath.Join(binDir, "rnic"), "ibv_devices").CombinedOutput()
		want := fmt.Sprintf("    device          \t   node GUID\n    ------          \t----------------\n    rnic0           \t%s\n", strings.ReplaceAll(n.guid, ":", ""))
		if err != nil || string(out) != want {
			t.Errorf("rnic ibv_devices in %s: %v\n%q\nwant\n%q", n.name, err, out, want)
		}
		if clib == "" {
			continue
		}
		c := in(n, "/usr/bin/ibv_devices")
		c.Env = append(c.Env, "LD_LIBRARY_PATH="+clib)
		cout, err := c.CombinedOutput()
		if err != nil || string(cout) != string(out) {
			t.Errorf("Debian's ibv_devices in %s: %v\n%q\nwant rnic's\n%q", n.name, err, cout, out)
		}
	}
}
