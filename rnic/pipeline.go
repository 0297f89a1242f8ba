package rnic

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/rnic/dma"
	"github.com/rnicd/rnicd/rnic/flowctl"
	"github.com/rnicd/rnicd/rnic/qpmgr"
	"github.com/rnicd/rnicd/rnic/rx"
	"github.com/rnicd/rnicd/rnic/trace"
	"github.com/rnicd/rnicd/rnic/wqe"
	"github.com/rnicd/rnicd/wire/ibudp"
	"github.com/rnicd/rnicd/wire/steer"
)

// pipelines are the device's engines and what they share: one queue
// (queue.go) per socket of the port, each with its run list, its RX
// packet handler and its held ACKs; the requester (package wqe) and the
// Flow Control Manager they all run; post coalescing. They own the work
// behind a verb: the WQE fetch and its validation (fetch.go), the run
// list and the doorbell (kick, ring), the send and receive pipelines or
// the polling engine (engine.go) that run the requester and the RX
// packet handler, and the busy poll (pollRx). The Device hands them its
// MR and QP tables at Open and calls them; nothing here calls back up.
type pipelines struct {
	probe *trace.Probe // nil: no tracing
	batch int
	req   wqe.Engine
	fc    *flowctl.Manager

	// queues are the engines, each with the QPs steered to its socket
	// (queue.go); one without Config.EnginePorts.
	queues []*queue
	// coalesce holds the QPs whose posts wait for an ACK or a poll
	// (coalesce.go); nil without Config.CoalescePosts.
	coalesce *coalescer
	// epoch is when the device opened: the clock of the queues'
	// recoverUntil (lossspin.go).
	epoch time.Time

	done chan struct{}
	wg   sync.WaitGroup
}

// init builds the engines of ports (Config.Port, then
// Config.EnginePorts) over the device's MR and QP tables.
func (p *pipelines) init(cfg Config, ports []ibudp.Port, probe *trace.Probe, mrs *dma.Table, qps *qpmgr.Table) error {
	p.probe, p.batch, p.done, p.epoch = probe, cfg.Batch, make(chan struct{}), time.Now()
	fc, err := flowctl.New(flowctl.Config{Algorithm: cfg.CC, Params: cfg.CCParams,
		Window: min(max(cfg.Window, 0), flowctl.MaxWindow), Emit: p.rateEvent})
	if err != nil {
		return fmt.Errorf("rnic: %w", err)
	}
	p.fc = fc
	p.req = wqe.Engine{DMA: mrs, Trace: probe, FC: fc, Paced: p.pace, CopyPayload: cfg.CopyPayload}
	if cfg.CoalescePosts {
		p.coalesce = &coalescer{}
	}
	for i, port := range ports {
		q := p.newQueue(i, port)
		q.rx = rx.Handler{QPs: qps, Counters: &q.counters, Trace: probe, FC: fc,
			Resp: rx.Responder{DMA: mrs, Counters: &q.counters, LocalAddr: cfg.Port.Addr(), Trace: probe,
				Ack: rx.Acker{Counters: &q.counters, Trace: probe, Hold: q.holdAck, Recovering: q.lossSeen}},
			Comp: rx.Completer{DMA: mrs, Counters: &q.counters, Trace: probe, FC: fc,
				Retry7Forever: cfg.Retry7Forever, Recovering: q.lossSeen}}
		q.rx.Resp.XRCSRQs = &qps.XRCSRQs
		switch {
		case cfg.AckHold == 0:
			q.rx.Resp.Ack.AckHold = DefaultAckHold
		case cfg.AckHold > 0:
			q.rx.Resp.Ack.AckHold = cfg.AckHold
		}
		p.queues = append(p.queues, q)
	}
	return nil
}

// start runs the engines: the polling engine, one per queue, if pollIdle
// is positive and the port can be polled; else the two pipelines of the
// one queue.
func (p *pipelines) start(pollIdle time.Duration) {
	if _, ok := p.queues[0].port.(ibudp.Poller); ok && pollIdle > 0 {
		for _, q := range p.queues {
			q.eng = &engine{idle: pollIdle, asleep: true, arm: make(chan struct{}, 1)}
		}
		for _, q := range p.queues {
			p.wg.Add(1)
			go q.runEngine(q.port.(ibudp.Poller))
		}
		return
	}
	q := p.queues[0]
	p.wg.Add(2)
	go q.sendPipeline()
	go q.recvPipeline()
}

// stop stops the engines and closes their ports; it returns the first
// port's error.
func (p *pipelines) stop() error {
	var err error
	close(p.done)
	for _, q := range p.queues {
		if e := q.port.Close(); e != nil && err == nil {
			err = e
		}
	}
	p.wg.Wait()
	for _, q := range p.queues {
		q.held.stop()
	}
	return err
}

// queueOf is the queue of qp: the engine its packets are steered to.
func (p *pipelines) queueOf(qp *qpmgr.QP) *queue {
	if len(p.queues) == 1 {
		return p.queues[0]
	}
	return p.queues[steer.QueueOf(qp.QPN, len(p.queues))]
}

// engineOf is the engine that owns the QP numbered qpn.
func (p *pipelines) engineOf(qpn uint32) int { return steer.QueueOf(qpn, len(p.queues)) }

// countersOf are the counters of the QP numbered qpn: its queue's.
func (p *pipelines) countersOf(qpn uint32) *qpmgr.Counters {
	return &p.queues[p.engineOf(qpn)].counters
}

// runBudget is how many packets one QP may send before the next QP's turn.
const runBudget = 64

// kick is the doorbell: it puts qp on its engine's run list once.
func (p *pipelines) kick(qp *qpmgr.QP) { p.queueOf(qp).kick(qp) }

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
	p := q.p
	defer p.wg.Done()
	tx := q.sendTX
	for {
		select {
		case <-q.bell:
		case <-p.done:
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
func (p *pipelines) ring(qp *qpmgr.QP) {
	q := p.queueOf(qp)
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

// drainSend sends what was posted to an RTS QP and not sent yet before
// the QP goes, as rxe's QP cleanup lets its requester task drain
// (rxe_cleanup_task): a program that posts unsignaled datagrams and
// destroys the QP at once, as Debian's mckey does with its 10 multicast
// SENDs, has them sent (without the drain its rnicd sent 1 of the 10 in
// 1 run of 6). An RC QP sends what its window allows; nothing waits for
// an ACK.
func (q *queue) drainSend(qp *QP) {
	qp.Lock()
	rts := qp.State() == ib.QPSRTS
	qp.Unlock()
	if !rts {
		return
	}
	// The client chose what its ring holds: at most ib.MaxQPWR (16384)
	// WQEs, each up to a 2 GiB message on RC and UC. So the drain is
	// bounded by turns, not by WQEs: 257 turns of runBudget (64) packets,
	// 16448 packets, send a full queue of UD datagrams (one packet each)
	// and cut a UC queue of large WRITEs short (RC stops sooner, at its
	// window). The send lock is taken a turn at a time, as the pipeline
	// takes it for each QP on its run list, so that the other QPs of the
	// engine send between the turns rather than after all of them.
	for range ib.MaxQPWR/runBudget + 1 {
		q.sendMu.Lock()
		n := q.turn(qp)
		q.sendMu.Unlock()
		if n < runBudget {
			return
		}
	}
}

// awaitReceiveBatch returns once the receive batch in progress, if any,
// has ended. A batch pushes its completions before it sends the ACKs they
// owe (rx.Acker.Flush, one per QP at the batch's end), so an application
// may poll a receive completion and destroy the QP while the ACK is still
// to leave; without the wait the peer retries, against nobody, a message
// the application saw complete. A delayed ACK (sendHeldAck) is owed too.
// The batch is that of qp's engine (q), the only one that receives for it.
func (q *queue) awaitReceiveBatch() {
	q.recvMu.Lock()
	q.recvMu.Unlock()
}

// runRequester runs qp's requester for one turn, with qp locked; an ACK
// held for the QP's next request goes first, in the same batch.
func (q *queue) runRequester(qp *qpmgr.QP, tx *txBatch) int {
	if qp.HasSendWork() && q.rx.Resp.Ack.Release(qp, tx) {
		q.held.remove(qp)
	}
	return q.p.req.Run(qp, tx, runBudget)
}

// fence is Device.Fence.
func (p *pipelines) fence() {
	for _, q := range p.queues {
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
	defer q.p.wg.Done()
	if p, ok := q.port.(ibudp.Poller); ok {
		q.pollPipeline(p)
		return
	}
	// Without PollRx the buffers are this goroutine's alone, and Recv,
	// which blocks, runs outside recvMu (Fence takes it).
	for {
		n, err := q.port.Recv(q.recvBufs)
		if err != nil {
			if q.p.portGone(err) {
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
		if err != nil && q.p.portGone(err) {
			return
		}
		if n == 0 && err == nil {
			if err := p.WaitRecv(); err != nil && q.p.portGone(err) {
				return
			}
		}
	}
}

// pollRx is Device.PollRx.
func (p *pipelines) pollRx() int {
	p.coalesce.flush(p)
	total := 0
	for _, q := range p.queues {
		total += q.pollRx()
	}
	return total
}

func (q *queue) pollRx() int {
	port, ok := q.port.(ibudp.Poller)
	if !ok || !q.recvMu.TryLock() {
		return 0
	}
	defer q.recvMu.Unlock()
	total := 0
	for {
		n, err := q.receive(port)
		total += n
		// Packets the port holds are invisible to the pipeline's
		// WaitRecv: take them all before leaving.
		if n == 0 || err != nil || !port.Pending() {
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
func (p *pipelines) portGone(err error) bool {
	if errors.Is(err, net.ErrClosed) {
		return true
	}
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}
