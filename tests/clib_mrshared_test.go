package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestCLibMemoryShared runs clib/test/mrshared: a program's memfd
// (MFD_ALLOW_SEALING, mapped MAP_SHARED), whether it still holds its
// descriptor or not, and MAP_SHARED anonymous memory are registered in
// place, the daemon mapping the same file (a memfd sealed against
// shrinking): the NIC's WRITE lands in both of the program's mappings
// and in a fork child's, the child's store reaches the NIC's READ, a
// WRITE one byte past the region fails with REM_ACCESS_ERR and the guard
// bytes around it hold; memory that could shrink under the daemon (a
// memfd without MFD_ALLOW_SEALING, POSIX shm, a shared file) is refused
// with EINVAL. The daemon reaches memory the program has no descriptor
// of through /proc/PID/map_files, which needs CAP_CHECKPOINT_RESTORE:
// the test runs as root, as CI does.
func TestCLibMemoryShared(t *testing.T) {
	requireRoot(t)
	tb := newToolBench(t)
	lib := clibDir(t)
	cmd := exec.Command(filepath.Join(lib, "mrshared"), "rnicA", "rnicB")
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+lib)
	var lines []string
	lines = append(lines, inPlaceLines("memfd", true)...)
	lines = append(lines, inPlaceLines("memfd, its descriptor closed", true)...)
	lines = append(lines, inPlaceLines("shared anonymous memory", false)...)
	want := strings.Join(append(lines,
		"a memfd made without MFD_ALLOW_SEALING: EINVAL, and it can still shrink: ok",
		"POSIX shm: EINVAL: ok",
		"a shared file: EINVAL: ok",
		"PASS", ""), "\n")
	if out := runOut(t, cmd); out != want {
		t.Errorf("mrshared printed\n%s\nwant\n%s", out, want)
	}
	tb.idle(t)
}

// requireRoot skips a test that needs the daemon to hold root's
// capabilities (CI runs as root).
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: rnicd opens /proc/PID/map_files with CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE")
	}
}

// inPlaceLines is what mrshared prints for shared memory registered in
// place; sealed: a memfd, which the daemon seals.
func inPlaceLines(what string, sealed bool) []string {
	var l []string
	for _, s := range []string{
		"registered",
		"registered in place (still the program's shared memory)",
		"sealed against shrinking alone (ftruncate down: EPERM; up: ok)",
		"WRITE of the whole region lands, in both of its mappings",
		"a fork child sees it, in the mapping it inherited and in one of its own",
		"the child's store reaches the parent (the mapping is still shared)",
		"READ of the region gives the child's store and the NIC's bytes",
		"WRITE one byte past the end: REM_ACCESS_ERR, guards unchanged",
		"deregistered, it stays the program's shared memory with its bytes",
	} {
		if sealed || !strings.HasPrefix(s, "sealed") {
			l = append(l, what+": "+s+": ok")
		}
	}
	return l
}

// TestCLibMemorySharedHugetlb runs mrshared -hugetlb: the same checks on
// a memfd of 2 MiB huge pages (MFD_HUGETLB) and on shared anonymous
// hugetlb memory (MAP_HUGETLB), which the daemon maps in whole huge
// pages; private hugetlb memory, which the library cannot
// move onto its memfd of ordinary pages, is refused. It needs two free
// huge pages: as root the test
// reserves them (vm.nr_hugepages) and gives them back after.
func TestCLibMemorySharedHugetlb(t *testing.T) {
	requireRoot(t)
	tb := newToolBench(t)
	lib := clibDir(t)
	reserveHugePages(t, 2)
	cmd := exec.Command(filepath.Join(lib, "mrshared"), "-hugetlb", "rnicA", "rnicB")
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+lib)
	lines := append(inPlaceLines("hugetlb memfd", true), inPlaceLines("shared anonymous hugetlb memory", false)...)
	want := strings.Join(append(lines, "private hugetlb memory: EINVAL: ok", "PASS", ""), "\n")
	if out := runOut(t, cmd); out != want {
		t.Errorf("mrshared -hugetlb printed\n%s\nwant\n%s", out, want)
	}
	tb.idle(t)
}

// reserveHugePages makes n default-sized huge pages free, raising
// vm.nr_hugepages for the test's length if it must; a machine where
// that cannot be done skips the test, saying why.
func reserveHugePages(t *testing.T, n int) {
	t.Helper()
	const sysctl = "/proc/sys/vm/nr_hugepages"
	meminfo := func(key string) int {
		b, err := os.ReadFile("/proc/meminfo")
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) >= 2 && f[0] == key+":" {
				v, err := strconv.Atoi(f[1])
				if err != nil {
					t.Fatalf("%s: %v", l, err)
				}
				return v
			}
		}
		t.Fatalf("no %s in /proc/meminfo", key)
		return 0
	}
	free := meminfo("HugePages_Free")
	if free >= n {
		return
	}
	old, err := os.ReadFile(sysctl)
	if err != nil {
		t.Fatal(err)
	}
	total := meminfo("HugePages_Total")
	if err := os.WriteFile(sysctl, []byte(strconv.Itoa(total+n-free)), 0); err != nil {
		t.Skipf("%d free huge pages, and %s cannot be raised: %v", free, sysctl, err)
	}
	t.Cleanup(func() {
		if err := os.WriteFile(sysctl, old, 0); err != nil {
			t.Errorf("giving the huge pages back: %v", err)
		}
	})
	if free = meminfo("HugePages_Free"); free < n {
		t.Skipf("%d free huge pages after raising %s: memory too fragmented", free, sysctl)
	}
}
