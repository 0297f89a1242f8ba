package rnic

import (
	"sync"
	"sync/atomic"

	"github.com/rnicd/rnicd/rnic/qpmgr"
	"github.com/rnicd/rnicd/rnic/rx"
	"github.com/rnicd/rnicd/wire/ibudp"
)

// Multi-queue: a device runs one engine per socket of its port, as a
// multi-queue NIC runs one queue pair per core and steers each flow to its
// queue by RSS. Config.EnginePorts are the sockets of a steered port
// (steer.Group) beside Config.Port; the kernel's steering program sends
// every packet for QPN q to socket steer.QueueOf(q, n), and the device
// gives QP q to the engine of that socket (queueOf): the engine that
// receives a QP's packets is the one that runs its requester, polls its
// rings and sends its packets, on its own socket.
//
// A queue holds everything its engine uses on the hot path, so that no
// two engines share a lock or a cache line there: its port, buffer pool,
// run list, TX batches, receive buffers, its copy of the RX packet
// handler (whose ACK coalescing is per batch), its held ACKs and its
// counters. What the engines share is the NIC's memory: the QP table and
// the MR table, each read under a sync.RWMutex whose reader count is a
// cache line every engine writes once a packet (a sync.Map for the QP
// table was slower on 2 loaded cores, 55-62 against 40-48 ns a lookup
// from 2 Ps in qpmgr's BenchmarkTableLookup: left for a machine where
// the engines have cores of their own), the Flow Control
// Manager's counters, and a CQ that QPs of two engines complete into. A CQ is one
// ring in the application's memory with one producer index, so its
// producers must take turns: it keeps one at a time with its lock, as rxe
// serialises its CQ with cq->cq_lock. The lock is taken once per
// completion, not per packet, and is contended only where the
// application itself spreads one CQ over QPs of several engines; a ring
// per engine would change the host interface and every client's poll for
// that case alone. A client's QPs on several engines are fetched under
// that client's one handling lock (hostif), which a busy engine skips
// (TryLock) rather than waits for.

// queue is one engine's share of the device (see above).
type queue struct {
	p    *pipelines
	id   int
	port ibudp.Port
	pool *ibudp.Pool
	rx   rx.Handler

	mu   sync.Mutex
	runq []*qpmgr.QP // QPs with their doorbell rung
	bell chan struct{}

	// sendMu and recvMu are held by the engine (or the pipelines) while
	// it works on a batch; Fence takes them to order the application's
	// memory accesses with the NIC's (see Fence). sendMu also guards
	// sendTX, which the engine and a doorbell that runs the requester
	// itself share.
	sendMu, recvMu sync.Mutex
	sendTX         *txBatch
	// recvBufs and recvTX are the receive side's, under recvMu.
	recvBufs []*ibudp.Buf
	recvTX   *txBatch

	held heldAcks
	// counters are the rxe counters of the queue's QPs and handler,
	// which Observer.Counters adds up: one engine's packets count into no
	// other's cache line.
	counters qpmgr.Counters
	// eng is the polling engine (engine.go); nil without Config.PollIdle.
	eng *engine
	// recoverUntil is when, counted from the device's epoch, the engine
	// may sleep again after the last loss its QPs took part in
	// (lossspin.go); 0: none yet.
	recoverUntil atomic.Int64

	rxPackets, txPackets atomic.Uint64
}

func (p *pipelines) newQueue(id int, port ibudp.Port) *queue {
	q := &queue{p: p, id: id, port: port, pool: ibudp.NewPool(4*p.batch, 64*p.batch), bell: make(chan struct{}, 1)}
	q.sendTX = q.newTX()
	q.recvTX = q.newTX()
	q.recvBufs = make([]*ibudp.Buf, p.batch)
	q.pool.GetBatch(q.recvBufs)
	return q
}

// txBatch collects one queue's packets for its port.
type txBatch struct {
	q    *queue
	bufs []*ibudp.Buf
}

func (q *queue) newTX() *txBatch { return &txBatch{q: q, bufs: make([]*ibudp.Buf, 0, q.p.batch)} }

func (t *txBatch) Alloc() *ibudp.Buf { return t.q.pool.Get() }

func (t *txBatch) Send(b *ibudp.Buf) {
	t.bufs = append(t.bufs, b)
	if len(t.bufs) == cap(t.bufs) {
		t.flush()
	}
}

func (t *txBatch) flush() {
	if len(t.bufs) == 0 {
		return
	}
	// A port that fails is closed: its packets are lost as on a dead link.
	_ = t.q.port.Send(t.bufs)
	t.q.txPackets.Add(uint64(len(t.bufs)))
	t.q.pool.PutBatch(t.bufs)
	t.bufs = t.bufs[:0]
}
