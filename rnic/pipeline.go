package rnic

import (
	"errors"
	"net"

	"github.com/rnicd/rnicd/rnic/qpmgr"
	"github.com/rnicd/rnicd/wire/ibudp"
)

// runBudget is how many packets one QP may send before the next QP's turn.
const runBudget = 64

// kick is the doorbell: it puts qp on its engine's run list once.
func (d *Device) kick(qp *qpmgr.QP) { d.queueOf(qp).kick(qp) }

func (q *queue) kick(qp *qpmgr.QP) {
	if qp.Scheduled.Swap(true) {
		return
	}
	q.mu.Lock()
	q.runq = append(q.runq, qp)
	q.mu.Unlock()
	select {
	case q.bell <- struct{}{}:
	default:
	}
}

func (q *queue) popRun() *qpmgr.QP {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.runq) == 0 {
		return nil
	}
	qp := q.runq[0]
	q.runq[0] = nil
	q.runq = q.runq[1:]
	return qp
}

// sendPipeline runs the requester of every QP whose doorbell rang, in
// turn, runBudget packets at a time.
func (q *queue) sendPipeline() {
	d := q.d
	defer d.wg.Done()
	tx := q.sendTX
	for {
		select {
		case <-q.bell:
		case <-d.done:
			return
		}
		q.sendMu.Lock()
		q.drainRunq(tx)
		q.sendMu.Unlock()
	}
}

// drainRunq runs the requester of every QP on the run list, in turn,
// runBudget packets at a time, then sends the batch; sendMu is held.
func (q *queue) drainRunq(tx *txBatch) {
	for qp := q.popRun(); qp != nil; qp = q.popRun() {
		qp.Scheduled.Store(false)
		qp.Lock()
		if qp.TimerExpired() {
			q.rx.Comp.Timeout(qp)
		}
		n := 0
		if !qp.Destroyed() {
			n = q.runRequester(qp, tx)
		}
		qp.Unlock()
		if n == runBudget {
			q.kick(qp) // more to send: back of the line
		}
	}
	tx.flush()
}

// ring is the doorbell of a post: if the send pipeline is idle, the
// poster's goroutine runs qp's requester itself, sparing the hand-off to
// the pipeline's goroutine (a wake-up, several microseconds) on the path
// of every message; otherwise qp joins the run list.
func (d *Device) ring(qp *qpmgr.QP) {
	q := d.queueOf(qp)
	if !q.sendMu.TryLock() {
		q.kick(qp)
		return
	}
	n := q.turn(qp)
	q.sendMu.Unlock()
	if n == runBudget {
		q.kick(qp)
	}
}

// turn runs qp's requester for one turn in the poster's or the
// destroyer's goroutine and sends the batch; sendMu is held.
func (q *queue) turn(qp *qpmgr.QP) int {
	qp.Lock()
	n := 0
	if !qp.Destroyed() {
		n = q.runRequester(qp, q.sendTX)
	}
	qp.Unlock()
	q.sendTX.flush()
	return n
}

// runRequester runs qp's requester for one turn, with qp locked; an ACK
// held for the QP's next request goes first, in the same batch.
func (q *queue) runRequester(qp *qpmgr.QP, tx *txBatch) int {
	if qp.HasSendWork() && q.rx.Resp.Ack.Release(qp, tx) {
		q.held.remove(qp)
	}
	return q.d.req.Run(qp, tx, runBudget)
}

// Fence orders the caller's memory accesses with the device's: whatever
// the pipelines wrote into registered memory before the call is visible
// after it, and whatever the caller wrote before it is what they read
// after. A real NIC's DMA is ordered by the PCIe fabric and the CPU's
// barriers; here both sides are goroutines, and Go's memory model (and
// its race detector) needs a synchronizing operation between them. A CQE
// polled from a CQ of this device is one already; Fence is for memory a
// peer wrote or will read, whose only signal arrived over the network.
func (d *Device) Fence() {
	for _, q := range d.queues {
		q.sendMu.Lock()
		q.sendMu.Unlock()
		q.recvMu.Lock()
		q.recvMu.Unlock()
	}
}

// recvPipeline takes packets off the port in batches and runs the RX
// packet handler on each. A port that can be polled is polled, so that an
// application's busy poll can run the pipeline too (PollRx).
func (q *queue) recvPipeline() {
	d := q.d
	defer d.wg.Done()
	if p, ok := q.port.(ibudp.Poller); ok {
		q.pollPipeline(p)
		return
	}
	// Without PollRx the buffers are this goroutine's alone, and Recv,
	// which blocks, runs outside recvMu (Fence takes it).
	for {
		n, err := q.port.Recv(q.recvBufs)
		if err != nil {
			if d.portGone(err) {
				return
			}
			continue
		}
		q.recvMu.Lock()
		q.handle(n, true)
		q.recvMu.Unlock()
	}
}

// pollPipeline is the receive pipeline on a Poller: take what is there,
// and sleep in WaitRecv, outside recvMu, when nothing is.
func (q *queue) pollPipeline(p ibudp.Poller) {
	for {
		q.recvMu.Lock()
		n, err := q.receive(p)
		q.recvMu.Unlock()
		if err != nil && q.d.portGone(err) {
			return
		}
		if n == 0 && err == nil {
			if err := p.WaitRecv(); err != nil && q.d.portGone(err) {
				return
			}
		}
	}
}

// PollRx runs the receive pipeline once in the caller's goroutine: it
// takes the packets waiting on the port, without blocking, and handles
// them. An application that spins on a CQ calls it (through verbs) so
// that a message's packets are handled on the thread that waits for it,
// with no wake-up of the pipeline's goroutine on the way: busy polling,
// as Linux runs a driver's NAPI poll in a busy-polling socket reader. It
// returns how many packets it handled: 0 if none was there, if the port
// cannot be polled, or if the pipeline is at work already. First it sends
// what the application posted since its last poll and left waiting (post
// coalescing, coalesce.go).
func (d *Device) PollRx() int {
	d.coalesce.flush(d)
	total := 0
	for _, q := range d.queues {
		total += q.pollRx()
	}
	return total
}

func (q *queue) pollRx() int {
	p, ok := q.port.(ibudp.Poller)
	if !ok || !q.recvMu.TryLock() {
		return 0
	}
	defer q.recvMu.Unlock()
	total := 0
	for {
		n, err := q.receive(p)
		total += n
		// Packets the port holds are invisible to the pipeline's
		// WaitRecv: take them all before leaving.
		if n == 0 || err != nil || !p.Pending() {
			return total
		}
	}
}

// receive takes the packets waiting on p, without blocking, into recvBufs
// and runs the RX packet handler on them; recvMu is held. The ACKs they
// owe go out at the end, one per QP, unless p still holds packets of the
// same arrival (the rest of a GRO datagram, Pending), which the caller's
// next receive takes at once: so a run of WRITEs larger than recvBufs gets
// one ACK, for its last PSN, not one per Recv.
func (q *queue) receive(p ibudp.Poller) (int, error) {
	n, err := p.TryRecv(q.recvBufs)
	if err != nil {
		q.flushAcks()
		return 0, err
	}
	q.handle(n, !p.Pending())
	return n, nil
}

// handle runs the RX packet handler on recvBufs[:n], then sends what it
// answered and, with acks, the ACKs coalesced so far; recvMu is held.
func (q *queue) handle(n int, acks bool) {
	q.rxPackets.Add(uint64(n))
	for _, b := range q.recvBufs[:n] {
		q.rx.Receive(b, q.recvTX)
	}
	if acks {
		q.rx.Resp.Ack.Flush(q.recvTX)
	}
	q.recvTX.flush()
	q.rx.Resp.Ack.Sent()
}

// flushAcks sends the ACKs coalesced so far; recvMu is held.
func (q *queue) flushAcks() {
	q.rx.Resp.Ack.Flush(q.recvTX)
	q.recvTX.flush()
	q.rx.Resp.Ack.Sent()
}

// portGone reports whether a receive error means the pipeline is over:
// the port is closed or the device is closing. Other errors are passing.
func (d *Device) portGone(err error) bool {
	if errors.Is(err, net.ErrClosed) {
		return true
	}
	select {
	case <-d.done:
		return true
	default:
		return false
	}
}
