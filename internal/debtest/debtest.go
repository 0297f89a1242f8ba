// Package debtest finds a program a test needs and, when it is missing,
// installs it from Debian's packages with apt-get, as the project's rules
// ask of tests that drive tshark or Chromium.
package debtest

import (
	"os"
	"os/exec"
	"path/filepath"
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

// EnsureUnpacked returns the path of program bin, and when bin is not on
// PATH takes it out of Debian package pkg without installing the package:
// apt-get download, dpkg-deb -x, and the one program copied to
// /usr/local/bin. It is for programs shipped inside a server's package,
// as promtool is inside prometheus, whose postinst adds a system user
// and starts the server (invoke-rc.d, wherever no policy-rc.d forbids
// it): a test wants the program, not a daemon listening on :9090. It
// skips or fails as Ensure does.
func EnsureUnpacked(t testing.TB, bin, pkg string) string {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	if p, err := exec.LookPath(bin); err == nil {
		return p
	}
	for _, tool := range []string{"apt-get", "dpkg-deb"} {
		if _, err := exec.LookPath(tool); err != nil || os.Geteuid() != 0 {
			skip(t, "%s is not installed and %s cannot unpack it from %s here", bin, tool, pkg)
		}
	}
	dir, err := os.MkdirTemp("", "debtest-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	// apt-get download runs as _apt where it can: let it write here.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	for _, args := range [][]string{{"apt-get", "update", "-q"}, {"apt-get", "download", "-q", pkg}} {
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Dir, cmd.Env = dir, env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Logf("%v: %v\n%s", args, err, out)
		}
	}
	debs, _ := filepath.Glob(filepath.Join(dir, pkg+"_*.deb"))
	if len(debs) != 1 {
		skip(t, "%s is not installed and apt-get could not download %s", bin, pkg)
	}
	root := filepath.Join(dir, "root")
	if out, err := exec.Command("dpkg-deb", "-x", debs[0], root).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb -x %s: %v\n%s", debs[0], err, out)
	}
	var prog []byte
	for _, d := range []string{"usr/bin", "usr/sbin", "bin", "sbin"} {
		if prog, err = os.ReadFile(filepath.Join(root, d, bin)); err == nil {
			break
		}
	}
	if prog == nil {
		t.Fatalf("Debian package %s has no program %s", pkg, bin)
	}
	dst := filepath.Join("/usr/local/bin", bin)
	if err := os.WriteFile(dst+".tmp", prog, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(dst+".tmp", dst); err != nil {
		t.Fatal(err)
	}
	p, err := exec.LookPath(bin)
	if err != nil {
		skip(t, "%s unpacked to %s but not on PATH: %v", bin, dst, err)
	}
	return p
}
