package qpmgr

import "github.com/rnicd/rnicd/ib"

// Asynchronous events (IBTA 11.6.3): each object calls the handler its
// owner set, at the moment rxe raises the event (or, where rxe raises
// none, where IBTA and the hardware drivers do). A handler runs with the
// object's lock held, on whichever engine goroutine saw the cause, so it
// must only queue the event and never call back into the object.

// SetEventHandler makes f the QP's event handler (nil: none): it gets
// QP_FATAL, QP_REQ_ERR, QP_ACCESS_ERR, COMM_EST and
// QP_LAST_WQE_REACHED.
func (qp *QP) SetEventHandler(f func(ib.EventType)) {
	qp.mu.Lock()
	qp.onEvent = f
	qp.mu.Unlock()
}

// raise tells the QP's handler of e; the lock is held.
func (qp *QP) raise(e ib.EventType) {
	if qp.onEvent != nil {
		qp.onEvent(e)
	}
}

// RequestArrived is told of every request packet the responder is about
// to handle, with the lock held: the first one a connected QP receives in
// RTR raises COMM_EST (IBTA 11.6.3.1, "communication established"; qib
// and hfi1 raise it there, once per QP until a reset), which tells a
// passive side that lost the CM's RTU that its peer is sending.
func (qp *QP) RequestArrived() {
	if qp.state != ib.QPSRTR || qp.Type == ib.QPTypeUD || qp.Resp.CommEst {
		return
	}
	qp.Resp.CommEst = true
	qp.raise(ib.EventCommEst)
}

// EnterErrorFor moves the QP to ERR as EnterError does, raising e (the
// kind of error that took it there) first. Call with the lock held.
func (qp *QP) EnterErrorFor(e ib.EventType) {
	if qp.state != ib.QPSErr && qp.state != ib.QPSReset {
		qp.raise(e)
		qp.enter(ib.QPSErr)
	}
}

// EnterErrorReported moves the QP to ERR for the error of the WQE that
// just completed in error: the requester's errors (retries exceeded, a
// NAK, a WQE refused at fetch), which IBTA 10.8.3 reports by that
// completion alone, as mlx5 does, so no event is raised. Call with the
// lock held.
func (qp *QP) EnterErrorReported() {
	if qp.state != ib.QPSErr && qp.state != ib.QPSReset {
		qp.enter(ib.QPSErr)
	}
}

// SetLimitHandler makes f what the SRQ calls, once per arming, when it
// drains below its limit (SRQ_LIMIT_REACHED); nil: none. f runs without
// the queue's lock, with the lock of the QP whose request took the WQE.
func (q *RecvQueue) SetLimitHandler(f func()) {
	q.mu.Lock()
	q.onLimit = f
	q.mu.Unlock()
}

// Limit is the SRQ's armed limit, 0 when it is not armed (ibv_query_srq:
// rxe disarms it when it fires).
func (q *RecvQueue) Limit() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.limit
}

// SetErrorHandler makes f what the CQ calls when a completion first
// finds its host ring full (CQ_ERR): the ring's overrun flag stays set,
// so the CQ raises it once. f runs with the CQ's lock held.
func (c *CQ) SetErrorHandler(f func()) {
	c.mu.Lock()
	c.onErr = f
	c.mu.Unlock()
}
