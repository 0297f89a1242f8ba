package qpmgr

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/rnicd/rnicd/abi"
	"github.com/rnicd/rnicd/ib"
)

// RecvRing is a receive queue's ring in memory the host shares with the
// NIC (a QP's receive queue or an SRQ), read by the device itself as a
// NIC reads its receive WQEs by DMA: the host interface maps it and hands
// it over (RecvQueue.AttachRing), and the queue fetches from it when it
// runs empty and at each doorbell, so a message that arrives before the
// doorbell is handled still finds the receive the client posted, and
// retires WQEs to it as they complete, with no call back up.
type RecvRing struct {
	ring    *abi.Ring
	maxSGE  int
	fetched uint32        // the queue's lock's
	done    atomic.Uint32 // receive WQEs completed

	mu     sync.Mutex // bad, broken: read by the doorbell's goroutine
	bad    []BadWQE
	broken error // a garbage producer index
}

// BadWQE is a receive WQE that did not decode at fetch.
type BadWQE struct {
	WRID uint64
	Err  error
}

// AttachRing makes r, a receive ring of WQEs of at most maxSGE SGEs, the
// queue's source and returns the device's view of it.
func (q *RecvQueue) AttachRing(r *abi.Ring, maxSGE int) *RecvRing {
	rr := &RecvRing{ring: r, maxSGE: maxSGE}
	q.SetSource(rr)
	return rr
}

// Ring returns the ring, for the host interface's header words.
func (f *RecvRing) Ring() *abi.Ring { return f.ring }

// Retire frees n slots of the ring (RecvSource).
func (f *RecvRing) Retire(n int) { f.ring.SetConsumer(f.done.Add(uint32(n))) }

// Fetch decodes up to room new WQEs (RecvSource); the receive queue's
// lock is held. A malformed one is retired (its slot counted done) and
// left for the doorbell to report (Faults).
func (f *RecvRing) Fetch(room int) []ib.RecvWR {
	n, err := f.ring.NewWQEs(f.fetched, f.done.Load)
	if err != nil {
		f.mu.Lock()
		f.broken = fmt.Errorf("qpmgr: receive ring: %w", err)
		f.mu.Unlock()
		return nil
	}
	var out []ib.RecvWR
	for n > 0 && len(out) < room {
		wr, err := abi.DecodeRecvWQE(f.ring.Slot(f.fetched), f.maxSGE)
		f.fetched++
		n--
		if err != nil {
			f.mu.Lock()
			f.bad = append(f.bad, BadWQE{wr.WRID, err})
			f.mu.Unlock()
			f.Retire(1)
			continue
		}
		out = append(out, wr)
	}
	return out
}

// Reset starts the ring again from 0 (modify to RESET). The ring must not
// be the queue's source meanwhile (SetSource(nil) first).
func (f *RecvRing) Reset() {
	f.fetched = 0
	f.done.Store(0)
	f.ring.Reset()
	f.mu.Lock()
	f.bad, f.broken = nil, nil
	f.mu.Unlock()
}

// Faults returns, and forgets, the WQEs Fetch refused since the last
// call, and whether the ring is garbage.
func (f *RecvRing) Faults() ([]BadWQE, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	bad, broken := f.bad, f.broken
	f.bad = nil
	return bad, broken
}
