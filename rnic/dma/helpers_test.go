package dma

import (
	"errors"
	"testing"

	"github.com/rnicd/rnicd/ib"
)

// pattern fills b with a position-dependent byte pattern starting at seed, so
// a byte copied to the wrong place shows.
func pattern(b []byte, seed byte) {
	for i := range b {
		b[i] = seed + byte(i*7)
	}
}

// mustRegister registers a fresh n-byte buffer filled with pattern(seed).
func mustRegister(t testing.TB, tab *Table, pd PD, n int, va uint64, access ib.Access, seed byte) *MR {
	t.Helper()
	buf := make([]byte, n)
	pattern(buf, seed)
	mr, err := tab.Register(pd, buf, va, access)
	if err != nil {
		t.Fatalf("Register(pd %d, len %d, va %#x, %v): %v", pd, n, va, access, err)
	}
	return mr
}

// wantErr fails unless err wraps want (want nil: err must be nil).
func wantErr(t testing.TB, what string, err, want error) {
	t.Helper()
	if want == nil {
		if err != nil {
			t.Errorf("%s: unexpected error %v", what, err)
		}
		return
	}
	if !errors.Is(err, want) {
		t.Errorf("%s: error %v, want %v", what, err, want)
	}
}

const allRemote = ib.AccessLocalWrite | ib.AccessRemoteWrite | ib.AccessRemoteRead | ib.AccessRemoteAtomic
