package dma

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/rnicd/rnicd/ib"
)

// PD is a protection domain handle. 0 is invalid: no caller allocates it, so
// Register refuses it and a zero PD in a lookup matches nothing.
type PD uint32

// The sentinels every error of this package wraps; test with errors.Is. The
// transport engines map them to completion statuses and NAKs
// (ErrBadKey, ErrPD, ErrAccess, ErrBounds, ErrInvalidated -> remote access
// error / IBV_WC_LOC_PROT_ERR; ErrAlign -> invalid request).
var (
	ErrBadKey      = errors.New("no memory region with this key")
	ErrPD          = errors.New("memory region belongs to another protection domain")
	ErrAccess      = errors.New("access flags do not allow this access")
	ErrBounds      = errors.New("range outside the memory region")
	ErrAlign       = errors.New("atomic address not 8-byte aligned")
	ErrInvalidated = errors.New("rkey has been invalidated")
	ErrBadAccess   = errors.New("invalid access flags for registration")

	// ErrBusy: an MR with memory windows bound to it cannot be deregistered.
	ErrBusy = errors.New("memory windows are bound to the memory region")

	// ErrNoResources: the MR table has no free index (2^24-1 regions).
	ErrNoResources = errors.New("memory region table full")
)

// Keys are formed as rxe forms them: the MR's table index in the upper 24
// bits and an 8-bit key in the low byte. The 8-bit key of an index changes
// every time the index is reused, so a key kept after Deregister (by the
// application or by a peer that was told the rkey) does not reach the next MR
// that lands on the same index.
const (
	keyBits = 8

	// MaxMRIndex is the largest table index; index 0 is never used, so no
	// valid key is below 0x100 and key 0 is never valid.
	MaxMRIndex = 1<<(32-keyBits) - 1
)

func keyIndex(key uint32) uint32 { return key >> keyBits }
func makeKey(index uint32, key8 uint8) uint32 {
	return index<<keyBits | uint32(key8)
}

// MR is a registered memory region. LKey == RKey. The exported fields are a
// copy for the caller to read; changing them changes nothing: the Table checks
// accesses against its own copy.
type MR struct {
	LKey, RKey uint32
	PD         PD
	Access     ib.Access
	VA         uint64 // address the region answers to: the application's virtual address, or 0 if ZeroBased
	Len        uint64

	r *region
}

// Bytes returns the registered memory (for tests and local users). Its
// capacity is its length, so appending to it never reaches memory beyond the
// region.
func (m *MR) Bytes() []byte { return m.r.buf }

// Invalidated reports whether the MR's rkey has been invalidated.
func (m *MR) Invalidated() bool { return m.r.invalid.Load() }

func (m *MR) String() string {
	s := fmt.Sprintf("mr lkey=%#x rkey=%#x pd=%d va=%#x len=%d access=%v",
		m.LKey, m.RKey, m.PD, m.VA, m.Len, m.Access)
	if m.Invalidated() {
		s += " invalidated"
	}
	return s
}

// region is the table's own, authoritative record of an MR.
type region struct {
	key    uint32
	pd     PD
	access ib.Access
	va     uint64
	buf    []byte // len == cap == region length

	// mws counts the memory windows bound to the region (mw.go):
	// while it is not 0 the region cannot be deregistered.
	mws int

	// invalid is set by Invalidate. It is written under the table's write
	// lock and read under its read lock; it is atomic only so that
	// MR.Invalidated can be called without the lock.
	invalid atomic.Bool

	mr *MR
}

// offset returns the offset in the region of [addr, addr+length), or false if
// any byte of it lies outside. Written so nothing can overflow: addr+length is
// never computed.
func (r *region) offset(addr, length uint64) (uint64, bool) {
	if addr < r.va {
		return 0, false
	}
	off := addr - r.va
	n := uint64(len(r.buf))
	if off > n || length > n-off {
		return 0, false
	}
	return off, true
}

type slot struct {
	r    *region // nil when the index is free or holds a memory window
	w    *window // the memory window at this index (mw.go), or nil
	key8 uint8   // 8-bit key of the current (or, when free, last) MR or window at this index
}

// Table is the memory translation and protection table of the device. The
// zero value is not usable; use NewTable. It is safe for concurrent use: the
// send and receive pipelines look keys up at the same time (read lock) while
// the verbs side registers and deregisters (write lock).
type Table struct {
	mu       sync.RWMutex
	slots    []slot   // indexed by key index; slots[0] is never used
	free     []uint32 // indexes ready for reuse, oldest first from freeHead
	freeHead int
	count    int
	bound2   int // type 2 memory windows bound (mw.go)

	// atomicMu serialises the atomics (IBV_ATOMIC_HCA): see atomic.go.
	atomicMu sync.Mutex
}

// NewTable returns an empty MR table.
func NewTable() *Table {
	return &Table{slots: make([]slot, 1, 64)}
}

// Len returns the number of registered MRs.
func (t *Table) Len() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.count
}

// Register registers buf as a memory region of pd (ibv_reg_mr). va is the
// address the region answers to, for both lkey (SGE) and rkey (RETH)
// addressing; with AccessZeroBased it is ignored and the region answers to
// [0, len(buf)). The memory is shared, not copied: the NIC reads and writes
// buf itself, as a real NIC DMAs into the application's pages.
//
// REMOTE_WRITE or REMOTE_ATOMIC without LOCAL_WRITE, or an unknown flag, is
// ErrBadAccess; pd 0 is ErrPD; a region that would wrap the 64-bit address
// space is ErrBounds.
func (t *Table) Register(pd PD, buf []byte, va uint64, access ib.Access) (*MR, error) {
	if pd == 0 {
		return nil, fmt.Errorf("dma: register: pd 0: %w", ErrPD)
	}
	if !validRegAccess(access) {
		return nil, fmt.Errorf("dma: register: access %v: %w", access, ErrBadAccess)
	}
	if access&ib.AccessZeroBased != 0 {
		va = 0
	}
	n := uint64(len(buf))
	if n > 0 && va > ^uint64(0)-(n-1) {
		return nil, fmt.Errorf("dma: register: va %#x len %d wraps: %w", va, n, ErrBounds)
	}

	r := &region{
		pd:     pd,
		access: access,
		va:     va,
		buf:    buf[:len(buf):len(buf)],
	}

	t.mu.Lock()
	defer t.mu.Unlock()
	index, err := t.allocIndex()
	if err != nil {
		return nil, fmt.Errorf("dma: register: %w", err)
	}
	s := &t.slots[index]
	s.r = r
	r.key = makeKey(index, s.key8)
	r.mr = &MR{
		LKey:   r.key,
		RKey:   r.key,
		PD:     pd,
		Access: access,
		VA:     va,
		Len:    n,
		r:      r,
	}
	t.count++
	return r.mr, nil
}

// allocIndex takes a free table index for a new MR or memory window
// and gives it its next key8. Caller holds t.mu.
func (t *Table) allocIndex() (uint32, error) {
	var index uint32
	if t.freeHead < len(t.free) {
		// FIFO reuse: an index rests as long as possible before it comes
		// back, which makes a stale key meeting the same key8 rarer.
		index = t.free[t.freeHead]
		t.freeHead++
		if t.freeHead == len(t.free) {
			t.free, t.freeHead = t.free[:0], 0
		} else if t.freeHead > 64 && t.freeHead*2 > len(t.free) {
			n := copy(t.free, t.free[t.freeHead:])
			t.free, t.freeHead = t.free[:n], 0
		}
	} else {
		if len(t.slots) > MaxMRIndex {
			return 0, ErrNoResources
		}
		index = uint32(len(t.slots))
		t.slots = append(t.slots, slot{key8: initialKey8(index)})
	}
	t.slots[index].key8++ // a new key8 on every use of the index
	return index, nil
}

// initialKey8 spreads the first key8 of each index, so keys of neighbouring
// MRs do not differ only in their index; deterministic, so traces and tests
// repeat. It is the value before the first increment.
func initialKey8(index uint32) uint8 {
	return uint8(index*0x9d) - 1
}

// lookup returns the region of key, or nil. Caller holds t.mu (either mode).
func (t *Table) lookup(key uint32) *region {
	i := keyIndex(key)
	if i == 0 || i >= uint32(len(t.slots)) {
		return nil
	}
	r := t.slots[i].r
	if r == nil || r.key != key {
		return nil
	}
	return r
}

// Deregister removes the MR with this lkey (ibv_dereg_mr). Its key, and its
// rkey, stop working at once; the index is reused later with another key8.
// A Remote slice handed out before Deregister must not be used after it (as
// on hardware, the transport engines finish the packet in flight first).
func (t *Table) Deregister(lkey uint32) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.lookup(lkey)
	if r == nil {
		return fmt.Errorf("dma: deregister lkey %#x: %w", lkey, ErrBadKey)
	}
	if r.mws > 0 {
		// IBTA 10.6.7.2.6, rxe_dereg_mr: not while windows are bound to it.
		return fmt.Errorf("dma: deregister lkey %#x: %d memory windows bound: %w", lkey, r.mws, ErrBusy)
	}
	i := keyIndex(lkey)
	t.slots[i].r = nil
	t.free = append(t.free, i)
	t.count--
	return nil
}

// Lookup returns the MR with this key (lkey or rkey), if registered.
func (t *Table) Lookup(key uint32) (*MR, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	r := t.lookup(key)
	if r == nil {
		return nil, false
	}
	return r.mr, true
}

// Invalidate marks the MR with this rkey invalid for remote access, as the
// responder does for SEND_WITH_INV (the IETH names the rkey) and a local
// invalidate work request does. Its PD must be pd. Local (lkey) access is
// unaffected. Invalidating an already invalid rkey succeeds. An rkey of a
// memory window unbinds the window (invalidateMW).
func (t *Table) Invalidate(pd PD, rkey uint32) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.lookup(rkey)
	if r == nil {
		if w := t.lookupMW(rkey); w != nil {
			return t.invalidateMW(pd, w)
		}
		return fmt.Errorf("dma: invalidate rkey %#x: %w", rkey, ErrBadKey)
	}
	if r.pd != pd {
		return fmt.Errorf("dma: invalidate rkey %#x: pd %d, mr pd %d: %w", rkey, pd, r.pd, ErrPD)
	}
	r.invalid.Store(true)
	return nil
}
