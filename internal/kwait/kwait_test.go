package kwait

import (
	"runtime"
	"testing"
)

func TestAtLeastTwo(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	t.Setenv("GOMAXPROCS", "")
	runtime.GOMAXPROCS(1)
	if n := AtLeastTwo(); n != 2 || runtime.GOMAXPROCS(0) != 2 {
		t.Fatalf("from 1: AtLeastTwo = %d, GOMAXPROCS %d; want 2", n, runtime.GOMAXPROCS(0))
	}
	runtime.GOMAXPROCS(3)
	if n := AtLeastTwo(); n != 3 || runtime.GOMAXPROCS(0) != 3 {
		t.Fatalf("from 3: AtLeastTwo = %d, GOMAXPROCS %d; want 3 kept", n, runtime.GOMAXPROCS(0))
	}
	// A value the user set is theirs.
	t.Setenv("GOMAXPROCS", "1")
	runtime.GOMAXPROCS(1)
	if n := AtLeastTwo(); n != 1 {
		t.Fatalf("with GOMAXPROCS=1 set: AtLeastTwo = %d, want 1", n)
	}
}
