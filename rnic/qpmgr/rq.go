package qpmgr

import (
	"errors"
	"fmt"
	"sync"

	"github.com/rnicd/rnicd/ib"
)

// ErrQueueFull is returned when a work request does not fit in its queue.
var ErrQueueFull = errors.New("qpmgr: work queue full")

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
	// fetch, when set, pulls receive WRs from queue memory the NIC
	// shares with the application: the queue calls it, with its lock
	// held, when it runs empty, so that a message never finds the queue
	// empty while WQEs sit in host memory whose doorbell is on its way.
	fetch func(room int) []ib.RecvWR
}

// SetFetch installs fetch (see the field); it must not call the queue.
func (q *RecvQueue) SetFetch(fetch func(room int) []ib.RecvWR) {
	q.mu.Lock()
	q.fetch = fetch
	q.mu.Unlock()
}

// Refill calls fetch now: the doorbell.
func (q *RecvQueue) Refill() {
	q.mu.Lock()
	q.refill()
	q.mu.Unlock()
}

func (q *RecvQueue) refill() {
	if q.fetch == nil || q.n == len(q.ring) {
		return
	}
	for _, wr := range q.fetch(len(q.ring) - q.n) {
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
			return i, ErrQueueFull
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
	defer q.mu.Unlock()
	if q.n == 0 {
		q.refill()
	}
	if q.n == 0 {
		return ib.RecvWR{}, false
	}
	wr := q.ring[q.head]
	q.ring[q.head] = ib.RecvWR{}
	q.head = (q.head + 1) % len(q.ring)
	q.n--
	if q.limit > 0 && q.n < q.limit {
		q.limitHit, q.limit = true, 0
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
