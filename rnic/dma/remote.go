package dma

import (
	"fmt"

	"github.com/rnicd/rnicd/ib"
)

// checkRemote checks a remote access of length bytes at va through rkey, in
// the order rxe's responder checks: key, PD, state, access, then (atomics
// only) alignment, then bounds. need is the remote flag the operation
// requires; qpn is the QP the request came on, which a type 2 memory
// window must have been bound on (an rkey of a window is checked by the
// window: mw.go). Caller holds t.mu.
func (t *Table) checkRemote(pd PD, qpn, rkey uint32, va, length uint64, need ib.Access) (*region, uint64, error) {
	if need == 0 || need&^ib.AccessRemote != 0 {
		// A caller bug, not a packet's; refuse rather than let it through.
		return nil, 0, fmt.Errorf("dma: rkey %#x: remote access needs a REMOTE_* flag, asked %v: %w", rkey, need, ErrAccess)
	}
	r := t.lookup(rkey)
	if r == nil {
		if w := t.lookupMW(rkey); w != nil {
			return w.check(pd, qpn, va, length, need)
		}
		return nil, 0, fmt.Errorf("dma: rkey %#x: %w", rkey, ErrBadKey)
	}
	if r.pd != pd {
		return nil, 0, fmt.Errorf("dma: rkey %#x: qp pd %d, mr pd %d: %w", rkey, pd, r.pd, ErrPD)
	}
	if r.invalid.Load() {
		return nil, 0, fmt.Errorf("dma: rkey %#x: %w", rkey, ErrInvalidated)
	}
	if r.access&need != need {
		return nil, 0, fmt.Errorf("dma: rkey %#x: needs %v, mr has %v: %w", rkey, need, r.access, ErrAccess)
	}
	if need == ib.AccessRemoteAtomic && va%atomicLen != 0 {
		return nil, 0, fmt.Errorf("dma: rkey %#x: atomic va %#x: %w", rkey, va, ErrAlign)
	}
	off, ok := r.offset(va, length)
	if !ok {
		return nil, 0, fmt.Errorf("dma: rkey %#x: va %#x len %d outside mr [%#x, +%d): %w",
			rkey, va, length, r.va, len(r.buf), ErrBounds)
	}
	return r, off, nil
}

// Remote returns the registered memory [va, va+length) of the MR or memory
// window with rkey, for a request on QP qpn, after checking the PD (the QP's), that the rkey has not been invalidated,
// the access the operation needs (AccessRemoteWrite for RDMA WRITE,
// AccessRemoteRead for RDMA READ, AccessRemoteAtomic) and the bounds. The
// returned slice has capacity length, so even append cannot reach past it.
//
// A zero-length RDMA operation does not check its rkey (IBTA: the R_Key and
// VA of a zero-length RETH are not validated, and rxe skips them), so length
// 0 returns nil, nil without any check.
//
// The slice aliases registered memory; the caller copies the packet payload
// into it (WRITE) or out of it (READ) before handling its next packet, and
// must not keep it: after Deregister the memory is the application's again.
func (t *Table) Remote(pd PD, qpn, rkey uint32, va uint64, length uint32, need ib.Access) ([]byte, error) {
	if length == 0 {
		return nil, nil
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	r, off, err := t.checkRemote(pd, qpn, rkey, va, uint64(length), need)
	if err != nil {
		return nil, err
	}
	end := off + uint64(length)
	return r.buf[off:end:end], nil
}
