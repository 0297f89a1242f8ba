package dma

import (
	"encoding/binary"
	"math"
	"sync"
	"testing"

	"github.com/rnicd/rnicd/ib"
)

func TestAtomicCompareSwap(t *testing.T) {
	tab := NewTable()
	const pd, va = 2, 0x4000
	mr := mustRegister(t, tab, pd, 32, va, allRemote, 0)
	word := mr.Bytes()[8:16]
	binary.NativeEndian.PutUint64(word, 0x1111)

	orig, err := tab.AtomicCompareSwap(pd, 0, mr.RKey, va+8, 0x2222, 0x3333)
	if err != nil || orig != 0x1111 || binary.NativeEndian.Uint64(word) != 0x1111 {
		t.Errorf("CAS miss: orig %#x, err %v, memory %#x", orig, err, binary.NativeEndian.Uint64(word))
	}
	orig, err = tab.AtomicCompareSwap(pd, 0, mr.RKey, va+8, 0x1111, 0x3333)
	if err != nil || orig != 0x1111 || binary.NativeEndian.Uint64(word) != 0x3333 {
		t.Errorf("CAS hit: orig %#x, err %v, memory %#x", orig, err, binary.NativeEndian.Uint64(word))
	}
	// Neighbours untouched.
	for i, b := range mr.Bytes() {
		if (i < 8 || i >= 16) && b != byte(i*7) {
			t.Fatalf("byte %d changed to %#x", i, b)
		}
	}
}

func TestAtomicFetchAdd(t *testing.T) {
	tab := NewTable()
	const pd, va = 2, 0x4000
	mr := mustRegister(t, tab, pd, 16, va, allRemote, 0)
	word := mr.Bytes()[8:16]
	binary.NativeEndian.PutUint64(word, math.MaxUint64-1)
	orig, err := tab.AtomicFetchAdd(pd, 0, mr.RKey, va+8, 3)
	if err != nil || orig != math.MaxUint64-1 {
		t.Errorf("FAA: orig %#x, err %v", orig, err)
	}
	if got := binary.NativeEndian.Uint64(word); got != 1 {
		t.Errorf("FAA did not wrap: memory %#x, want 1", got)
	}
	// Host byte order: the application sees a native uint64.
	binary.NativeEndian.PutUint64(word, 0x0102030405060708)
	if orig, _ := tab.AtomicFetchAdd(pd, 0, mr.RKey, va+8, 0); orig != 0x0102030405060708 {
		t.Errorf("FAA read %#x, want native 0x0102030405060708", orig)
	}
}

func TestAtomicErrors(t *testing.T) {
	tab := NewTable()
	const pd, va = 2, 0x4000
	mr := mustRegister(t, tab, pd, 16, va, allRemote, 0)
	noAtomic := mustRegister(t, tab, pd, 16, va, ib.AccessLocalWrite|ib.AccessRemoteWrite|ib.AccessRemoteRead, 0)
	odd := mustRegister(t, tab, pd, 16, va+4, allRemote, 0)
	other := mustRegister(t, tab, pd+1, 16, va, allRemote, 0)
	for _, c := range []struct {
		name string
		pd   PD
		rkey uint32
		va   uint64
		want error
	}{
		{"first word", pd, mr.RKey, va, nil},
		{"last word", pd, mr.RKey, va + 8, nil},
		{"past end", pd, mr.RKey, va + 16, ErrBounds},
		{"before start", pd, mr.RKey, va - 8, ErrBounds},
		{"misaligned", pd, mr.RKey, va + 1, ErrAlign},
		{"misaligned 4", pd, mr.RKey, va + 4, ErrAlign},
		{"misaligned and out of bounds", pd, mr.RKey, va + 17, ErrAlign},
		{"top of address space", pd, mr.RKey, math.MaxUint64 - 7, ErrBounds},
		{"region not aligned, va aligned", pd, odd.RKey, va + 8, nil},
		{"region not aligned, va misaligned", pd, odd.RKey, va + 4, ErrAlign},
		{"region not aligned, last word cut", pd, odd.RKey, va + 16, ErrBounds},
		{"no REMOTE_ATOMIC", pd, noAtomic.RKey, va, ErrAccess},
		{"other pd", pd, other.RKey, va, ErrPD},
		{"bad key", pd, 0x1234500, va, ErrBadKey},
	} {
		before := append([]byte(nil), mr.Bytes()...)
		_, err := tab.AtomicCompareSwap(c.pd, 0, c.rkey, c.va, 0, 0)
		wantErr(t, c.name+": cas", err, c.want)
		_, err = tab.AtomicFetchAdd(c.pd, 0, c.rkey, c.va, 1)
		wantErr(t, c.name+": faa", err, c.want)
		if c.want != nil && string(before) != string(mr.Bytes()) {
			t.Errorf("%s: failed atomic changed memory", c.name)
		}
	}
}

// TestAtomicConcurrent: FetchAdd from 8 goroutines (as from several QPs'
// responders) loses no update; CAS increments too.
func TestAtomicConcurrent(t *testing.T) {
	tab := NewTable()
	const pd, va = 1, 0x8000
	mr := mustRegister(t, tab, pd, 16, va, allRemote, 0)
	clear(mr.Bytes())
	const workers, adds = 8, 2000
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for range adds {
				if _, err := tab.AtomicFetchAdd(pd, 0, mr.RKey, va, uint64(w+1)); err != nil {
					t.Error(err)
					return
				}
				// CAS loop on the second word.
				for {
					old, err := tab.AtomicFetchAdd(pd, 0, mr.RKey, va+8, 0)
					if err != nil {
						t.Error(err)
						return
					}
					got, err := tab.AtomicCompareSwap(pd, 0, mr.RKey, va+8, old, old+1)
					if err != nil {
						t.Error(err)
						return
					}
					if got == old {
						break
					}
				}
			}
		})
	}
	wg.Wait()
	want := uint64(adds * workers * (workers + 1) / 2)
	if got := binary.NativeEndian.Uint64(mr.Bytes()[:8]); got != want {
		t.Errorf("FAA sum %d, want %d", got, want)
	}
	if got := binary.NativeEndian.Uint64(mr.Bytes()[8:]); got != workers*adds {
		t.Errorf("CAS count %d, want %d", got, workers*adds)
	}
}
