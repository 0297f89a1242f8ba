package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestProfiled checks that RNIC_CPUPROFILE's file holds a pprof profile
// (gzip) and that the tool's exit status passes through.
func TestProfiled(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cpu.prof")
	if got := profiled(path, func() int { return 3 }); got != 3 {
		t.Fatalf("exit status %d, want the tool's 3", got)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Fatalf("profile starts %x, want gzip's 1f8b", b[:min(len(b), 2)])
	}
	if got := profiled(filepath.Join(path, "no", "dir"), func() int { return 0 }); got != 1 {
		t.Fatalf("a profile file that cannot be created: exit status %d, want 1", got)
	}
	if got := profiled("", func() int { return 4 }); got != 4 {
		t.Fatalf("no profile: exit status %d, want 4", got)
	}
}
