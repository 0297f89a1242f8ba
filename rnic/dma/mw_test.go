package dma

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/rnicd/rnicd/ib"
)

const (
	mwPD  PD     = 7
	mwQP  uint32 = 0x11
	mwVA  uint64 = 0x40000
	mwLen        = 4096
)

var bindAccess = ib.AccessLocalWrite | ib.AccessRemoteWrite | ib.AccessRemoteRead | ib.AccessMWBind

func mustAllocMW(t *testing.T, tab *Table, pd PD, typ MWType) *MW {
	t.Helper()
	mw, err := tab.AllocMW(pd, typ)
	if err != nil {
		t.Fatalf("AllocMW(pd %d, type %d): %v", pd, typ, err)
	}
	return mw
}

// A bound window answers for its range of the MR and nothing else: a
// WRITE through it lands at the MR offset the bind named, byte for byte,
// one a byte past either end is ErrBounds and leaves the MR as it was,
// and a READ needs the window's own REMOTE_READ.
func TestMWType1Range(t *testing.T) {
	tab := NewTable()
	mr := mustRegister(t, tab, mwPD, mwLen, mwVA, bindAccess, 1)
	mw := mustAllocMW(t, tab, mwPD, MWType1)
	if mw.RKey>>8 == mr.RKey>>8 || mw.RKey == 0 {
		t.Fatalf("window rkey %#x, mr rkey %#x: they must not share an index", mw.RKey, mr.RKey)
	}
	newKey := mw.RKey&^0xff | uint32(uint8(mw.RKey+1))
	b := ib.MWBind{MWRKey: mw.RKey, RKey: newKey, MRLKey: mr.LKey, Addr: mwVA + 1000, Length: 100, Access: ib.AccessRemoteWrite}
	wantErr(t, "bind", tab.Bind(mwPD, mwQP, &b), nil)
	if st := tab.State(mw); st.RKey != newKey || !st.Bound || st.VA != mwVA+1000 || st.Length != 100 || st.MRKey != mr.LKey || st.QPN != 0 {
		t.Fatalf("state after bind: %+v", st)
	}
	// The old key names nothing now.
	_, err := tab.Remote(mwPD, mwQP, mw.RKey, mwVA+1000, 8, ib.AccessRemoteWrite)
	wantErr(t, "old key", err, ErrBadKey)

	before := append([]byte(nil), mr.Bytes()...)
	dst, err := tab.Remote(mwPD, 0x99, newKey, mwVA+1010, 90, ib.AccessRemoteWrite) // type 1: any QP of the PD
	if err != nil {
		t.Fatalf("write through window: %v", err)
	}
	if len(dst) != 90 || cap(dst) != 90 {
		t.Fatalf("slice len %d cap %d, want 90", len(dst), cap(dst))
	}
	for i := range dst {
		dst[i] = 0xEE
	}
	want := append([]byte(nil), before...)
	for i := 1010; i < 1100; i++ {
		want[i] = 0xEE
	}
	if !bytes.Equal(mr.Bytes(), want) {
		t.Fatal("the write landed elsewhere than MR offset 1010..1099")
	}
	for _, c := range []struct {
		what string
		va   uint64
		n    uint32
		need ib.Access
		err  error
	}{
		{"a byte before", mwVA + 999, 2, ib.AccessRemoteWrite, ErrBounds},
		{"a byte past", mwVA + 1099, 2, ib.AccessRemoteWrite, ErrBounds},
		{"whole MR", mwVA, mwLen, ib.AccessRemoteWrite, ErrBounds},
		{"read without REMOTE_READ", mwVA + 1000, 8, ib.AccessRemoteRead, ErrAccess},
		{"atomic without REMOTE_ATOMIC", mwVA + 1000, 8, ib.AccessRemoteAtomic, ErrAccess},
	} {
		_, err := tab.Remote(mwPD, mwQP, newKey, c.va, c.n, c.need)
		wantErr(t, c.what, err, c.err)
	}
	_, err = tab.Remote(mwPD+1, mwQP, newKey, mwVA+1000, 8, ib.AccessRemoteWrite)
	wantErr(t, "other pd", err, ErrPD)
	if !bytes.Equal(mr.Bytes(), want) {
		t.Fatal("a refused access changed the MR")
	}
	// A window's key is no lkey.
	_, err = tab.CheckSGL(mwPD, []ib.SGE{{Addr: mwVA + 1000, Length: 8, LKey: newKey}}, false)
	wantErr(t, "window key as lkey", err, ErrBadKey)

	// An MR with a window bound cannot go; a type 1 bind of length 0
	// unbinds, and then it can.
	wantErr(t, "dereg with window", tab.Deregister(mr.LKey), ErrBusy)
	wantErr(t, "invalidate type 1", tab.Invalidate(mwPD, newKey), ErrMWType)
	unbind := ib.MWBind{MWRKey: newKey, RKey: newKey + 1}
	wantErr(t, "unbind", tab.Bind(mwPD, mwQP, &unbind), nil)
	_, err = tab.Remote(mwPD, mwQP, newKey+1, mwVA+1000, 8, ib.AccessRemoteWrite)
	wantErr(t, "after unbind", err, ErrInvalidated)
	wantErr(t, "dereg", tab.Deregister(mr.LKey), nil)
	wantErr(t, "dealloc", tab.DeallocMW(mw), nil)
	_, err = tab.Remote(mwPD, mwQP, newKey+1, 0, 8, ib.AccessRemoteWrite)
	wantErr(t, "after dealloc", err, ErrBadKey)
}

// A type 2 window: zero-based, tied to its QP, not rebound before it is
// invalidated, and invalidated locally or by a peer's SEND_WITH_INV
// (both Table.Invalidate).
func TestMWType2(t *testing.T) {
	tab := NewTable()
	mr := mustRegister(t, tab, mwPD, mwLen, mwVA, bindAccess|ib.AccessRemoteAtomic, 2)
	mw := mustAllocMW(t, tab, mwPD, MWType2)
	k1 := mw.RKey&^0xff | uint32(uint8(mw.RKey+1))
	b := ib.MWBind{MWRKey: mw.RKey, RKey: k1, MRLKey: mr.LKey, Addr: mwVA + 2048, Length: 64,
		Access: ib.AccessZeroBased | ib.AccessRemoteRead | ib.AccessRemoteAtomic}
	wantErr(t, "bind", tab.Bind(mwPD, mwQP, &b), nil)
	src, err := tab.Remote(mwPD, mwQP, k1, 8, 16, ib.AccessRemoteRead)
	if err != nil {
		t.Fatalf("read at window offset 8: %v", err)
	}
	if !bytes.Equal(src, mr.Bytes()[2056:2072]) {
		t.Fatalf("read %x, want MR bytes 2056..2071 %x", src, mr.Bytes()[2056:2072])
	}
	orig, err := tab.AtomicFetchAdd(mwPD, mwQP, k1, 56, 1)
	if err != nil || orig != nativeU64(mr.Bytes()[2104:2112])-1 {
		t.Fatalf("fetch-add at window offset 56: orig %#x, %v", orig, err)
	}
	_, err = tab.Remote(mwPD, mwQP, k1, 60, 8, ib.AccessRemoteRead)
	wantErr(t, "past the window", err, ErrBounds)
	_, err = tab.Remote(mwPD, mwQP+1, k1, 8, 16, ib.AccessRemoteRead)
	wantErr(t, "another QP", err, ErrAccess)

	k2 := k1&^0xff | uint32(uint8(k1+1))
	again := b
	again.MWRKey, again.RKey = k1, k2
	err = tab.Bind(mwPD, mwQP, &again)
	wantErr(t, "rebind bound type 2", err, ErrBind)
	wantErr(t, "rebind bound type 2", err, ErrMWType)

	wantErr(t, "invalidate other pd", tab.Invalidate(mwPD+1, k1), ErrPD)
	wantErr(t, "invalidate", tab.Invalidate(mwPD, k1), nil)
	_, err = tab.Remote(mwPD, mwQP, k1, 8, 16, ib.AccessRemoteRead)
	wantErr(t, "after invalidation", err, ErrInvalidated)
	wantErr(t, "invalidate twice", tab.Invalidate(mwPD, k1), ErrInvalidated)
	wantErr(t, "dereg after invalidation", tab.Deregister(mr.LKey), nil)

	// Bound again (on a new MR), then its QP goes: the window is free.
	mr2 := mustRegister(t, tab, mwPD, mwLen, mwVA, bindAccess, 3)
	again.MRLKey = mr2.LKey
	wantErr(t, "bind after invalidation", tab.Bind(mwPD, mwQP, &again), nil)
	tab.ReleaseQP(mwPD, mwQP)
	if st := tab.State(mw); st.Bound {
		t.Fatalf("bound after its QP went: %+v", st)
	}
	wantErr(t, "dereg after ReleaseQP", tab.Deregister(mr2.LKey), nil)
}

// Every bind rxe refuses, refused here with ErrBind and the reason, and
// the window left as it was.
func TestMWBindRefused(t *testing.T) {
	tab := NewTable()
	mr := mustRegister(t, tab, mwPD, mwLen, mwVA, bindAccess, 4)
	noBind := mustRegister(t, tab, mwPD, mwLen, mwVA, ib.AccessLocalWrite|ib.AccessRemoteWrite, 5)
	roMR := mustRegister(t, tab, mwPD, mwLen, mwVA, ib.AccessRemoteRead|ib.AccessMWBind, 6)
	zbMR := mustRegister(t, tab, mwPD, mwLen, 0, bindAccess|ib.AccessZeroBased, 7)
	other := mustRegister(t, tab, mwPD+1, mwLen, mwVA, bindAccess, 8)
	t1 := mustAllocMW(t, tab, mwPD, MWType1)
	t2 := mustAllocMW(t, tab, mwPD, MWType2)
	otherMW := mustAllocMW(t, tab, mwPD+1, MWType1)
	ok := func(mw *MW) ib.MWBind {
		return ib.MWBind{MWRKey: mw.RKey, RKey: mw.RKey + 1, MRLKey: mr.LKey, Addr: mwVA, Length: 64, Access: ib.AccessRemoteWrite}
	}
	for _, c := range []struct {
		what string
		pd   PD
		mw   *MW
		edit func(*ib.MWBind)
		err  error
	}{
		{"unknown window", mwPD, t1, func(b *ib.MWBind) { b.MWRKey ^= 0x80 }, ErrBadKey},
		{"another pd's window", mwPD, otherMW, nil, ErrPD},
		{"another pd's MR", mwPD, t1, func(b *ib.MWBind) { b.MRLKey = other.LKey }, ErrPD},
		{"qp of another pd", mwPD + 1, t2, nil, ErrPD},
		{"MR without MW_BIND", mwPD, t1, func(b *ib.MWBind) { b.MRLKey = noBind.LKey }, ErrAccess},
		{"writable window on read-only MR", mwPD, t2, func(b *ib.MWBind) { b.MRLKey = roMR.LKey }, ErrAccess},
		{"zero-based MR", mwPD, t1, func(b *ib.MWBind) { b.MRLKey, b.Addr = zbMR.LKey, 0 }, ErrAccess},
		{"zero-based type 1", mwPD, t1, func(b *ib.MWBind) { b.Access |= ib.AccessZeroBased }, ErrMWType},
		{"type 2 length 0", mwPD, t2, func(b *ib.MWBind) { b.Length = 0 }, ErrBounds},
		{"past the MR", mwPD, t2, func(b *ib.MWBind) { b.Addr = mwVA + mwLen - 63 }, ErrBounds},
		{"before the MR", mwPD, t2, func(b *ib.MWBind) { b.Addr = mwVA - 1 }, ErrBounds},
		{"wrapping length", mwPD, t2, func(b *ib.MWBind) { b.Length = ^uint64(0) }, ErrBounds},
		{"unknown MR", mwPD, t2, func(b *ib.MWBind) { b.MRLKey = 0xdead00 }, ErrBadKey},
		{"MW_BIND access", mwPD, t2, func(b *ib.MWBind) { b.Access |= ib.AccessMWBind }, ErrBadAccess},
	} {
		b := ok(c.mw)
		if c.edit != nil {
			c.edit(&b)
		}
		before := tab.State(c.mw)
		err := tab.Bind(c.pd, mwQP, &b)
		wantErr(t, c.what, err, ErrBind)
		wantErr(t, c.what, err, c.err)
		if after := tab.State(c.mw); after != before {
			t.Errorf("%s: window changed from %+v to %+v", c.what, before, after)
		}
	}
	for _, mw := range []*MW{t1, t2} {
		b := ok(mw)
		wantErr(t, "good bind", tab.Bind(mwPD, mwQP, &b), nil)
	}
	_, err := tab.AllocMW(mwPD, 3)
	wantErr(t, "type 3", err, ErrMWType)
	_, err = tab.AllocMW(0, MWType1)
	wantErr(t, "pd 0", err, ErrPD)
}

func nativeU64(b []byte) uint64 { return binary.NativeEndian.Uint64(b) }
