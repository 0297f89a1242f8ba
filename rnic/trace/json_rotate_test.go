package trace

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/internal/rotate"
)

// TestWriteJSONRotated writes 5,000 events through files of 16 KiB,
// keeping 4, as `rnicd --trace FILE -trace-size 16K -trace-files 4`
// would: the 4 files left on disk each read back on their own as JSON
// lines, within the bound, and hold the newest events in order.
func TestWriteJSONRotated(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "t.json")
	const maxBytes, maxFiles, count = 16 << 10, 4, 5000
	files, err := rotate.Create(rotate.Config{Path: path, MaxBytes: maxBytes, MaxFiles: maxFiles, BufSize: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	tr := New(count)
	p := tr.Probe("rnic0")
	s := tr.Subscribe(Filter{})
	defer s.Close()
	for i := range count {
		p.Emit(Event{Module: ModVerbs, Step: StepPost, QPN: 0x11, WRID: uint64(i), WROp: ib.WRRDMAWrite, Len: 3072})
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // WriteJSON drains what is there, then returns
	if err := WriteJSON(ctx, s, files); err != nil {
		t.Fatal(err)
	}
	if err := files.Close(); err != nil {
		t.Fatal(err)
	}
	if s.Lost() != 0 {
		t.Fatalf("%d events lost", s.Lost())
	}
	st := files.Stats()
	ents, _ := os.ReadDir(dir)
	if len(ents) != maxFiles || st.Files <= maxFiles {
		t.Fatalf("%d files on disk of %d opened, want %d kept of more", len(ents), st.Files, maxFiles)
	}
	next := uint64(0)
	first := true
	for i := maxFiles - 1; i >= 0; i-- { // oldest first
		name := rotate.Name(path, i)
		f, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		if fi, _ := f.Stat(); fi.Size() > maxBytes {
			t.Errorf("%s: %d bytes, more than %d", name, fi.Size(), maxBytes)
		}
		err = ReadJSON(f, func(e *Event) error {
			if !first && e.WRID != next {
				t.Fatalf("%s: wr_id %d after %d", name, e.WRID, next-1)
			}
			first, next = false, e.WRID+1
			return nil
		})
		f.Close()
		if err != nil {
			t.Fatalf("%s does not read as JSON lines on its own: %v", name, err)
		}
	}
	if next != count {
		t.Fatalf("newest event kept has wr_id %d, want %d", next-1, count-1)
	}
}
