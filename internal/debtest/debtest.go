// Package debtest finds a program a test needs and, when it is missing,
// installs it from Debian's packages with apt-get, as the project's rules
// ask of tests that drive tshark or Chromium.
package debtest

import (
	"os"
	"os/exec"
	"sync"
	"testing"
)

var mu sync.Mutex // one apt-get at a time within a test binary

// Ensure returns the path of program bin, installing Debian package pkg
// first if bin is not on PATH. It skips the test only when the program
// cannot be had (no apt-get, not root, no package source), and fails it
// instead when RNICD_REQUIRE_TOOLS is set, as CI sets it: there a missing
// tool is a broken set-up, not a reason to test less.
func Ensure(t testing.TB, bin, pkg string) string {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	if p, err := exec.LookPath(bin); err == nil {
		return p
	}
	if _, err := exec.LookPath("apt-get"); err != nil || os.Geteuid() != 0 {
		skip(t, "%s is not installed and apt-get cannot install %s here", bin, pkg)
	}
	env := append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	for _, args := range [][]string{{"update", "-q"}, {"install", "-y", "-q", pkg}} {
		cmd := exec.Command("apt-get", args...)
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Logf("apt-get %v: %v\n%s", args, err, out)
		}
	}
	p, err := exec.LookPath(bin)
	if err != nil {
		skip(t, "%s is not installed and apt-get could not install %s", bin, pkg)
	}
	return p
}

func skip(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("RNICD_REQUIRE_TOOLS") != "" {
		t.Fatalf(format+" (RNICD_REQUIRE_TOOLS is set)", args...)
	}
	t.Skipf(format, args...)
}
