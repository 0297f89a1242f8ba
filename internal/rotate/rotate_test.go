package rotate

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// TestRotateKeepsNewest writes 1,000 numbered records of 30 bytes into
// files of at most 200 bytes (header included), keeping 3, and reads what
// is left on disk: exactly the 3 newest files, each within the bound,
// each starting with the header and holding whole records, and together
// the last records written, in order, with none missing between them.
func TestRotateKeepsNewest(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "t.log")
	hdr := []byte("HDR\n")
	const maxBytes, maxFiles, n = 200, 3, 1000
	for _, buf := range []int{0, 64} {
		t.Run(fmt.Sprintf("buf%d", buf), func(t *testing.T) {
			r, err := Create(Config{Path: path, MaxBytes: maxBytes, MaxFiles: maxFiles, Header: hdr, BufSize: buf})
			if err != nil {
				t.Fatal(err)
			}
			for i := range n {
				rec := fmt.Sprintf("record %022d\n", i) // 30 bytes
				if k, err := r.Write([]byte(rec)); err != nil || k != len(rec) {
					t.Fatalf("write %d: %d, %v", i, k, err)
				}
			}
			if err := r.Close(); err != nil {
				t.Fatal(err)
			}
			if _, err := r.Write([]byte("x")); err == nil {
				t.Fatal("write after close accepted")
			}
			st := r.Stats()
			// 6 records a file: 4 + 6*30 = 184 <= 200 < 214.
			if wantFiles := (n + 5) / 6; st.Files != wantFiles || st.Removed != wantFiles-maxFiles {
				t.Fatalf("stats %+v, want %d files opened, %d removed", st, wantFiles, wantFiles-maxFiles)
			}
			ents, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			if len(ents) != maxFiles {
				t.Fatalf("%d files on disk, want %d", len(ents), maxFiles)
			}
			var total int64
			next := -1
			for i := maxFiles - 1; i >= 0; i-- { // oldest first
				b, err := os.ReadFile(Name(path, i))
				if err != nil {
					t.Fatal(err)
				}
				total += int64(len(b))
				if len(b) > maxBytes || !bytes.HasPrefix(b, hdr) || (len(b)-len(hdr))%30 != 0 {
					t.Fatalf("file %d: %d bytes, not a header and whole records:\n%s", i, len(b), b)
				}
				for _, line := range bytes.SplitAfter(b[len(hdr):], []byte("\n")) {
					if len(line) == 0 {
						continue
					}
					var k int
					if _, err := fmt.Sscanf(string(line), "record %d\n", &k); err != nil {
						t.Fatalf("file %d: line %q: %v", i, line, err)
					}
					if next >= 0 && k != next {
						t.Fatalf("file %d: record %d after %d", i, k, next-1)
					}
					next = k + 1
				}
			}
			if next != n {
				t.Fatalf("last record kept is %d, want %d", next-1, n-1)
			}
			if total > Bound(maxBytes, maxFiles) {
				t.Fatalf("%d bytes kept, more than the bound %d", total, Bound(maxBytes, maxFiles))
			}
			os.RemoveAll(dir)
			os.Mkdir(dir, 0o755)
		})
	}
}

// TestRotateOversizedRecord checks that a record larger than MaxBytes
// gets a file of its own rather than being split or lost.
func TestRotateOversizedRecord(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big")
	r, err := Create(Config{Path: path, MaxBytes: 10})
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range []string{"abc", "0123456789abcdef", "xy"} {
		if _, err := r.Write([]byte(rec)); err != nil {
			t.Fatal(err)
		}
	}
	r.Close()
	for i, want := range []string{"xy", "0123456789abcdef", "abc"} { // newest first
		if b, err := os.ReadFile(Name(path, i)); err != nil || string(b) != want {
			t.Fatalf("file %d: %q, %v; want %q", i, b, err, want)
		}
	}
}

func TestRotateConfig(t *testing.T) {
	for _, cfg := range []Config{{}, {Path: "x", MaxBytes: -1}, {Path: "x", MaxFiles: -1}, {Path: "/nonexistent/dir/x"}} {
		if _, err := Create(cfg); err == nil {
			t.Errorf("Create(%+v) accepted", cfg)
		}
	}
	if Bound(100, 0) != 0 || Bound(0, 3) != 0 || Bound(100, 3) != 300 {
		t.Fatal("Bound")
	}
}
