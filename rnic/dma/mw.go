package dma

import (
	"errors"
	"fmt"

	"github.com/rnicd/rnicd/ib"
)

// Memory windows (IBTA 10.6.7; libibverbs ibv_alloc_mw, ibv_bind_mw,
// IBV_WR_BIND_MW), as rxe keeps them (rxe_mw.c). A window is a key of
// its own in the same table as the MRs, the index in its upper 24 bits
// as an MR's, so an rkey names exactly one object and an MR's lkey is
// never a window's. Bound, it answers remote accesses for a range of one
// MR with access rights of its own; unbound, it answers nothing. A
// window's rkey is never an lkey: SGEs name MRs only.
//
// Type 1 windows are bound by ibv_bind_mw (a BIND_MW the library posts
// for the application), may be bound again at any time, and cannot be
// invalidated, only unbound by a bind of length 0. Type 2 (2B) windows
// are bound by a BIND_MW work request only while unbound, are tied to
// the QP that bound them (a remote access through any other QP is an
// access error), and are unbound by LOCAL_INV or a peer's
// SEND_WITH_INV naming their rkey.

// MWType is a memory window's type (enum ibv_mw_type).
type MWType uint8

// The window types libibverbs has.
const (
	MWType1 MWType = 1 // IBV_MW_TYPE_1
	MWType2 MWType = 2 // IBV_MW_TYPE_2
)

// MWAccess is every flag a bind may give a window (rxe:
// RXE_ACCESS_SUPPORTED_MW): the remote ones, ZERO_BASED, and LOCAL_WRITE,
// which a window ignores (it has no lkey).
const MWAccess = ib.AccessRemote | ib.AccessZeroBased | ib.AccessLocalWrite

// The errors of a bind or an invalidation of a window; each wraps
// ErrBind, so the requester completes a failed bind with
// IBV_WC_MW_BIND_ERR whatever the reason.
var (
	ErrBind   = errors.New("memory window bind refused")
	ErrMWType = errors.New("operation not allowed on a window of this type")
)

// MW is an allocated memory window. RKey is its rkey at allocation; a
// bind changes its low 8 bits (the window's current key is the one the
// bind gave it).
type MW struct {
	RKey uint32
	PD   PD
	Type MWType

	w *window
}

// window is the table's record of a memory window.
type window struct {
	key uint32
	pd  PD
	typ MWType

	// The binding, valid while mr is not nil: the window answers for
	// length bytes from byte off of mr's memory, at addresses from va
	// (0 when zero-based), with access. qpn is the QP a type 2 window
	// was bound on.
	mr     *region
	off    uint64
	va     uint64
	length uint64
	access ib.Access
	qpn    uint32
}

// lookupMW returns the window of key, or nil. Caller holds t.mu.
func (t *Table) lookupMW(key uint32) *window {
	i := keyIndex(key)
	if i == 0 || i >= uint32(len(t.slots)) {
		return nil
	}
	w := t.slots[i].w
	if w == nil || w.key != key {
		return nil
	}
	return w
}

// AllocMW allocates an unbound memory window of pd (ibv_alloc_mw).
func (t *Table) AllocMW(pd PD, typ MWType) (*MW, error) {
	if pd == 0 {
		return nil, fmt.Errorf("dma: alloc_mw: pd 0: %w", ErrPD)
	}
	if typ != MWType1 && typ != MWType2 {
		return nil, fmt.Errorf("dma: alloc_mw: type %d: %w", typ, ErrMWType)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	index, err := t.allocIndex()
	if err != nil {
		return nil, fmt.Errorf("dma: alloc_mw: %w", err)
	}
	w := &window{key: makeKey(index, t.slots[index].key8), pd: pd, typ: typ}
	t.slots[index].w = w
	return &MW{RKey: w.key, PD: pd, Type: typ, w: w}, nil
}

// DeallocMW frees a window (ibv_dealloc_mw), bound or not: its rkey
// stops working at once and the MR it was bound to may be deregistered.
func (t *Table) DeallocMW(mw *MW) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	w := mw.w
	i := keyIndex(w.key)
	if i >= uint32(len(t.slots)) || t.slots[i].w != w {
		return fmt.Errorf("dma: dealloc_mw %#x: %w", mw.RKey, ErrBadKey)
	}
	t.unbind(w)
	t.slots[i].w = nil
	t.free = append(t.free, i)
	return nil
}

// unbind drops the window's binding. Caller holds t.mu for writing.
func (t *Table) unbind(w *window) {
	if w.mr != nil {
		w.mr.mws--
		if w.typ == MWType2 {
			t.bound2--
		}
	}
	w.mr, w.off, w.va, w.length, w.access, w.qpn = nil, 0, 0, 0, 0, 0
}

// Bind binds a window as a BIND_MW work request on QP qpn of PD pd
// does, with rxe's checks (rxe_check_bind_mw) and the PD checks IBTA
// asks (10.6.7.2: the QP, the window and the MR in one PD; keys are the
// whole device's, so without them a client could bind another's window
// or MR):
//   - the window named by b.MWRKey (all 32 bits) exists, in pd;
//   - type 1: not zero-based (o10-36.2.2); length 0 unbinds it;
//   - type 2: unbound (o10-37.2.30), length not 0 (o10-37.2.40);
//   - the MR b.MRLKey exists, in pd, is not zero-based, has MW_BIND
//     (C10-73), and LOCAL_WRITE if the window may be written (C10-74);
//   - [b.Addr, b.Addr+b.Length) lies inside the MR (C10-75; rxe checks
//     only the length of a zero-based window, here the range is
//     checked for both).
//
// The window then has b.RKey's low 8 bits as its key and answers for
// the range with b.Access. Every error wraps ErrBind.
func (t *Table) Bind(pd PD, qpn uint32, b *ib.MWBind) error {
	if b == nil {
		return fmt.Errorf("dma: bind mw: %w: no window named", ErrBind)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.bind(pd, qpn, b); err != nil {
		return fmt.Errorf("dma: bind mw %#x: %w: %w", b.MWRKey, ErrBind, err)
	}
	return nil
}

func (t *Table) bind(pd PD, qpn uint32, b *ib.MWBind) error {
	w := t.lookupMW(b.MWRKey)
	if w == nil {
		return ErrBadKey
	}
	if w.pd != pd {
		return fmt.Errorf("qp pd %d, window pd %d: %w", pd, w.pd, ErrPD)
	}
	if b.Access&^MWAccess != 0 {
		return fmt.Errorf("access %v: %w", b.Access, ErrBadAccess)
	}
	zb := b.Access&ib.AccessZeroBased != 0
	switch w.typ {
	case MWType1:
		if zb {
			return fmt.Errorf("a type 1 window cannot be zero-based: %w", ErrMWType)
		}
	case MWType2:
		if w.mr != nil {
			return fmt.Errorf("type 2 window bound already, not invalidated: %w", ErrMWType)
		}
		if b.Length == 0 {
			return fmt.Errorf("type 2 window bound with length 0: %w", ErrBounds)
		}
	}
	var r *region
	var off uint64
	if b.Length > 0 {
		if r = t.lookup(b.MRLKey); r == nil {
			return fmt.Errorf("mr lkey %#x: %w", b.MRLKey, ErrBadKey)
		}
		if r.pd != pd {
			return fmt.Errorf("mr lkey %#x: pd %d, window pd %d: %w", b.MRLKey, r.pd, pd, ErrPD)
		}
		if r.access&ib.AccessZeroBased != 0 {
			return fmt.Errorf("mr lkey %#x is zero-based: %w", b.MRLKey, ErrAccess)
		}
		if r.access&ib.AccessMWBind == 0 {
			return fmt.Errorf("mr lkey %#x has no MW_BIND (%v): %w", b.MRLKey, r.access, ErrAccess)
		}
		if b.Access&(ib.AccessRemoteWrite|ib.AccessRemoteAtomic) != 0 && r.access&ib.AccessLocalWrite == 0 {
			return fmt.Errorf("writable window on mr lkey %#x without LOCAL_WRITE: %w", b.MRLKey, ErrAccess)
		}
		var ok bool
		if off, ok = r.offset(b.Addr, b.Length); !ok {
			return fmt.Errorf("[%#x, +%d) outside mr [%#x, +%d): %w", b.Addr, b.Length, r.va, len(r.buf), ErrBounds)
		}
	}
	t.unbind(w)
	i := keyIndex(w.key)
	w.key = makeKey(i, uint8(b.RKey))
	// The next window or MR at this index gets a key8 past this one.
	t.slots[i].key8 = uint8(b.RKey)
	if r == nil {
		return nil
	}
	w.mr, w.off, w.length, w.access = r, off, b.Length, b.Access
	w.va = b.Addr
	if zb {
		w.va = 0
	}
	if w.typ == MWType2 {
		w.qpn = qpn
		t.bound2++
	}
	r.mws++
	return nil
}

// invalidateMW unbinds a type 2 window of pd (LOCAL_INV, or a peer's
// SEND_WITH_INV): a type 1 window cannot be invalidated (o10-37.2.26),
// nor an unbound one. Caller holds t.mu for writing.
func (t *Table) invalidateMW(pd PD, w *window) error {
	switch {
	case w.pd != pd:
		return fmt.Errorf("dma: invalidate mw %#x: pd %d, window pd %d: %w", w.key, pd, w.pd, ErrPD)
	case w.typ != MWType2:
		return fmt.Errorf("dma: invalidate mw %#x: a type 1 window: %w", w.key, ErrMWType)
	case w.mr == nil:
		return fmt.Errorf("dma: invalidate mw %#x: not bound: %w", w.key, ErrInvalidated)
	}
	t.unbind(w)
	return nil
}

// checkWindow checks a remote access through window w as checkRemote
// does an MR's: PD, bound, the QP (type 2), access, alignment, and that
// the range lies inside the window, not just inside its MR. It returns
// the MR and the offset in it. Caller holds t.mu.
func (w *window) check(pd PD, qpn uint32, va, length uint64, need ib.Access) (*region, uint64, error) {
	switch {
	case w.pd != pd:
		return nil, 0, fmt.Errorf("dma: rkey %#x: qp pd %d, window pd %d: %w", w.key, pd, w.pd, ErrPD)
	case w.mr == nil:
		return nil, 0, fmt.Errorf("dma: rkey %#x: window not bound: %w", w.key, ErrInvalidated)
	case w.typ == MWType2 && w.qpn != qpn:
		return nil, 0, fmt.Errorf("dma: rkey %#x: type 2 window bound on qp %#x, not %#x: %w", w.key, w.qpn, qpn, ErrAccess)
	case w.access&need != need:
		return nil, 0, fmt.Errorf("dma: rkey %#x: needs %v, window has %v: %w", w.key, need, w.access, ErrAccess)
	case need == ib.AccessRemoteAtomic && va%atomicLen != 0:
		return nil, 0, fmt.Errorf("dma: rkey %#x: atomic va %#x: %w", w.key, va, ErrAlign)
	}
	if va < w.va || va-w.va > w.length || length > w.length-(va-w.va) {
		return nil, 0, fmt.Errorf("dma: rkey %#x: va %#x len %d outside window [%#x, +%d): %w",
			w.key, va, length, w.va, w.length, ErrBounds)
	}
	return w.mr, w.off + (va - w.va), nil
}

// ReleaseQP unbinds the type 2 windows bound on QP qpn of pd, when the
// QP is destroyed: its number may come back for another QP, which must
// not inherit them. It walks the table only while some type 2 window is
// bound (a walk of 65,536 keys took 0.23 ms on the 2-core test machine).
func (t *Table) ReleaseQP(pd PD, qpn uint32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := 0; i < len(t.slots) && t.bound2 > 0; i++ {
		if w := t.slots[i].w; w != nil && w.typ == MWType2 && w.mr != nil && w.pd == pd && w.qpn == qpn {
			t.unbind(w)
		}
	}
}

// MWState is a window's binding, for tests and the monitor.
type MWState struct {
	RKey   uint32
	Bound  bool
	VA     uint64
	Length uint64
	Access ib.Access
	MRKey  uint32
	QPN    uint32
}

// State returns the window's current key and binding.
func (t *Table) State(mw *MW) MWState {
	t.mu.RLock()
	defer t.mu.RUnlock()
	w := mw.w
	s := MWState{RKey: w.key, Bound: w.mr != nil, VA: w.va, Length: w.length, Access: w.access, QPN: w.qpn}
	if w.mr != nil {
		s.MRKey = w.mr.key
	}
	return s
}
