// Package tests holds end-to-end tests that run the built programs.
package tests

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rnicd/rnicd/internal/looptest"
)

// TestDaemonStartStop builds rnicd, starts it on a loopback address, checks
// what it reports about its port, and stops it with SIGTERM.
func TestDaemonStartStop(t *testing.T) {
	dir := t.TempDir()
	ip := looptest.Get(t)
	addr := ip.String()
	// A socket left by a daemon that died: the new one removes it.
	stale, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: filepath.Join(dir, "rnic0.sock"), Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	stale.SetUnlinkOnClose(false)
	stale.Close()
	cmd := exec.Command(filepath.Join(binDir, "rnicd"), "-addr", addr, "-mtu", "1024")
	cmd.Env = append(os.Environ(), "RNICD_DIR="+dir)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(stderr)
	next := func(msg string) string { // the next log line with msg, or ""
		for lines.Scan() {
			if strings.Contains(lines.Text(), " msg="+msg+" ") || strings.HasSuffix(lines.Text(), " msg="+msg) {
				return lines.Text()
			}
		}
		return ""
	}
	up := next(`"device up"`)
	if up == "" {
		t.Fatalf("no ready line from rnicd: %v", cmd.Wait())
	}
	// The GID is the IPv4-mapped IPv6 address (IBTA A17.4.5.1), written
	// out here byte by byte rather than by the code under test.
	v4 := ip.As4()
	want := fmt.Sprintf(" addr=%s mode=udp gid=0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x active_mtu=1024 socket=%s ",
		addr, v4[0], v4[1], v4[2], v4[3], filepath.Join(dir, "rnic0.sock"))
	if !strings.Contains(up, want) || !strings.HasPrefix(up, "time=") || !strings.Contains(up, " level=INFO msg=\"device up\" name=rnic0") {
		t.Fatalf("rnicd said %q, want it to hold %q", up, want)
	}
	if _, err := os.Stat(filepath.Join(dir, "rnic0.sock")); err != nil {
		t.Fatalf("no control socket: %v", err)
	}
	// A second daemon for the same device refuses to start.
	second := exec.Command(filepath.Join(binDir, "rnicd"), "-addr", ownAddr(t))
	second.Env = cmd.Env
	if out, err := second.CombinedOutput(); err == nil || !strings.Contains(string(out), "another rnicd serves this device") {
		t.Fatalf("second rnicd: %v: %s", err, out)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if c := next("counters"); c == "" {
		t.Fatalf("no counters line at exit: %q", c)
	}
	go io.Copy(io.Discard, stderr)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("rnicd exited with %v", err)
		}
		if _, err := os.Stat(filepath.Join(dir, "rnic0.sock")); !os.IsNotExist(err) {
			t.Fatalf("socket left behind: %v", err)
		}
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		t.Fatal("rnicd did not stop on SIGTERM")
	}
}
