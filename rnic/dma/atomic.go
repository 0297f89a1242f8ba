package dma

import (
	"encoding/binary"

	"github.com/rnicd/rnicd/ib"
)

// The atomics operate on the 8 bytes at va in host byte order
// (binary.NativeEndian), as rxe does with a plain *(u64 *) access: the
// AtomicETH carries the operands big-endian and the responder converts them,
// but the memory holds a native uint64 the application reads directly.
//
// Atomicity is IBV_ATOMIC_HCA (the device's atomic_cap): atomics through this
// Table are atomic with respect to each other, because one table-wide mutex
// serialises them, but not with respect to the CPU or to RDMA WRITEs touching
// the same bytes. That is what rxe offers too, and what a verbs application
// may rely on when ibv_query_device reports IBV_ATOMIC_HCA.

// atomicLen is the size of the operand of every IBTA atomic.
const atomicLen = 8

// atomicWord checks an atomic access at va (an AtomicETH must name an
// 8-byte aligned address, else ErrAlign) and returns the 8 bytes. Caller
// holds t.mu.RLock.
func (t *Table) atomicWord(pd PD, qpn, rkey uint32, va uint64) ([]byte, error) {
	r, off, err := t.checkRemote(pd, qpn, rkey, va, atomicLen, ib.AccessRemoteAtomic)
	if err != nil {
		return nil, err
	}
	return r.buf[off : off+atomicLen : off+atomicLen], nil
}

// AtomicCompareSwap performs IBTA CmpSwap on the 8 bytes at va of the MR
// or window (for QP qpn) with rkey: if they equal compare they become
// swap. It returns the original value either way, which the responder sends back in the AtomicAckETH.
func (t *Table) AtomicCompareSwap(pd PD, qpn, rkey uint32, va uint64, compare, swap uint64) (orig uint64, err error) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	w, err := t.atomicWord(pd, qpn, rkey, va)
	if err != nil {
		return 0, err
	}
	t.atomicMu.Lock()
	orig = binary.NativeEndian.Uint64(w)
	if orig == compare {
		binary.NativeEndian.PutUint64(w, swap)
	}
	t.atomicMu.Unlock()
	return orig, nil
}

// AtomicFetchAdd performs IBTA FetchAdd on the 8 bytes at va of the MR with
// rkey: they become orig+add, modulo 2^64. It returns the original value.
func (t *Table) AtomicFetchAdd(pd PD, qpn, rkey uint32, va uint64, add uint64) (orig uint64, err error) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	w, err := t.atomicWord(pd, qpn, rkey, va)
	if err != nil {
		return 0, err
	}
	t.atomicMu.Lock()
	orig = binary.NativeEndian.Uint64(w)
	binary.NativeEndian.PutUint64(w, orig+add)
	t.atomicMu.Unlock()
	return orig, nil
}
