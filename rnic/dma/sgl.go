package dma

import (
	"fmt"
	"math"

	"github.com/rnicd/rnicd/ib"
)

// checkSGE checks one SGE for local access; it returns the region and the
// offset of Addr in it. Caller holds t.mu.
func (t *Table) checkSGE(pd PD, sge *ib.SGE, write bool) (*region, uint64, error) {
	r := t.lookup(sge.LKey)
	if r == nil {
		return nil, 0, fmt.Errorf("lkey %#x: %w", sge.LKey, ErrBadKey)
	}
	if r.pd != pd {
		return nil, 0, fmt.Errorf("lkey %#x: pd %d, mr pd %d: %w", sge.LKey, pd, r.pd, ErrPD)
	}
	if write && r.access&ib.AccessLocalWrite == 0 {
		return nil, 0, fmt.Errorf("lkey %#x: write needs LOCAL_WRITE, mr has %v: %w", sge.LKey, r.access, ErrAccess)
	}
	off, ok := r.offset(sge.Addr, uint64(sge.Length))
	if !ok {
		return nil, 0, fmt.Errorf("lkey %#x: addr %#x len %d outside mr [%#x, +%d): %w",
			sge.LKey, sge.Addr, sge.Length, r.va, len(r.buf), ErrBounds)
	}
	return r, off, nil
}

// CheckSGL validates every SGE of a work request against pd (key exists, same
// PD, inside its MR, and LOCAL_WRITE if write: a receive WQE or a READ's
// destination) and returns the total length of the message the SGL describes.
// The transport engines call it when a WQE is posted or fetched, so bad work
// requests fail before any packet is built.
func (t *Table) CheckSGL(pd PD, sgl []ib.SGE, write bool) (total int, err error) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	var sum uint64
	for i := range sgl {
		if sgl[i].Length == 0 {
			continue
		}
		if _, _, err := t.checkSGE(pd, &sgl[i], write); err != nil {
			return 0, fmt.Errorf("dma: sge %d: %w", i, err)
		}
		sum += uint64(sgl[i].Length)
	}
	// Only reachable on 32-bit platforms or with billions of SGEs.
	if sum > math.MaxInt {
		return 0, fmt.Errorf("dma: sgl total %d overflows int: %w", sum, ErrBounds)
	}
	return int(sum), nil
}

// Gather copies len(dst) bytes starting at byte offset off of the message
// described by sgl into dst: the requester reading the payload of a packet.
// A local read needs no access flag; key, PD and bounds are checked for every
// SGE the range touches. It is an error if off+len(dst) goes past the end of
// the message.
func (t *Table) Gather(pd PD, sgl []ib.SGE, off int, dst []byte) error {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.transfer(pd, sgl, off, dst, false)
}

// View returns the n bytes at byte offset off of the message sgl describes
// as a slice of the registered region itself, when they lie in one SGE
// (the usual case: a payload of one MTU inside one buffer); ok is false,
// with a nil error, when they span SGEs and the caller must Gather. Key,
// PD and bounds are checked as Gather checks them, and the slice's
// capacity ends with its length, so nothing outside the range is
// reachable through it.
//
// The slice is the application's memory: it stays valid only while the
// region stays registered and mapped. The requester sends it before its
// pipeline lock goes, and whoever unmaps a deregistered region waits for
// that lock first (rnic's Device.Fence), the guarantee Gather's copy had.
func (t *Table) View(pd PD, sgl []ib.SGE, off, n int) (mem []byte, ok bool, err error) {
	if off < 0 || n <= 0 {
		return nil, false, nil
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	var pos uint64 // message offset of the start of sgl[i]
	start, end := uint64(off), uint64(off)+uint64(n)
	for i := range sgl {
		sge := &sgl[i]
		l := uint64(sge.Length)
		if pos+l <= start {
			pos += l
			continue
		}
		if pos+l < end {
			return nil, false, nil // spans SGEs, or runs past the SGL: Gather decides
		}
		r, roff, err := t.checkSGE(pd, sge, false)
		if err != nil {
			return nil, false, fmt.Errorf("dma: sge %d: %w", i, err)
		}
		lo, hi := roff+(start-pos), roff+(end-pos)
		return r.buf[lo:hi:hi], true, nil
	}
	return nil, false, nil
}

// Scatter copies src into the message described by sgl starting at message
// offset off: the responder placing a SEND into a receive WQE's buffers, or
// the completer placing a READ response. Every MR touched needs LOCAL_WRITE.
// The whole range is checked before the first byte is written, so a failed
// Scatter writes nothing.
func (t *Table) Scatter(pd PD, sgl []ib.SGE, off int, src []byte) error {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.transfer(pd, sgl, off, src, true)
}

// transfer runs the SGL walk twice under one read lock: the first pass checks
// every SGE the range [off, off+len(p)) touches and that the range fits in the
// message, the second copies. Holding the lock across both means no MR can be
// deregistered in between, so the second pass cannot fail; this is what makes
// a failed Scatter write nothing. Two walks over a short SGL cost less than
// collecting the checked slices, which would need a buffer of unbounded size.
func (t *Table) transfer(pd PD, sgl []ib.SGE, off int, p []byte, write bool) error {
	if off < 0 {
		return fmt.Errorf("dma: negative message offset %d: %w", off, ErrBounds)
	}
	if err := t.walk(pd, sgl, uint64(off), p, write, false); err != nil {
		return err
	}
	return t.walk(pd, sgl, uint64(off), p, write, true)
}

// walk visits the part of each SGE that the message range [off, off+len(p))
// covers; with copyNow false it only checks, with copyNow true it also moves
// the bytes (from the region into p for a gather, from p into the region for a
// scatter).
func (t *Table) walk(pd PD, sgl []ib.SGE, off uint64, p []byte, write, copyNow bool) error {
	// pos is the message offset of the start of sgl[i]; all in uint64, where
	// 2^32 SGEs of 2^32 bytes cannot overflow.
	var pos uint64
	end := off + uint64(len(p)) // off and len(p) are both < 2^63
	for i := range sgl {
		sge := &sgl[i]
		if pos >= end {
			break
		}
		n := uint64(sge.Length)
		if n == 0 {
			continue
		}
		if pos+n <= off { // entirely before the range
			pos += n
			continue
		}
		r, roff, err := t.checkSGE(pd, sge, write)
		if err != nil {
			return fmt.Errorf("dma: sge %d: %w", i, err)
		}
		// The overlap of [pos, pos+n) with [off, end).
		lo := max(pos, off)
		hi := min(pos+n, end)
		if copyNow {
			mem := r.buf[roff+(lo-pos) : roff+(hi-pos)]
			if write {
				copy(mem, p[lo-off:hi-off])
			} else {
				copy(p[lo-off:hi-off], mem)
			}
		}
		pos += n
	}
	if pos < end {
		return fmt.Errorf("dma: message range [%d, %d) past sgl end %d: %w", off, end, pos, ErrBounds)
	}
	return nil
}
