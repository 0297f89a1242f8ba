package rnic

import (
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/rnicd/rnicd/internal/spin"
	"github.com/rnicd/rnicd/wire/ibudp"
)

// The polling engine is the NIC's doorbell and WQE fetch block with its
// packet engines in one loop, as a hardware RNIC polls its doorbell
// records and its receive queues: one goroutine, locked to an OS thread,
// that while there is work
//
//   - polls the producer index of every host queue it owns (HostQueue: a
//     client's send and receive rings in shared memory) and fetches what
//     was posted, with no doorbell message on the way;
//   - takes the packets waiting on the port without blocking (TryRecv) and
//     runs the RX packet handler, the ACKs coalesced per batch;
//   - runs the requester of every QP on the run list (ACKs that opened a
//     window, timers, DCQCN's pacing), one TX flush per QP turn;
//
// and after Config.PollIdle with nothing to do goes to sleep. Kicks are
// suppressed as virtio's event index and vhost-user suppress them: while
// the engine polls, the asleep word of every ring it owns reads 0 and a
// client's post makes no system call; before it sleeps the engine writes
// 1 into every ring, then reads every producer index once more (the
// client stores its producer index, then reads the word: Dekker's order),
// so that a post that missed the word is seen. Asleep, it waits for the
// port's socket (a watcher goroutine in WaitRecv, so that Go's netpoller
// holds the descriptor) or a kick: a doorbell message (Device.Wake), a timer or
// a post in this process (kick). It follows Google Snap's engines, which
// spin while busy and block when idle, and vhost-user's polling mode.
//
// The engine replaces the send and receive pipelines when Config.PollIdle
// is positive and the port is an ibudp.Poller; every block of the NIC
// (DCQCN and CNPs, fault injection, go-back-N, trace, counters) runs in
// it as in them, since it calls the same requester, handler and port.
//
// With Config.EnginePorts a device runs one engine per socket of its
// port, each polling only the rings of the QPs steered to it (queue.go).

// HostQueue is a queue in host memory that the engine polls, the NIC's
// doorbell record: a client's QP (its send ring and receive ring,
// QPRings) or SRQ (SRQRing), both the device's own, so that a poll calls
// nothing above the device; tests poll stand-ins.
type HostQueue interface {
	// Poll fetches what the host posted since the last fetch and reports
	// whether there was any. It may find the queue busy (a doorbell's
	// fetch, a modify) and leave it for the next poll.
	Poll() bool
	// Pending reports whether the host posted since the last fetch.
	Pending() bool
	// SetAsleep writes the queue's asleep word (abi.Ring.EngineAsleep).
	SetAsleep(bool)
}

// engine is the polling engine's state; each queue (queue.go) has one.
type engine struct {
	idle time.Duration

	// mu guards hosts and asleep, and is held over each pass of the
	// engine over hosts, so that unwatch returns only once the engine
	// is done with the queue (its memory may go then).
	mu     sync.Mutex
	hosts  []HostQueue
	asleep bool

	arm chan struct{} // the engine sleeps: the watcher waits for the port
}

// polling reports whether the device runs a polling engine (Config.PollIdle).
func (p *pipelines) polling() bool { return p.queues[0].eng != nil }

// watch makes the engine of key poll h: a QP's rings go to the engine of
// its QPN (key), the only one that receives its packets; an SRQ, which
// QPs of every engine share, to the engine of any key (its handle
// spreads them). h's asleep word is written at once. Without an engine
// watch does nothing, and h's asleep word keeps saying that every post
// needs a doorbell.
//
// A sleeping engine is woken only if h holds posts already: one that
// comes later reads the asleep word and rings. Waking it for nothing
// flipped the word of a ring the caller had just seen asleep
// (TestPollingEngineFetches, 2 engines under -race).
func (p *pipelines) watch(h HostQueue, key uint32) {
	q := p.queues[p.engineOf(key)]
	e := q.eng
	if e == nil {
		return
	}
	e.mu.Lock()
	e.hosts = append(e.hosts, h)
	h.SetAsleep(e.asleep)
	wake := e.asleep && h.Pending()
	e.mu.Unlock()
	if wake {
		q.wake()
	}
}

// unwatch stops polling h; after it returns no engine touches h.
func (p *pipelines) unwatch(h HostQueue) {
	for _, q := range p.queues {
		e := q.eng
		if e == nil {
			return
		}
		e.mu.Lock()
		if i := slices.Index(e.hosts, h); i >= 0 {
			e.hosts = slices.Delete(e.hosts, i, i+1)
		}
		e.mu.Unlock()
	}
}

// wake wakes the engines that sleep: a doorbell message arrived.
func (p *pipelines) wake() {
	for _, q := range p.queues {
		q.wake()
	}
}

func (q *queue) wake() {
	if q.eng == nil {
		return
	}
	select {
	case q.bell <- struct{}{}:
	default:
	}
}

// pollHosts fetches from every host queue with new work.
func (e *engine) pollHosts() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	work := false
	for _, h := range e.hosts {
		if h.Pending() && h.Poll() {
			work = true
		}
	}
	return work
}

// setAsleep writes every host queue's asleep word; going to sleep, it
// then reports whether any was posted to meanwhile, and if so leaves the
// engine awake.
func (e *engine) setAsleep(on bool) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, h := range e.hosts {
		h.SetAsleep(on)
	}
	e.asleep = on
	if !on {
		return false
	}
	for _, h := range e.hosts {
		if h.Pending() {
			for _, h := range e.hosts {
				h.SetAsleep(false)
			}
			e.asleep = false
			return true
		}
	}
	return false
}

// runEngine is the engine's loop (see above).
func (q *queue) runEngine(p ibudp.Poller) {
	pp := q.p
	defer pp.wg.Done()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	e := q.eng
	pp.wg.Add(1)
	go q.watchPort(p)
	last := time.Now()
	// A yield at an empty pass lets a thread waiting on this core (the
	// peer daemon's engine, a client) run where cores are fewer than
	// spinning threads; where the core is the engine's alone it only
	// delays the next look at the rings (package spin).
	var yield spin.Yielder
	for {
		work := e.pollHosts()
		q.recvMu.Lock()
		n, err := q.receive(p)
		q.recvMu.Unlock()
		if err != nil && pp.portGone(err) {
			return
		}
		if q.runSendQueue() || work || n > 0 {
			last = time.Time{}
			continue
		}
		if last.IsZero() {
			last = time.Now()
		}
		if time.Since(last) < e.idle || q.recovering() {
			if yield.Due() {
				osYield()
			}
			continue
		}
		// Idle: sleep. A kick that came while the engine polled left a
		// token that would wake it at once; the checks below see its
		// work instead.
		select {
		case <-q.bell:
		default:
		}
		if e.setAsleep(true) || q.runqLen() > 0 || p.Pending() {
			e.setAsleep(false)
			last = time.Time{}
			continue
		}
		select {
		case e.arm <- struct{}{}:
		default:
		}
		select {
		case <-q.bell:
		case <-pp.done:
			return
		}
		e.setAsleep(false)
		last = time.Time{}
	}
}

// watchPort waits, for the sleeping engine, until the port has a packet,
// and wakes it.
func (q *queue) watchPort(p ibudp.Poller) {
	defer q.p.wg.Done()
	for {
		select {
		case <-q.eng.arm:
		case <-q.p.done:
			return
		}
		err := p.WaitRecv()
		q.wake()
		if err != nil && q.p.portGone(err) {
			return
		}
	}
}

// runSendQueue runs the requester of every QP on the run list, as the
// send pipeline does, and reports whether there was any.
func (q *queue) runSendQueue() bool {
	if q.runqLen() == 0 {
		return false
	}
	q.sendMu.Lock()
	q.drainRunq(q.sendTX)
	q.sendMu.Unlock()
	return true
}

func (q *queue) runqLen() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.runq)
}
