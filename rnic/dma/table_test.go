package dma

import (
	"testing"

	"github.com/rnicd/rnicd/ib"
)

func TestRegisterErrors(t *testing.T) {
	tab := NewTable()
	buf := make([]byte, 64)
	for _, c := range []struct {
		name   string
		pd     PD
		buf    []byte
		va     uint64
		access ib.Access
		want   error
	}{
		{"ok local", 1, buf, 0x1000, 0, nil},
		{"ok all", 1, buf, 0x1000, allRemote | ib.AccessMWBind | ib.AccessOnDemand, nil},
		{"ok remote read only", 1, buf, 0x1000, ib.AccessRemoteRead, nil},
		{"ok empty", 1, nil, 0x1000, ib.AccessLocalWrite, nil},
		{"pd 0", 0, buf, 0x1000, ib.AccessLocalWrite, ErrPD},
		{"remote write without local write", 1, buf, 0x1000, ib.AccessRemoteWrite, ErrBadAccess},
		{"remote atomic without local write", 1, buf, 0x1000, ib.AccessRemoteAtomic | ib.AccessRemoteRead, ErrBadAccess},
		{"unknown flag", 1, buf, 0x1000, ib.AccessLocalWrite | 0x80, ErrBadAccess},
		{"wraps address space", 1, buf, ^uint64(0) - 62, ib.AccessLocalWrite, ErrBounds},
		{"ends at top of address space", 1, buf, ^uint64(0) - 63, ib.AccessLocalWrite, nil},
		{"zero based ignores va", 1, buf, ^uint64(0), ib.AccessLocalWrite | ib.AccessZeroBased, nil},
	} {
		mr, err := tab.Register(c.pd, c.buf, c.va, c.access)
		wantErr(t, c.name, err, c.want)
		if err != nil {
			if mr != nil {
				t.Errorf("%s: MR returned with error", c.name)
			}
			continue
		}
		wantVA := c.va
		if c.access&ib.AccessZeroBased != 0 {
			wantVA = 0
		}
		if mr.LKey != mr.RKey || mr.PD != c.pd || mr.Access != c.access || mr.VA != wantVA || mr.Len != uint64(len(c.buf)) {
			t.Errorf("%s: got %v", c.name, mr)
		}
		if len(mr.Bytes()) != len(c.buf) || cap(mr.Bytes()) != len(c.buf) {
			t.Errorf("%s: Bytes() len %d cap %d, want %d", c.name, len(mr.Bytes()), cap(mr.Bytes()), len(c.buf))
		}
	}
}

func TestKeysAndLookup(t *testing.T) {
	tab := NewTable()
	seen := map[uint32]bool{}
	var mrs []*MR
	for i := range 10 {
		mr := mustRegister(t, tab, 1, 16, uint64(i)*0x1000, ib.AccessLocalWrite, 0)
		if mr.LKey>>8 == 0 {
			t.Fatalf("key %#x uses index 0", mr.LKey)
		}
		if seen[mr.LKey] {
			t.Fatalf("key %#x handed out twice", mr.LKey)
		}
		seen[mr.LKey] = true
		mrs = append(mrs, mr)
	}
	if tab.Len() != 10 {
		t.Errorf("Len = %d, want 10", tab.Len())
	}
	for _, mr := range mrs {
		got, ok := tab.Lookup(mr.LKey)
		if !ok || got != mr {
			t.Errorf("Lookup(%#x) = %v, %v", mr.LKey, got, ok)
		}
		// Same index, any other key8: not found.
		for k8 := range uint32(256) {
			key := mr.LKey&^0xff | k8
			if key == mr.LKey {
				continue
			}
			if _, ok := tab.Lookup(key); ok {
				t.Fatalf("Lookup(%#x) found MR %#x", key, mr.LKey)
			}
		}
	}
	for _, key := range []uint32{0, 0xff, 0xffffffff, 0x7fffff00} {
		if _, ok := tab.Lookup(key); ok {
			t.Errorf("Lookup(%#x) found something", key)
		}
	}
}

// TestKeyReuse: an index that is reused gets a new key8 each time, so every
// stale key (lkey or rkey) of an earlier MR at that index fails.
func TestKeyReuse(t *testing.T) {
	tab := NewTable()
	pd := PD(3)
	first := mustRegister(t, tab, pd, 64, 0x1000, allRemote, 0)
	index := first.LKey >> 8
	stale := []uint32{first.LKey}
	wantErr(t, "deregister", tab.Deregister(first.LKey), nil)
	// 255 reuses of the same index, each with a key8 never seen before.
	for i := range 255 {
		mr := mustRegister(t, tab, pd, 64, 0x1000, allRemote, 0)
		if mr.LKey>>8 != index {
			t.Fatalf("reuse %d: index %#x, want %#x (only free index)", i, mr.LKey>>8, index)
		}
		for _, old := range stale {
			if old == mr.LKey {
				t.Fatalf("reuse %d: key %#x handed out again", i, old)
			}
			if _, ok := tab.Lookup(old); ok {
				t.Fatalf("stale key %#x still found", old)
			}
			_, err := tab.Remote(pd, 0, old, 0x1000, 8, ib.AccessRemoteRead)
			wantErr(t, "remote with stale rkey", err, ErrBadKey)
			err = tab.Gather(pd, []ib.SGE{{Addr: 0x1000, Length: 8, LKey: old}}, 0, make([]byte, 8))
			wantErr(t, "gather with stale lkey", err, ErrBadKey)
		}
		if _, err := tab.Remote(pd, 0, mr.RKey, 0x1000, 8, ib.AccessRemoteRead); err != nil {
			t.Fatalf("fresh key %#x: %v", mr.RKey, err)
		}
		stale = append(stale, mr.LKey)
		wantErr(t, "deregister", tab.Deregister(mr.LKey), nil)
	}
}

func TestDeregister(t *testing.T) {
	tab := NewTable()
	a := mustRegister(t, tab, 1, 64, 0x1000, allRemote, 0)
	b := mustRegister(t, tab, 1, 64, 0x1000, allRemote, 0)
	wantErr(t, "deregister a", tab.Deregister(a.LKey), nil)
	wantErr(t, "deregister a twice", tab.Deregister(a.LKey), ErrBadKey)
	wantErr(t, "deregister unknown", tab.Deregister(0x12345678), ErrBadKey)
	wantErr(t, "deregister 0", tab.Deregister(0), ErrBadKey)
	if _, ok := tab.Lookup(a.LKey); ok {
		t.Error("deregistered MR still found")
	}
	_, err := tab.Remote(1, 0, a.RKey, 0x1000, 1, ib.AccessRemoteWrite)
	wantErr(t, "remote after deregister", err, ErrBadKey)
	_, err = tab.AtomicFetchAdd(1, 0, a.RKey, 0x1000, 1)
	wantErr(t, "atomic after deregister", err, ErrBadKey)
	_, err = tab.CheckSGL(1, []ib.SGE{{Addr: 0x1000, Length: 1, LKey: a.LKey}}, false)
	wantErr(t, "sgl after deregister", err, ErrBadKey)
	// The other MR is untouched.
	if _, err := tab.Remote(1, 0, b.RKey, 0x1000, 64, ib.AccessRemoteWrite); err != nil {
		t.Errorf("other MR: %v", err)
	}
	if tab.Len() != 1 {
		t.Errorf("Len = %d, want 1", tab.Len())
	}
}

func TestInvalidate(t *testing.T) {
	tab := NewTable()
	mr := mustRegister(t, tab, 5, 64, 0x2000, allRemote, 0)
	other := mustRegister(t, tab, 5, 64, 0x2000, allRemote, 0)

	wantErr(t, "invalidate unknown", tab.Invalidate(5, 0xdead00), ErrBadKey)
	wantErr(t, "invalidate other pd", tab.Invalidate(6, mr.RKey), ErrPD)
	if mr.Invalidated() {
		t.Fatal("invalidated by a failed Invalidate")
	}
	wantErr(t, "invalidate", tab.Invalidate(5, mr.RKey), nil)
	wantErr(t, "invalidate twice", tab.Invalidate(5, mr.RKey), nil)
	if !mr.Invalidated() {
		t.Fatal("not invalidated")
	}
	for _, need := range []ib.Access{ib.AccessRemoteWrite, ib.AccessRemoteRead} {
		_, err := tab.Remote(5, 0, mr.RKey, 0x2000, 8, need)
		wantErr(t, "remote "+need.String()+" after invalidate", err, ErrInvalidated)
	}
	_, err := tab.AtomicCompareSwap(5, 0, mr.RKey, 0x2000, 0, 1)
	wantErr(t, "cas after invalidate", err, ErrInvalidated)
	_, err = tab.AtomicFetchAdd(5, 0, mr.RKey, 0x2000, 1)
	wantErr(t, "faa after invalidate", err, ErrInvalidated)
	// PD is checked before the invalid state: a QP of another PD learns
	// nothing about this MR.
	_, err = tab.Remote(6, 0, mr.RKey, 0x2000, 8, ib.AccessRemoteRead)
	wantErr(t, "remote other pd after invalidate", err, ErrPD)
	// Local access is unaffected.
	wantErr(t, "local scatter after invalidate",
		tab.Scatter(5, []ib.SGE{{Addr: 0x2000, Length: 8, LKey: mr.LKey}}, 0, make([]byte, 8)), nil)
	// Other MRs are unaffected.
	if _, err := tab.Remote(5, 0, other.RKey, 0x2000, 8, ib.AccessRemoteRead); err != nil {
		t.Errorf("other MR: %v", err)
	}
	// Deregistering an invalidated MR works.
	wantErr(t, "deregister invalidated", tab.Deregister(mr.LKey), nil)
}

// TestMRFieldsNotTrusted: the exported MR fields are a copy; changing them
// grants nothing.
func TestMRFieldsNotTrusted(t *testing.T) {
	tab := NewTable()
	mr := mustRegister(t, tab, 1, 16, 0x1000, ib.AccessLocalWrite, 0)
	mr.Access = allRemote
	mr.Len = 1 << 20
	mr.PD = 2
	_, err := tab.Remote(1, 0, mr.RKey, 0x1000, 8, ib.AccessRemoteWrite)
	wantErr(t, "remote write after editing Access", err, ErrAccess)
	err = tab.Scatter(1, []ib.SGE{{Addr: 0x1000, Length: 32, LKey: mr.LKey}}, 0, make([]byte, 32))
	wantErr(t, "scatter after editing Len", err, ErrBounds)
}
