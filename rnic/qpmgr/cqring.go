package qpmgr

import (
	"sync/atomic"

	"github.com/rnicd/rnicd/abi"
	"github.com/rnicd/rnicd/ib"
)

// cqeRing is a CQ's completion ring in memory the host shares with the
// NIC, written by the device itself as a NIC writes CQEs by DMA: the host
// interface maps the ring and hands it over (CQ.AttachRing) with the
// write ends of its wake pipes (the CQ's waiter and its completion
// channel, the NIC's interrupt lines), and the device writes each
// completion into it, arms and wakes with no call back up. Its fields are
// the CQ's lock's.
type cqeRing struct {
	ring     *abi.Ring
	prod     uint32
	waitFD   int            // the CQ's waiter's wake pipe
	chanFD   int            // the completion channel's wake pipe, -1: none
	overruns *atomic.Uint64 // the host interface's count of completions lost
	errTold  bool           // CQ_ERR was raised (CQ.SetErrorHandler)
}

// AttachRing makes every later completion of c go into ring, a CQE ring
// in host memory, and wakes waitFD (a waiter) and chanFD (an armed CQ's
// channel, -1 for none) as its header words ask; overruns counts the
// completions that found the ring full. DetachRing undoes it.
func (c *CQ) AttachRing(ring *abi.Ring, waitFD, chanFD int, overruns *atomic.Uint64) {
	c.mu.Lock()
	c.cqe = &cqeRing{ring: ring, waitFD: waitFD, chanFD: chanFD, overruns: overruns}
	c.detached = false
	c.mu.Unlock()
}

// DetachRing stops every write into the CQ's ring: once it returns, the
// ring's memory and the wake pipes may go. Later completions are dropped,
// as the CQ is being destroyed.
func (c *CQ) DetachRing() {
	c.mu.Lock()
	c.cqe, c.detached = nil, true
	c.mu.Unlock()
}

// next returns the slot the next completion goes to, or ib.ErrCQOverrun
// if the ring is full. The client's consumer index is hostile: any value
// only makes the ring look fuller or emptier to the client itself.
func (r *cqeRing) next() ([]byte, error) {
	if r.prod-r.ring.Consumer() >= r.ring.Slots {
		r.ring.SetFlag(abi.FlagOverrun)
		r.overruns.Add(1)
		return nil, ib.ErrCQOverrun
	}
	return r.ring.Slot(r.prod), nil
}

// publish makes the completion written into next's slot the client's,
// takes the CQ's arm if the completion matches it (an event to the
// channel) and wakes a waiter.
func (r *cqeRing) publish(solicited bool, st ib.WCStatus) {
	r.prod++
	r.ring.SetProducer(r.prod)
	if a := r.ring.Armed(); a == abi.ArmAny || (a == abi.ArmSolicited && (solicited || st != ib.WCSuccess)) {
		if r.ring.Disarm(a) {
			r.ring.AddEvent()
			if r.chanFD >= 0 {
				abi.Wake(r.chanFD)
			}
		}
	}
	if r.ring.TakeWaiter() {
		abi.Wake(r.waitFD)
	}
}
