package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCLibMemoryMove runs clib/test/mrmove: 3000 registrations and
// deregistrations of 64 bytes of two pages in turn while two threads
// store a counter into each page and read it back; the library moves the
// page onto its memfd and off it each time, and no store may be lost
// (before the move's fence, a loaded run lost malloc's own update of a
// free list on such a page: 5,789 of 312 million stores here). The
// program's own SIGSEGV handler still takes its faults, and a fault no
// one handles still kills with SIGSEGV, in a registered page too; an
// mmap hook of the program's that stores into the moving page from the
// moving thread itself does not hang the registration.
func TestCLibMemoryMove(t *testing.T) {
	tb := newToolBench(t)
	lib := clibDir(t)
	cmd := exec.Command(filepath.Join(lib, "mrmove"), "rnicA")
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+lib)
	want := strings.Join([]string{
		"3000 registrations and deregistrations of 64 bytes of the writers' pages: ok",
		"the writer threads' stores into the pages: none lost: ok",
		"the regions' bytes unchanged: ok",
		"an mmap hook storing into the page from the moving thread: registered: ok",
		"the program's own SIGSEGV handler still takes its faults: ok",
		"a store into a read-only page, unhandled: SIGSEGV: ok",
		"a store into a registered page the program made read-only: SIGSEGV: ok",
		"PASS", "",
	}, "\n")
	if out := runOut(t, cmd); out != want {
		t.Errorf("mrmove printed\n%s\nwant\n%s", out, want)
	}
	tb.idle(t)
}
