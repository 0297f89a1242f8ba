package tests

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"github.com/rnicd/rnicd/internal/debtest"
	"github.com/rnicd/rnicd/rdmacm"
)

// TestCMRouteUnbound: an rdma_cm ID resolved with no source address
// leaves from the rnicd that holds the address the kernel would send
// from, as Linux's rdma_cm picks the device (addr4_resolve's route, then
// the device holding its source). A namespace of the test's own has a
// veth with 198.18.12.1/24 (its primary address) and 198.18.12.3/24,
// an rnicd on each; to 198.18.12.2 the kernel sends from .1, though .3
// shares more of its bits with .2 (the closest-prefix guess took .3).
// To .3 itself the ID takes .3's rnicd (a loopback route). Both the C
// library (clib/test/cmroute) and the Go rdmacm package.
func TestCMRouteUnbound(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipped: needs root to make a network namespace; CI runs as root")
	}
	lib := clibDir(t)
	ipCmd := debtest.Ensure(t, "ip", "iproute2")
	ns, ip := namedNetns(t, "route")
	ip("link", "add", "rnr0", "type", "veth", "peer", "name", "rnr1")
	ip("addr", "add", "198.18.12.1/24", "dev", "rnr0")
	ip("addr", "add", "198.18.12.3/24", "dev", "rnr0")
	ip("link", "set", "lo", "up")
	ip("link", "set", "rnr1", "up")
	ip("link", "set", "rnr0", "up")
	if out, err := exec.Command(ipCmd, "-n", ns, "route", "get", "198.18.12.2").CombinedOutput(); err != nil || !strings.Contains(string(out), " src 198.18.12.1 ") {
		t.Fatalf("ip route get 198.18.12.2 in the namespace: %v\n%s; want src 198.18.12.1", err, out)
	}
	dir := t.TempDir()
	for _, d := range []struct{ name, addr string }{{"rnicR1", "198.18.12.1"}, {"rnicR3", "198.18.12.3"}} {
		dm, err := startDaemonIn("/run/netns/"+ns, dir, d.name, d.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := dm.stop(); err != nil {
				t.Errorf("%v\n%s", err, dm.errb.String())
			}
		}()
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	want := map[string]string{"198.18.12.2": "rnicR1 198.18.12.1", "198.18.12.3": "rnicR3 198.18.12.3"}
	for dst, w := range want {
		cmd := exec.CommandContext(ctx, ipCmd, "netns", "exec", ns, filepath.Join(lib, "cmroute"), dst)
		cmd.Env = append(os.Environ(), "RNICD_DIR="+dir, "LD_LIBRARY_PATH="+lib)
		if got := strings.TrimSpace(runOut(t, cmd)); got != w {
			t.Errorf("C: cmroute %s printed %q, want %q", dst, got, w)
		}
	}

	h, err := netns.GetFromName(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	t.Setenv("RNICD_DIR", dir)
	err = inNetns(h, func() error {
		ch, err := rdmacm.CreateEventChannel()
		if err != nil {
			return err
		}
		defer ch.Destroy()
		for dst, w := range want {
			id := ch.CreateID()
			if err := id.ResolveAddr(netip.Addr{}, netip.AddrPortFrom(netip.MustParseAddr(dst), 7471)); err != nil {
				return fmt.Errorf("resolve %s: %w", dst, err)
			}
			got := id.Verbs.Name() + " " + id.LocalAddr().Addr().String()
			id.Destroy()
			if got != w {
				t.Errorf("Go: an unbound ID resolved to %s leaves from %q, want %q", dst, got, w)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
