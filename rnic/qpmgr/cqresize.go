package qpmgr

import (
	"fmt"

	"github.com/rnicd/rnicd/abi"
)

// ResizeRing moves the CQ's completions to ring, a new CQE ring in host
// memory (ibv_resize_cq, as rxe's rxe_cq_resize_queue), and returns the
// old one, which no completion is written into once it returns. Under
// the CQ's lock, so that an engine completing into the CQ meanwhile
// waits and then writes into the new ring: the unconsumed CQEs are copied
// into the slots of the new ring that the same indices name, and the
// producer, consumer, armed, flags, events and waiting words go with
// them, so that no completion is lost or seen twice and the client keeps
// its consumer index. A ring smaller than the CQEs waiting in the CQ is
// refused, as rxe refuses it (EINVAL), and so is a consumer index that
// claims more CQEs waiting than the old ring holds: the client wrote it
// and it is hostile.
func (c *CQ) ResizeRing(ring *abi.Ring) (*abi.Ring, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cqe == nil {
		return nil, fmt.Errorf("qpmgr: CQ has no ring in host memory to resize")
	}
	r := c.cqe
	cons := r.ring.Consumer()
	n := r.prod - cons
	if n > r.ring.Slots {
		return nil, fmt.Errorf("qpmgr: consumer index %d is %d CQEs behind the producer %d, more than the %d the ring holds",
			cons, n, r.prod, r.ring.Slots)
	}
	if n > ring.Slots {
		return nil, fmt.Errorf("qpmgr: %d CQEs wait in the CQ, more than %d", n, ring.Slots)
	}
	for i := cons; i != r.prod; i++ {
		copy(ring.Slot(i), r.ring.Slot(i))
	}
	ring.SetConsumer(cons)
	for _, w := range []int{abi.RingArmed, abi.RingFlags, abi.RingEvents, abi.RingWaiting} {
		ring.Store(w, r.ring.Load(w))
	}
	ring.SetProducer(r.prod)
	old := r.ring
	r.ring = ring
	return old, nil
}
