package rnic

import (
	"sync"
	"sync/atomic"

	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/rnic/qpmgr"
)

// Post coalescing (Config.CoalescePosts): the doorbell of a NIC that runs
// in the application's process.
//
// A post whose send pipeline is idle runs the requester in the poster's
// goroutine (ring), which spares a ping-pong a wake-up. A streaming
// application pays for it with small messages: perftest posts one WR at
// a time, so every 64-byte WRITE ran the requester alone and left in a
// sendmmsg of its own, with no run of equal packets for GSO to carry
// (BENCHMARKS.md: 0.117 Mpps on the lent socket against 0.53 Mpps
// through a daemon, whose doorbells bring ~47 WQEs each).
//
// So a post of single-packet WQEs on an RC QP that still awaits an ACK
// leaves them queued, as TCP's Nagle algorithm (RFC 896) holds a small
// segment while data is unacknowledged. They leave with the first of:
//
//   - the ACK: the completer wakes the requester of a QP with work on
//     any progress (rx.Completer.progress), so every waiting WQE goes within
//     a round trip, or at the retransmission timer if the ACK was lost,
//     whether or not the application polls;
//   - the application's next busy poll (PollRx): a poller that finds its
//     CQ empty sends what it posted since the last one, together.
//
// A QP with nothing in flight sends at once (a ping-pong's every
// message), as does a post with a multi-packet WQE (a large message's
// packets are a GSO run on their own), one that would leave more than a
// requester's turn (runBudget) unsent, and a QP whose responder holds
// its ACKs for its requests (ping-pong mode, rx.Acker.Flush): two
// such QPs would each wait for the other's ACK until a hold ran out.
type coalescer struct {
	n  atomic.Int32 // len(qps): PollRx's check when nothing waits
	mu sync.Mutex
	// qps are the QPs with posts waiting, each once (QP.Coalesced);
	// spare is the slice the last flush emptied, kept for the next.
	qps, spare []*qpmgr.QP
}

// mayWait reports whether the WQEs just posted on qp (locked) may wait
// for its ACK or the next poll; false on a nil coalescer.
func (c *coalescer) mayWait(qp *qpmgr.QP, wqes []qpmgr.SendWQE) bool {
	if c == nil || len(wqes) == 0 || qp.Type != ib.QPTypeRC || qp.State() != ib.QPSRTS ||
		qp.Resp.Ack.PingPong || !qp.Outstanding() || int(qp.SQ.Tail-qp.SQ.Next) > runBudget {
		return false
	}
	mtu := qp.MTU()
	for i := range wqes {
		if wqes[i].Len > mtu {
			return false
		}
	}
	return true
}

// add puts qp on the list of QPs whose posts wait, once.
func (c *coalescer) add(p *pipelines, qp *qpmgr.QP) {
	p.queues[0].counters.Inc(ib.PostDeferred) // one engine (Open)
	if qp.Coalesced.Swap(true) {
		return
	}
	c.mu.Lock()
	c.qps = append(c.qps, qp)
	c.n.Store(int32(len(c.qps)))
	c.mu.Unlock()
}

// flush sends the waiting posts of every QP on the list, in the caller's
// goroutine and one batch to the port if the send pipeline is idle, else
// through the pipeline's run list. A nil coalescer has nothing to send.
func (c *coalescer) flush(p *pipelines) {
	if c == nil || c.n.Load() == 0 {
		return
	}
	c.mu.Lock()
	qps := c.qps
	c.qps, c.spare = c.spare[:0], nil
	c.n.Store(0)
	c.mu.Unlock()
	for _, qp := range qps {
		qp.Coalesced.Store(false)
	}
	// A device that coalesces posts has one engine (Open).
	q := p.queues[0]
	if !q.sendMu.TryLock() {
		for _, qp := range qps {
			q.kick(qp)
		}
	} else {
		var again []*qpmgr.QP
		for _, qp := range qps {
			qp.Lock()
			n := 0
			if !qp.Destroyed() {
				n = q.runRequester(qp, q.sendTX)
			}
			qp.Unlock()
			if n == runBudget {
				again = append(again, qp)
			}
		}
		q.sendTX.flush()
		q.sendMu.Unlock()
		for _, qp := range again {
			q.kick(qp) // more to send: the pipeline's turn
		}
	}
	clear(qps)
	c.mu.Lock()
	if c.spare == nil {
		c.spare = qps[:0]
	}
	c.mu.Unlock()
}
