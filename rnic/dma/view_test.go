package dma

import (
	"errors"
	"testing"

	"github.com/rnicd/rnicd/ib"
)

// View hands out the region's own bytes for a range inside one SGE, with
// the checks Gather makes, and declines (for Gather to handle) a range
// that spans SGEs or runs past the SGL.
func TestView(t *testing.T) {
	tab := NewTable()
	a := mustRegister(t, tab, 1, 100, 0x1000, 0, 0)
	b := mustRegister(t, tab, 1, 50, 0x9000, 0, 0)
	other := mustRegister(t, tab, 2, 100, 0x1000, 0, 0)
	for i := range a.Bytes() {
		a.Bytes()[i] = byte(i)
	}
	sgl := []ib.SGE{{Addr: 0x1010, Length: 40, LKey: a.LKey}, {}, {Addr: 0x9000, Length: 50, LKey: b.LKey}}

	for _, c := range []struct {
		name    string
		sgl     []ib.SGE
		off, n  int
		ok      bool
		first   byte // a.Bytes() index of the view's first byte
		wantErr error
	}{
		{"whole first sge", sgl, 0, 40, true, 0x10, nil},
		{"inside first sge", sgl, 5, 10, true, 0x15, nil},
		{"second sge after an empty one", sgl, 40, 50, true, 0, nil},
		{"spans sges", sgl, 30, 20, false, 0, nil},
		{"past the sgl", sgl, 80, 20, false, 0, nil},
		{"zero length", sgl, 0, 0, false, 0, nil},
		{"negative offset", sgl, -1, 4, false, 0, nil},
		{"outside its mr", []ib.SGE{{Addr: 0x1050, Length: 40, LKey: a.LKey}}, 0, 4, false, 0, ErrBounds},
		{"other pd", []ib.SGE{{Addr: 0x1000, Length: 4, LKey: other.LKey}}, 0, 4, false, 0, ErrPD},
		{"bad key", []ib.SGE{{Addr: 0x1000, Length: 4, LKey: 0x7700}}, 0, 4, false, 0, ErrBadKey},
	} {
		mem, ok, err := tab.View(1, c.sgl, c.off, c.n)
		if !errors.Is(err, c.wantErr) || ok != c.ok || (err != nil && c.wantErr == nil) {
			t.Errorf("%s: ok %v err %v, want ok %v err %v", c.name, ok, err, c.ok, c.wantErr)
			continue
		}
		if !ok {
			if mem != nil {
				t.Errorf("%s: declined but returned %d bytes", c.name, len(mem))
			}
			continue
		}
		if len(mem) != c.n || cap(mem) != c.n {
			t.Errorf("%s: len %d cap %d, want both %d", c.name, len(mem), cap(mem), c.n)
		}
		if c.sgl[0].LKey == a.LKey && c.off < 40 {
			if mem[0] != c.first || &mem[0] != &a.Bytes()[c.first] {
				t.Errorf("%s: view does not start at region byte %#x", c.name, c.first)
			}
		}
	}
	if _, ok, err := tab.View(1, sgl, 40, 50); !ok || err != nil {
		t.Fatalf("second sge: ok %v err %v", ok, err)
	}
	// Once the region is gone its key is: a view of it is refused.
	if err := tab.Deregister(a.LKey); err != nil {
		t.Fatal(err)
	}
	if _, _, err := tab.View(1, sgl, 0, 4); !errors.Is(err, ErrBadKey) {
		t.Fatalf("view after deregister: %v, want ErrBadKey", err)
	}
}
