package qpmgr

import (
	"fmt"
	"sync"

	"github.com/rnicd/rnicd/ib"
)

// RecvQueue is a receive queue: the RQ of one QP or a shared receive queue
// (SRQ) of many. It is safe for concurrent use: the application posts while
// the responder consumes.
type RecvQueue struct {
	mu     sync.Mutex
	ring   []ib.RecvWR
	head   int
	n      int
	maxSGE int
	// limit is the SRQ limit (ibv_modify_srq srq_limit): when the queue
	// drains below it, limitHit is set once (the IBV_EVENT_SRQ_LIMIT_REACHED
	// event); 0 disarms it.
	limit    int
	limitHit bool
	onLimit  func() // SetLimitHandler
	// src, when set, is where the queue's WQEs come from and go back to.
	src RecvSource
}

// RecvSource is a receive queue in memory the host shares with the NIC
// (RecvRing, or a test's stand-in). The queue fetches from it, with its lock
// held, when it runs empty and at each doorbell (Refill), so that a
// message never finds the queue empty while WQEs sit in host memory whose
// doorbell is on its way; and it retires each WQE to it once the WQE's
// completion is decided, before the completion is visible, so that its
// slot is free by the time the application polls the completion.
// Neither method may call the queue.
type RecvSource interface {
	Fetch(room int) []ib.RecvWR
	Retire(n int)
}

// SetSource makes src the queue's source (nil: none, WQEs come from Post):
// once it returns, the old source is called no more.
func (q *RecvQueue) SetSource(src RecvSource) {
	q.mu.Lock()
	q.src = src
	q.mu.Unlock()
}

// retire hands one WQE back to the source. It does so with the lock
// held, so that once SetSource(nil) returns no Retire is writing the
// source's ring: an XRC SRQ's WQEs are retired by its domain's target
// QPs, another client's among them, while its owner may be destroying
// it and unmapping the ring.
func (q *RecvQueue) retire() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.src != nil {
		q.src.Retire(1)
	}
}

// Refill fetches from the source now: the doorbell.
func (q *RecvQueue) Refill() {
	q.mu.Lock()
	q.refill()
	q.mu.Unlock()
}

func (q *RecvQueue) refill() {
	if q.src == nil || q.n == len(q.ring) {
		return
	}
	for _, wr := range q.src.Fetch(len(q.ring) - q.n) {
		q.ring[(q.head+q.n)%len(q.ring)] = wr
		q.n++
	}
}

// NewRecvQueue returns a queue of maxWR requests of at most maxSGE SGEs.
func NewRecvQueue(maxWR, maxSGE int) *RecvQueue {
	return &RecvQueue{ring: make([]ib.RecvWR, maxWR), maxSGE: maxSGE}
}

// Post appends receive WRs in order; it stops at the first that does not
// fit and returns its index with the error, like ibv_post_recv's bad_wr.
func (q *RecvQueue) Post(wrs []ib.RecvWR) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for i := range wrs {
		if q.n == len(q.ring) {
			return i, ib.ErrQueueFull
		}
		if len(wrs[i].SGL) > q.maxSGE {
			return i, fmt.Errorf("qpmgr: recv WR %d has %d SGEs, max %d", wrs[i].WRID, len(wrs[i].SGL), q.maxSGE)
		}
		wr := wrs[i]
		wr.SGL = append([]ib.SGE(nil), wr.SGL...) // the WR is the NIC's now
		q.ring[(q.head+q.n)%len(q.ring)] = wr
		q.n++
	}
	return len(wrs), nil
}

// Pop takes the oldest receive WR.
func (q *RecvQueue) Pop() (ib.RecvWR, bool) {
	q.mu.Lock()
	if q.n == 0 || q.limit > 0 {
		// Armed, the count must be every WQE posted, not only those
		// fetched, or the limit would fire while the host's ring
		// still holds plenty.
		q.refill()
	}
	if q.n == 0 {
		q.mu.Unlock()
		return ib.RecvWR{}, false
	}
	wr := q.ring[q.head]
	q.ring[q.head] = ib.RecvWR{}
	q.head = (q.head + 1) % len(q.ring)
	q.n--
	var fire func()
	// rxe's get_srq_wqe: once the WQEs left fall below the limit,
	// SRQ_LIMIT_REACHED, and the limit is disarmed (0).
	if q.limit > 0 && q.n < q.limit {
		q.limitHit, q.limit = true, 0
		fire = q.onLimit
	}
	q.mu.Unlock()
	if fire != nil {
		fire()
	}
	return wr, true
}

// Drain removes and returns every receive WR, oldest first.
func (q *RecvQueue) Drain() []ib.RecvWR {
	var out []ib.RecvWR
	for {
		wr, ok := q.Pop()
		if !ok {
			return out
		}
		out = append(out, wr)
	}
}

// Len is the number of posted receive WRs.
func (q *RecvQueue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.n
}

// SetLimit arms the SRQ limit.
func (q *RecvQueue) SetLimit(n int) {
	q.mu.Lock()
	q.limit, q.limitHit = n, false
	q.mu.Unlock()
}

// LimitReached reports, once, that the queue fell below its limit.
func (q *RecvQueue) LimitReached() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	hit := q.limitHit
	q.limitHit = false
	return hit
}
