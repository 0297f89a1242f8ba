package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/rnicd/rnicd/internal/looptest"
	"github.com/rnicd/rnicd/wire/ibudp"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

func TestFlags(t *testing.T) {
	t.Setenv("RNICD_DIR", t.TempDir())
	for _, tc := range []struct {
		args []string
		err  string
	}{
		{[]string{"-addr", "127.0.0.1", "-d", "../etc"}, "plain device name"},
		{[]string{"-addr", "127.0.0.1", "-d", ""}, "plain device name"},
		{[]string{"-addr", "nonsense"}, "-addr"},
		{[]string{"-addr", "127.0.0.1", "-mode", "raw"}, "-mode"},
		{[]string{"-addr", "127.0.0.1", "extra"}, "unexpected arguments"},
		{[]string{"-addr", "127.0.0.1", "-mtu", "1000"}, "MTU 1000"},
		{[]string{"-addr", "127.0.0.1", "-window", "-1"}, "-window -1"},
		{[]string{"-addr", "127.0.0.1", "-retry7", "7"}, `-retry7 "7": want seven or forever`},
		{[]string{"-addr", "127.0.0.1", "-ack-hold", "-1us"}, "-ack-hold -1"},
		{[]string{"-addr", "127.0.0.1", "-ack-hold", "2s"}, "-ack-hold 2s"},
		{[]string{"-addr", "127.0.0.1", "-pcap-size", "100000"}, "-pcap-size without -pcap"},
		{[]string{"-addr", "127.0.0.1", "-pcap-files", "3"}, "-pcap-files without -pcap"},
		{[]string{"-addr", "127.0.0.1", "-trace-size", "1M"}, "-trace-size without -trace"},
		{[]string{"-addr", "127.0.0.1", "-trace-files", "3"}, "-trace-files without -trace"},
		{[]string{"-addr", "127.0.0.1", "-pcap", "x.pcap", "-pcap-size", "-5"}, `"-5": want bytes`},
		{[]string{"-addr", "127.0.0.1", "-pcap", "x.pcap", "-pcap-size", "2X"}, `"2X": want bytes`},
		{[]string{"-addr", "127.0.0.1", "-pcap", "x.pcap", "-pcap-size", "1000"}, "-pcap-size 1000: want 0 (unbounded) or at least 8192"},
		{[]string{"-addr", "127.0.0.1", "-trace", "x.json", "-trace-files", "-1"}, "-trace-files -1"},
		{[]string{"-addr", "127.0.0.1", "-trace-qp", "0x11"}, "-trace-qp without -trace"},
		{[]string{"-addr", "127.0.0.1", "-trace-packets"}, "-trace-packets without -trace"},
		{[]string{"-addr", "127.0.0.1", "-trace", "x.json", "-trace-qp", "0"}, `-trace-qp "0": want a QPN, 1 to 0xffffff`},
		{[]string{"-addr", "127.0.0.1", "-trace", "x.json", "-trace-qp", "0x1000000"}, `-trace-qp "0x1000000"`},
		{[]string{"-addr", "127.0.0.1", "-trace", "x.json", "-trace-qp", "qp7"}, `-trace-qp "qp7"`},
		{[]string{"-addr", "127.0.0.1", "-pcap-snap", "128"}, "-pcap-snap without -pcap"},
		{[]string{"-addr", "127.0.0.1", "-pcap", "x.pcap", "-pcap-snap", "-1"}, "-pcap-snap -1: want 0 (whole frames) to 65535"},
		{[]string{"-addr", "127.0.0.1", "-pcap", "x.pcap", "-pcap-snap", "70000"}, "-pcap-snap 70000"},
		{[]string{"-addr", "127.0.0.1", "-engines", "0"}, "-engines 0: want 1 to 256"},
		{[]string{"-addr", "127.0.0.1", "-engines", "257"}, "-engines 257: want 1 to 256"},
		{[]string{"-addr", "127.0.0.1", "-engines", "2", "-poll-idle", "0"}, "-engines 2 needs the polling engine"},
		{[]string{"-addr", "127.0.0.1", "-engines", "2", "-mode", "packet"}, "-engines 2: several engines steer by QPN on a UDP port"},
	} {
		var out, errw bytes.Buffer
		err := run(tc.args, &out, &errw)
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("run %q: error %v, want one mentioning %q", tc.args, err, tc.err)
		}
	}
}

// TestFileLimitFlags checks the bounds --trace and --pcap get: 10 files of
// 100 MiB by default (under 1 GiB), what -pcap-size always took (plain
// bytes) and sizes with a suffix.
func TestFileLimitFlags(t *testing.T) {
	t.Setenv("RNICD_DIR", t.TempDir())
	var errw bytes.Buffer
	c, err := parseFlags([]string{"-addr", "127.0.0.1", "-trace", "t.json", "-pcap", "p.pcap"}, &errw, &errw)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []fileLimit{c.traceLim, c.pcapLim} {
		if l.size != 100<<20 || l.files != 10 || l.bound() > 1<<30 || l.String() != "10 files of 100M" {
			t.Fatalf("default limit %+v (%v), want 10 files of 100 MiB, under 1 GiB", l, l)
		}
	}
	for _, tc := range []struct {
		arg  string
		want int64
	}{{"100000000", 100000000}, {"64K", 64 << 10}, {"64KiB", 64 << 10}, {"100M", 100 << 20}, {"2G", 2 << 30}, {"0", 0}} {
		c, err := parseFlags([]string{"-addr", "127.0.0.1", "-pcap", "p", "-pcap-size", tc.arg, "-pcap-files", "0"}, &errw, &errw)
		if err != nil || int64(c.pcapLim.size) != tc.want || c.pcapLim.files != 0 || c.pcapLim.bound() != 0 {
			t.Errorf("-pcap-size %s -pcap-files 0: %+v, %v; want %d bytes, unbounded", tc.arg, c.pcapLim, err, tc.want)
		}
	}
}

// TestRetry7Flag: retry_cnt 7 is IBTA's seven retries unless -retry7
// forever asks for rxe's reading.
func TestRetry7Flag(t *testing.T) {
	t.Setenv("RNICD_DIR", t.TempDir())
	var errw bytes.Buffer
	for _, tc := range []struct {
		args []string
		want bool
	}{{nil, false}, {[]string{"-retry7", "seven"}, false}, {[]string{"-retry7", "forever"}, true}} {
		c, err := parseFlags(append([]string{"-addr", "127.0.0.1"}, tc.args...), &errw, &errw)
		if err != nil || c.retry7 != tc.want {
			t.Errorf("%q: retry7 %v, %v; want %v", tc.args, c.retry7, err, tc.want)
		}
	}
}

// TestVersionAndLogFlags: -version prints the version and the build and
// exits as -h does; -log-format and -log-level take what slog has and
// refuse the rest; -log-format json makes every line a JSON object, the
// failed start's last line too.
func TestVersionAndLogFlags(t *testing.T) {
	t.Setenv("RNICD_DIR", t.TempDir())
	var out, errw bytes.Buffer
	if err := run([]string{"-version"}, &out, &errw); !errors.Is(err, flag.ErrHelp) ||
		!strings.HasPrefix(out.String(), "rnicd 0.9.0 (") || !strings.Contains(out.String(), ") go1.") {
		t.Fatalf("-version: %v, %q", err, out.String())
	}
	for _, tc := range []struct {
		args []string
		err  string
	}{
		{[]string{"-log-format", "xml"}, `-log-format "xml": want text or json`},
		{[]string{"-log-level", "loud"}, `-log-level "loud": want debug, info, warn or error`},
	} {
		if err := run(append([]string{"-addr", "127.0.0.1"}, tc.args...), &out, &errw); err == nil || err.Error() != tc.err {
			t.Errorf("%q: %v, want %q", tc.args, err, tc.err)
		}
	}
	addr := looptest.Get(t).String()
	c, err := net.ListenPacket("udp4", addr+":4791")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	errw.Reset()
	err = run([]string{"-addr", addr, "-log-format", "json", "-log-level", "debug"}, &out, &errw)
	var l logged
	if !errors.As(err, &l) {
		t.Fatalf("failed start: %v, want it logged", err)
	}
	lines := strings.Split(strings.TrimSpace(errw.String()), "\n")
	for _, line := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil || rec["msg"] == nil || rec["level"] == nil {
			t.Fatalf("log line %q is not a slog JSON record: %v", line, err)
		}
	}
	var last map[string]any
	json.Unmarshal([]byte(lines[len(lines)-1]), &last)
	if last["msg"] != "exiting" || last["level"] != "ERROR" || !strings.Contains(fmt.Sprint(last["err"]), "address already in use") {
		t.Fatalf("last line %v, want the error", last)
	}
}

// TestHelp checks that -h is not an error: run says so with flag.ErrHelp,
// which main turns into exit 0, after the usage on stderr.
func TestHelp(t *testing.T) {
	var out, errw bytes.Buffer
	if err := run([]string{"-h"}, &out, &errw); !errors.Is(err, flag.ErrHelp) || !strings.Contains(errw.String(), "-pcap-files") {
		t.Fatalf("-h: %v, usage %q", err, errw.String())
	}
}

// TestPortInUseOneError starts rnicd on an address whose UDP 4791 is
// taken: the start fails with that error, said once, and no warning about
// steering repeats it (a steering warning that repeated it made every
// failed start log the real error twice).
func TestPortInUseOneError(t *testing.T) {
	t.Setenv("RNICD_DIR", t.TempDir())
	addr := looptest.Get(t).String()
	c, err := net.ListenPacket("udp4", addr+":4791")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var out, errw bytes.Buffer
	err = run([]string{"-addr", addr}, &out, &errw)
	if err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("start on a taken port: %v", err)
	}
	if strings.Count(errw.String(), "in use") != 1 || strings.Contains(errw.String(), "steering") {
		t.Fatalf("the failed start logged more than its error, once:\n%s", errw.String())
	}
}

// On a host whose only default route is IPv6, rnicd takes the global
// IPv6 address of that route's interface, not its link-local one; with an
// IPv4 default route too, the IPv4 address, as before.
func TestDefaultAddrIPv6Only(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipped: needs root to make a network namespace; CI runs as root")
	}
	run := func(f func() error) error {
		ch := make(chan error)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
			ch <- f()
		}()
		return <-ch
	}
	err := run(func() error {
		if _, err := netns.New(); err != nil {
			return err
		}
		veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "up0"}, PeerName: "up1"}
		if err := netlink.LinkAdd(veth); err != nil {
			return err
		}
		l, err := netlink.LinkByName("up0")
		if err != nil {
			return err
		}
		a6, _ := netlink.ParseAddr("2001:db8:5::7/64")
		a6.Flags = unix.IFA_F_NODAD
		if err := netlink.AddrAdd(l, a6); err != nil {
			return err
		}
		if err := netlink.LinkSetUp(l); err != nil {
			return err
		}
		gw := net.ParseIP("2001:db8:5::1")
		if err := netlink.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Gw: gw}); err != nil {
			return fmt.Errorf("IPv6 default route: %w", err)
		}
		if a, err := defaultAddr(); err != nil || a.String() != "2001:db8:5::7" {
			return fmt.Errorf("IPv6 only: %v, %v; want 2001:db8:5::7", a, err)
		}
		a4, _ := netlink.ParseAddr("198.18.5.7/24")
		if err := netlink.AddrAdd(l, a4); err != nil {
			return err
		}
		if err := netlink.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Gw: net.ParseIP("198.18.5.1")}); err != nil {
			return fmt.Errorf("IPv4 default route: %w", err)
		}
		if a, err := defaultAddr(); err != nil || a.String() != "198.18.5.7" {
			return fmt.Errorf("both: %v, %v; want 198.18.5.7", a, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestCPUProfile checks that -cpuprofile's file holds a pprof profile
// (gzip, as go tool pprof reads it) once the run stops.
func TestCPUProfile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cpu.prof")
	stop, err := startCPUProfile(path)
	if err != nil {
		t.Fatal(err)
	}
	stop()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Fatalf("profile starts %x, want gzip's 1f8b", b[:min(len(b), 2)])
	}
	if _, err := startCPUProfile(filepath.Join(path, "no", "such", "dir")); err == nil {
		t.Fatal("a profile file that cannot be created: no error")
	}
}

// -engines' default: one engine up to 4 CPUs, then one per 4 CPUs, at
// most 8; a default that -poll-idle 0 or -mode packet rules out gives
// way to one engine, where the flag given is refused (TestFlags).
func TestDefaultEngines(t *testing.T) {
	for _, tc := range []struct{ cpus, want int }{{1, 1}, {2, 1}, {4, 1}, {5, 1}, {8, 2}, {16, 4}, {32, 8}, {128, 8}} {
		if got := defaultEngines(tc.cpus); got != tc.want {
			t.Errorf("defaultEngines(%d) = %d, want %d", tc.cpus, got, tc.want)
		}
	}
	for _, tc := range []struct {
		engines  int
		set      bool
		pollIdle time.Duration
		mode     ibudp.Mode
		want     int
		err      bool
	}{
		{4, false, 0, ibudp.ModeUDP, 1, false},
		{4, false, defaultPollIdle, ibudp.ModePacket, 1, false},
		{4, false, defaultPollIdle, ibudp.ModeUDP, 4, false},
		{4, true, defaultPollIdle, ibudp.ModeUDP, 4, false},
		{4, true, 0, ibudp.ModeUDP, 0, true},
		{4, true, defaultPollIdle, ibudp.ModePacket, 0, true},
		{1, true, 0, ibudp.ModePacket, 1, false},
	} {
		got, err := fitEngines(tc.engines, tc.set, tc.pollIdle, tc.mode)
		if got != tc.want || (err != nil) != tc.err {
			t.Errorf("fitEngines(%d, set %v, %v, %v) = %d, %v; want %d (error %v)", tc.engines, tc.set, tc.pollIdle, tc.mode, got, err, tc.want, tc.err)
		}
	}
	var errw bytes.Buffer
	if c, err := parseFlags([]string{"-addr", "127.0.0.1", "-engines", "3"}, &errw, &errw); err != nil || c.engines != 3 || !c.enginesSet {
		t.Errorf("parseFlags -engines 3: %d engines (set %v), %v", c.engines, c.enginesSet, err)
	}
}
