package qpmgr

import (
	"fmt"
	"sync"

	"github.com/rnicd/rnicd/wire/bth"
)

// FirstQPN is the first QPN handed out: rxe starts at 0x11 (QP0 and QP1
// are special, 2..0x10 reserved), so the QPNs in a capture match rxe's.
const FirstQPN = 0x11

// Table maps QPNs to QPs. It is safe for concurrent use: the receive
// pipeline looks QPs up for every packet.
type Table struct {
	mu          sync.RWMutex
	qps         map[uint32]*QP
	first, last uint32 // the QPNs Alloc hands out
	next        uint32
	// XRCSRQs are the device's XRC SRQs, which XRC requests name by
	// number.
	XRCSRQs XRCSRQTable
}

// NewTable returns an empty table handing out every QPN from FirstQPN.
func NewTable() *Table { return NewTableRange(FirstQPN, bth.QPNMask) }

// NewTableRange returns an empty table handing out QPNs first..last
// (a steering block's, steer.Group), clamped to FirstQPN..2^24-1.
func NewTableRange(first, last uint32) *Table {
	first, last = max(first, FirstQPN), min(last, bth.QPNMask)
	return &Table{qps: make(map[uint32]*QP), first: first, last: last, next: first}
}

// Alloc reserves a fresh QPN.
func (t *Table) Alloc() (uint32, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for n := int64(t.last) - int64(t.first) + 1; n > 0; n-- {
		qpn := t.next
		t.next++
		if t.next > t.last {
			t.next = t.first
		}
		if _, used := t.qps[qpn]; !used {
			t.qps[qpn] = nil
			return qpn, nil
		}
	}
	return 0, fmt.Errorf("qpmgr: no free QPN")
}

// Insert publishes a QP under its reserved QPN.
func (t *Table) Insert(qp *QP) {
	t.mu.Lock()
	t.qps[qp.QPN] = qp
	t.mu.Unlock()
}

// Remove frees a QPN.
func (t *Table) Remove(qpn uint32) {
	t.mu.Lock()
	delete(t.qps, qpn)
	t.mu.Unlock()
}

// Lookup finds the QP with QPN qpn.
func (t *Table) Lookup(qpn uint32) *QP {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.qps[qpn]
}

// All returns every QP.
func (t *Table) All() []*QP {
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := make([]*QP, 0, len(t.qps))
	for _, qp := range t.qps {
		if qp != nil {
			out = append(out, qp)
		}
	}
	return out
}
