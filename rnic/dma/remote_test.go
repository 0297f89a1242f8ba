package dma

import (
	"math"
	"testing"

	"github.com/rnicd/rnicd/ib"
)

func TestRemote(t *testing.T) {
	tab := NewTable()
	const pd = 4
	const va = 0x7f0000001000
	all := mustRegister(t, tab, pd, 256, va, allRemote, 0)
	ro := mustRegister(t, tab, pd, 256, va, ib.AccessRemoteRead, 0)
	wo := mustRegister(t, tab, pd, 256, va, ib.AccessLocalWrite|ib.AccessRemoteWrite, 0)
	local := mustRegister(t, tab, pd, 256, va, ib.AccessLocalWrite, 0)
	zb := mustRegister(t, tab, pd, 256, 0xdead0000, allRemote|ib.AccessZeroBased, 0)
	other := mustRegister(t, tab, pd+1, 256, va, allRemote, 0)
	top := mustRegister(t, tab, pd, 256, math.MaxUint64-255, allRemote, 0)

	for _, c := range []struct {
		name   string
		pd     PD
		rkey   uint32
		va     uint64
		length uint32
		need   ib.Access
		want   error
		off    int // expected offset in the region on success
	}{
		{"write whole", pd, all.RKey, va, 256, ib.AccessRemoteWrite, nil, 0},
		{"read middle", pd, all.RKey, va + 10, 20, ib.AccessRemoteRead, nil, 10},
		{"last byte", pd, all.RKey, va + 255, 1, ib.AccessRemoteWrite, nil, 255},
		{"one past end", pd, all.RKey, va + 256, 1, ib.AccessRemoteWrite, ErrBounds, 0},
		{"one too long", pd, all.RKey, va, 257, ib.AccessRemoteWrite, ErrBounds, 0},
		{"one before", pd, all.RKey, va - 1, 1, ib.AccessRemoteWrite, ErrBounds, 0},
		{"va+len overflows", pd, all.RKey, math.MaxUint64 - 2, 8, ib.AccessRemoteWrite, ErrBounds, 0},
		{"huge length", pd, all.RKey, va, math.MaxUint32, ib.AccessRemoteWrite, ErrBounds, 0},
		{"va 0", pd, all.RKey, 0, 1, ib.AccessRemoteWrite, ErrBounds, 0},
		{"top of address space", pd, top.RKey, math.MaxUint64, 1, ib.AccessRemoteWrite, nil, 255},
		{"top wrap", pd, top.RKey, math.MaxUint64, 2, ib.AccessRemoteWrite, ErrBounds, 0},
		{"zero based start", pd, zb.RKey, 0, 4, ib.AccessRemoteWrite, nil, 0},
		{"zero based end", pd, zb.RKey, 252, 4, ib.AccessRemoteRead, nil, 252},
		{"zero based past end", pd, zb.RKey, 253, 4, ib.AccessRemoteRead, ErrBounds, 0},
		{"zero based app va", pd, zb.RKey, 0xdead0000, 4, ib.AccessRemoteRead, ErrBounds, 0},
		{"read on read-only", pd, ro.RKey, va, 8, ib.AccessRemoteRead, nil, 0},
		{"write on read-only", pd, ro.RKey, va, 8, ib.AccessRemoteWrite, ErrAccess, 0},
		{"read on write-only", pd, wo.RKey, va, 8, ib.AccessRemoteRead, ErrAccess, 0},
		{"write on write-only", pd, wo.RKey, va, 8, ib.AccessRemoteWrite, nil, 0},
		{"write on local", pd, local.RKey, va, 8, ib.AccessRemoteWrite, ErrAccess, 0},
		{"read on local", pd, local.RKey, va, 8, ib.AccessRemoteRead, ErrAccess, 0},
		{"need nothing", pd, all.RKey, va, 8, 0, ErrAccess, 0},
		{"need local write", pd, all.RKey, va, 8, ib.AccessLocalWrite, ErrAccess, 0},
		{"other pd", pd, other.RKey, va, 8, ib.AccessRemoteRead, ErrPD, 0},
		{"pd 0", 0, all.RKey, va, 8, ib.AccessRemoteRead, ErrPD, 0},
		{"bad key", pd, 0x00ffff00, va, 8, ib.AccessRemoteRead, ErrBadKey, 0},
		{"stale key8", pd, all.RKey + 1, va, 8, ib.AccessRemoteRead, ErrBadKey, 0},
		{"key 0", pd, 0, va, 8, ib.AccessRemoteRead, ErrBadKey, 0},
		// Bad access is reported before bad bounds (rxe's order).
		{"access before bounds", pd, ro.RKey, 0, 8, ib.AccessRemoteWrite, ErrAccess, 0},
	} {
		got, err := tab.Remote(c.pd, 0, c.rkey, c.va, c.length, c.need)
		wantErr(t, c.name, err, c.want)
		if err != nil {
			if got != nil {
				t.Errorf("%s: slice returned with error", c.name)
			}
			continue
		}
		if len(got) != int(c.length) || cap(got) != int(c.length) {
			t.Errorf("%s: len %d cap %d, want %d", c.name, len(got), cap(got), c.length)
		}
		mr, _ := tab.Lookup(c.rkey)
		if &got[0] != &mr.Bytes()[c.off] {
			t.Errorf("%s: slice does not start at region offset %d", c.name, c.off)
		}
	}
}

// TestRemoteZeroLength: a zero-length RDMA operation's rkey and va are not
// checked at all.
func TestRemoteZeroLength(t *testing.T) {
	tab := NewTable()
	for _, rkey := range []uint32{0, 0xdeadbeef} {
		got, err := tab.Remote(0, 0, rkey, math.MaxUint64, 0, ib.AccessRemoteWrite)
		if got != nil || err != nil {
			t.Errorf("Remote(len 0, rkey %#x) = %v, %v; want nil, nil", rkey, got, err)
		}
	}
}
