package rnic

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/rnicd/rnicd/abi"
	"github.com/rnicd/rnicd/ib"
)

// QPRings is the device's doorbell record of a client's QP: its send ring
// and, without an SRQ, its receive ring, handed over by the host interface
// at create_qp (AttachQPRings), as a NIC's QP context holds its queues'
// addresses. The polling engine polls it (HostQueue) and fetches from it
// itself; a doorbell message makes the same fetch (SendDoorbell,
// RecvDoorbell). No call goes back up into the host interface: a WQE
// refused at fetch completes with an error CQE and takes the QP to ERR,
// as a NIC does, and is counted in the host interface's counter (bad).
type QPRings struct {
	d    *Device
	qp   *QP
	send *SendRing
	recv *RecvRing // nil with an SRQ

	// mu is held over each fetch and over a modify (Modify), so that the
	// fetches of one QP run one at a time, in ring order, and none runs
	// between a modify to RESET and the reset of the rings it implies.
	// The engine only tries it: a QP being fetched or modified is polled
	// on its next pass.
	mu         sync.Mutex
	recvSeen   atomic.Uint32 // the receive ring's producer index at the last fetch
	recvBroken atomic.Bool   // a garbage receive producer index: refused until RESET
	bad        *atomic.Uint64
}

// AttachQPRings makes sq and rq (nil with an SRQ, its WQEs of at most
// maxRecvSGE SGEs) qp's rings, read by the device from now on, and has
// the polling engine, if any, poll them. bad counts the WQEs refused at
// fetch. DetachQPRings undoes it.
func (d *Device) AttachQPRings(qp *QP, sq, rq *abi.Ring, maxRecvSGE int, bad *atomic.Uint64) *QPRings {
	r := &QPRings{d: d, qp: qp, bad: bad}
	if rq != nil {
		r.recv = qp.RQ.AttachRing(rq, maxRecvSGE)
	}
	r.send = qp.AttachSendRing(sq)
	d.pipes.watch(r, qp.QPN)
	return r
}

// DetachQPRings stops every use of r's rings: once it returns, the
// engine polls them no more and nothing is retired into them, so their
// memory may go.
func (d *Device) DetachQPRings(r *QPRings) {
	d.pipes.unwatch(r)
	r.qp.AttachSendRing(nil)
	if r.recv != nil {
		r.qp.RQ.SetSource(nil)
	}
}

// StopPolling stops the polling engine's polls of r: once it returns,
// only the doorbells (SendDoorbell, RecvDoorbell) fetch from its rings.
// DetachQPRings does it too; a destroy does it first, so that the engine
// does not fetch while the QP goes.
func (r *QPRings) StopPolling() { r.d.pipes.unwatch(r) }

// HasRecv reports whether the QP has a receive ring of its own (no SRQ).
func (r *QPRings) HasRecv() bool { return r.recv != nil }

// Broken reports whether a ring of the QP had a garbage producer index:
// doorbells are refused until the QP is modified to RESET.
func (r *QPRings) Broken() bool { return r.recvBroken.Load() || r.send.Broken() }

// Pending reports whether the client posted to the send or receive ring
// since the last fetch (HostQueue).
func (r *QPRings) Pending() bool {
	if r.Broken() {
		return false
	}
	return r.send.Pending() || (r.recv != nil && r.recv.Ring().Producer() != r.recvSeen.Load())
}

// Poll fetches what Pending says is new, as the doorbells would
// (HostQueue). What it refuses is completed with errors and counted; no
// doorbell message waits for an answer.
func (r *QPRings) Poll() bool {
	if !r.mu.TryLock() {
		return false
	}
	defer r.mu.Unlock()
	if r.Broken() {
		return false
	}
	work := false
	if r.send.Pending() {
		work = true
		r.send.Ring().ClearBell()
		r.fetchSend()
	}
	if r.recv != nil && r.recv.Ring().Producer() != r.recvSeen.Load() {
		work = true
		r.fetchRecv()
	}
	return work
}

// SetAsleep writes the asleep word of the QP's rings (HostQueue).
func (r *QPRings) SetAsleep(on bool) {
	r.send.Ring().SetAsleep(on)
	if r.recv != nil {
		r.recv.Ring().SetAsleep(on)
	}
}

// SendDoorbell is the send doorbell: the device fetches, validates and
// queues the send WQEs posted since its last fetch (the WQE fetch,
// fetch.go). It returns the first refused WQE's error.
func (r *QPRings) SendDoorbell() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.send.Ring().ClearBell()
	return r.fetchSend()
}

// RecvDoorbell is the receive doorbell: the receive queue fetches the
// WQEs posted since its last fetch. A WQE that does not decode completes
// with LOC_QP_OP_ERR and takes the QP to ERR; a garbage producer index
// takes it to ERR and breaks the ring until RESET.
func (r *QPRings) RecvDoorbell() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.fetchRecv()
}

// Fetch makes both doorbells' fetches, for a daemon that exits: what was
// posted is then flushed with the rest.
func (r *QPRings) Fetch() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.Broken() {
		return
	}
	r.fetchSend()
	if r.recv != nil {
		r.fetchRecv()
	}
}

// Modify modifies the QP (Device.ModifyQP) with no fetch in between; a
// modify to RESET empties the queues without completions (nothing is
// retired, nothing will be), so the rings start again from 0, on both
// sides, and a broken ring is whole again.
func (r *QPRings) Modify(attr *ib.QPAttr, mask ib.AttrMask) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.d.ModifyQP(r.qp, attr, mask); err != nil {
		return err
	}
	if mask&ib.AttrState != 0 && attr.State == ib.QPSReset {
		r.send.Reset()
		r.recvBroken.Store(false)
		if r.recv != nil {
			r.qp.RQ.SetSource(nil)
			r.recv.Reset()
			r.recvSeen.Store(0)
			r.qp.RQ.SetSource(r.recv)
		}
	}
	return nil
}

// fetchSend fetches from the send ring; mu is held.
func (r *QPRings) fetchSend() error {
	failed, err := r.d.pipes.fetchSend(r.qp)
	r.bad.Add(uint64(failed))
	return err
}

// fetchRecv fetches from the receive ring; mu is held.
func (r *QPRings) fetchRecv() error {
	qp := r.qp
	r.recvSeen.Store(r.recv.Ring().Producer())
	refillRecv(qp)
	bad, broken := r.recv.Faults()
	if broken != nil {
		r.recvBroken.Store(true)
		r.bad.Add(1)
		r.d.EnterError(qp)
		return fmt.Errorf("rnic: QP %#x receive queue: %w", qp.QPN, broken)
	}
	for _, b := range bad {
		r.bad.Add(1)
		r.d.pipes.failRecv(qp, b.WRID)
	}
	if len(bad) > 0 {
		return fmt.Errorf("rnic: QP %#x receive WQE wr_id %d: %w", qp.QPN, bad[0].WRID, bad[0].Err)
	}
	return nil
}

// SRQRing is the device's doorbell record of a client's SRQ: its ring,
// handed over at create_srq (AttachSRQRing), polled and fetched from by
// the device itself as QPRings is. A WQE that does not decode has no QP
// to fail: it is dropped, counted (bad) and its slot retired.
type SRQRing struct {
	d    *Device
	srq  *SRQ
	ring *RecvRing
	seen atomic.Uint32 // the ring's producer index at the last fetch
	bad  *atomic.Uint64
}

// AttachSRQRing makes ring (WQEs of at most maxSGE SGEs) srq's source and
// has the engine of key, if any, poll it. bad counts the WQEs refused at
// fetch. DetachSRQRing undoes it.
func (d *Device) AttachSRQRing(srq *SRQ, ring *abi.Ring, maxSGE int, key uint32, bad *atomic.Uint64) *SRQRing {
	s := &SRQRing{d: d, srq: srq, ring: srq.AttachRing(ring, maxSGE), bad: bad}
	d.pipes.watch(s, key)
	return s
}

// DetachSRQRing stops the engine's polls of s and the SRQ's fetches from
// its ring: once it returns, the ring's memory may go.
func (d *Device) DetachSRQRing(s *SRQRing) {
	d.pipes.unwatch(s)
	s.srq.SetSource(nil)
}

// Pending reports whether the client posted since the last fetch
// (HostQueue).
func (s *SRQRing) Pending() bool { return s.ring.Ring().Producer() != s.seen.Load() }

// Poll fetches the SRQ's new WQEs (HostQueue).
func (s *SRQRing) Poll() bool {
	if !s.Pending() {
		return false
	}
	s.Doorbell()
	return true
}

// SetAsleep writes the SRQ ring's asleep word (HostQueue).
func (s *SRQRing) SetAsleep(on bool) { s.ring.Ring().SetAsleep(on) }

// Doorbell is the SRQ's doorbell: it fetches the WQEs posted since the
// last fetch and returns the first refused one's error.
func (s *SRQRing) Doorbell() error {
	s.seen.Store(s.ring.Ring().Producer())
	s.srq.Refill()
	bad, broken := s.ring.Faults()
	if broken != nil {
		s.bad.Add(1)
		return fmt.Errorf("rnic: SRQ: %w", broken)
	}
	if len(bad) > 0 {
		s.bad.Add(uint64(len(bad)))
		return fmt.Errorf("rnic: SRQ receive WQE wr_id %d: %w", bad[0].WRID, bad[0].Err)
	}
	return nil
}
