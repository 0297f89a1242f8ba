package rnic

import (
	"sync"
	"time"

	"github.com/rnicd/rnicd/rnic/qpmgr"
)

// heldAcks are the QPs whose ACK the RX packet handler held back for their
// next request (rx.Acker.Flush), and the timer that sends those nobody
// came for. The timer is armed while an ACK is held, for the earliest
// hold's end, and then for the next one still held.
type heldAcks struct {
	mu     sync.Mutex
	qps    map[*qpmgr.QP]uint64 // the hold's generation
	gen    uint64
	timer  *time.Timer
	next   time.Time // when the timer fires; zero: not armed
	closed bool
}

// holdAck is rx.Acker.Hold of the queue's handler: qp (locked) holds an
// ACK until at most until.
func (q *queue) holdAck(qp *qpmgr.QP, until time.Time) {
	h := &q.held
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	if h.qps == nil {
		h.qps = make(map[*qpmgr.QP]uint64)
	}
	h.gen++
	h.qps[qp] = h.gen
	q.armHeld(until)
}

// armHeld makes the timer fire by t; q.held.mu is held.
func (q *queue) armHeld(t time.Time) {
	h := &q.held
	if !h.next.IsZero() && !t.Before(h.next) {
		return
	}
	h.next = t
	if h.timer == nil {
		h.timer = time.AfterFunc(time.Until(t), q.expireAcks)
		return
	}
	h.timer.Reset(time.Until(t))
}

// remove forgets qp, whose held ACK went out with a request. The timer
// is left to fire: on a ping-pong another hold comes before it does, and
// stopping and arming it for each one costs the runtime a wake-up each.
func (h *heldAcks) remove(qp *qpmgr.QP) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.qps, qp)
}

// stop stops the timer for good (the device is closing).
func (h *heldAcks) stop() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	if h.timer != nil {
		h.timer.Stop()
	}
	clear(h.qps)
}

// expireAcks sends the ACKs whose hold ran out alone, and arms the timer
// for the earliest hold left.
func (q *queue) expireAcks() {
	h := &q.held
	type hold struct {
		qp  *qpmgr.QP
		gen uint64
	}
	h.mu.Lock()
	h.next = time.Time{} // a hold from now on arms the timer again
	holds := make([]hold, 0, len(h.qps))
	for qp, gen := range h.qps {
		holds = append(holds, hold{qp, gen})
	}
	h.mu.Unlock()

	q.sendMu.Lock()
	now := time.Now()
	var next time.Time
	gone := holds[:0]
	for _, x := range holds {
		x.qp.Lock()
		if q.rx.Resp.Ack.Expire(x.qp, q.sendTX, now) {
			if until := q.rx.Resp.Ack.Deadline(x.qp); !until.IsZero() && (next.IsZero() || until.Before(next)) {
				next = until
			}
		} else {
			gone = append(gone, x)
		}
		x.qp.Unlock()
	}
	q.sendTX.flush()
	q.sendMu.Unlock()

	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	for _, x := range gone {
		if h.qps[x.qp] == x.gen { // not held again since
			delete(h.qps, x.qp)
		}
	}
	if !next.IsZero() {
		q.armHeld(next)
	}
}

// sendHeldAck sends qp's held ACK now, if it holds one: its application is
// about to destroy it or change its state, and the peer waits for the ACK
// of a message the application has seen complete.
func (q *queue) sendHeldAck(qp *qpmgr.QP) {
	q.sendMu.Lock()
	qp.Lock()
	sent := q.rx.Resp.Ack.SendHeld(qp, q.sendTX)
	qp.Unlock()
	q.sendTX.flush()
	q.sendMu.Unlock()
	if sent {
		q.held.remove(qp)
	}
}

// enterError moves qp to ERR, its WQEs flushed, once any ACK it holds is
// sent: the application may have seen that message complete, and the
// peer would retry it against a QP that answers no more.
func (q *queue) enterError(qp *qpmgr.QP) {
	q.sendHeldAck(qp)
	qp.Lock()
	qp.EnterError()
	qp.Unlock()
}
