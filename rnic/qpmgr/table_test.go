package qpmgr

import "testing"

// A table with a range hands out its QPNs in order, wraps, skips those in
// use, and says so when all are.
func TestTableRange(t *testing.T) {
	tab := NewTableRange(5<<16, 5<<16|2)
	for _, want := range []uint32{5 << 16, 5<<16 | 1, 5<<16 | 2} {
		if got, err := tab.Alloc(); got != want || err != nil {
			t.Fatalf("Alloc = %#x, %v; want %#x", got, err, want)
		}
	}
	if got, err := tab.Alloc(); err == nil {
		t.Fatalf("Alloc with every QPN in use = %#x", got)
	}
	tab.Remove(5<<16 | 1)
	if got, err := tab.Alloc(); got != 5<<16|1 || err != nil {
		t.Fatalf("Alloc after Remove = %#x, %v; want %#x", got, err, 5<<16|1)
	}
	if got, _ := NewTableRange(0, 0xffff).Alloc(); got != FirstQPN {
		t.Fatalf("a range from 0 starts at %#x, want FirstQPN", got)
	}
}
