package rnic

import (
	"runtime"
	"slices"
	"sync"
	"time"

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
// holds the descriptor) or a kick: a doorbell message (Wake), a timer or
// a post in this process (kick). It follows Google Snap's engines, which
// spin while busy and block when idle, and vhost-user's polling mode.
//
// The engine replaces the send and receive pipelines when Config.PollIdle
// is positive and the port is an ibudp.Poller; every block of the NIC
// (DCQCN and CNPs, fault injection, go-back-N, trace, counters) runs in
// it as in them, since it calls the same requester, handler and port.

// HostQueue is a host interface's view of a queue in host memory that the
// engine polls, the NIC's doorbell record: a client's QP (its send ring
// and receive ring) or SRQ.
type HostQueue interface {
	// Poll fetches what the host posted since the last fetch and reports
	// whether there was any. It may find the queue busy (its host
	// interface is serving a request) and leave it for the next poll.
	Poll() bool
	// Pending reports whether the host posted since the last fetch.
	Pending() bool
	// SetAsleep writes the queue's asleep word (hostif.Ring.EngineAsleep).
	SetAsleep(bool)
}

// engine is the polling engine's state.
type engine struct {
	idle time.Duration

	// mu guards hosts and asleep, and is held over each pass of the
	// engine over hosts, so that Unwatch returns only once the engine
	// is done with the queue (its memory may go then).
	mu     sync.Mutex
	hosts  []HostQueue
	asleep bool

	arm chan struct{} // the engine sleeps: the watcher waits for the port
}

// Polling reports whether the device runs a polling engine (Config.PollIdle).
func (d *Device) Polling() bool { return d.eng != nil }

// Watch makes the engine poll h; its asleep word is written at once.
// Without an engine it does nothing, and h's asleep word keeps saying
// that every post needs a doorbell.
func (d *Device) Watch(h HostQueue) {
	e := d.eng
	if e == nil {
		return
	}
	e.mu.Lock()
	e.hosts = append(e.hosts, h)
	h.SetAsleep(e.asleep)
	e.mu.Unlock()
	d.Wake()
}

// Unwatch stops polling h; after it returns the engine touches h no more.
func (d *Device) Unwatch(h HostQueue) {
	e := d.eng
	if e == nil {
		return
	}
	e.mu.Lock()
	if i := slices.Index(e.hosts, h); i >= 0 {
		e.hosts = slices.Delete(e.hosts, i, i+1)
	}
	e.mu.Unlock()
}

// Wake wakes the engine if it sleeps: a doorbell message arrived.
func (d *Device) Wake() {
	if d.eng == nil {
		return
	}
	select {
	case d.bell <- struct{}{}:
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

// spinYield is how many empty passes the engine makes between two yields
// of its thread: on a host with fewer cores than spinning threads (2
// cores, two daemons and their clients) a spinning engine must let the
// thread it waits for run. Yielding at every empty pass, against one in
// 16, took ib_send_lat -s 2 through two daemons on 2 loaded cores from
// 110 to 48 us and the 64-byte WRITE rate from 13.6 to 31.7 MB/s; where
// no other thread wants the core, sched_yield returns at once.
const spinYield = 1

// runEngine is the engine's loop (see above).
func (d *Device) runEngine(p ibudp.Poller) {
	defer d.wg.Done()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	e := d.eng
	d.wg.Add(1)
	go d.watchPort(p)
	last := time.Now()
	empty := 0
	for {
		work := e.pollHosts()
		d.recvMu.Lock()
		n, err := d.receive(p)
		d.recvMu.Unlock()
		if err != nil && d.portGone(err) {
			return
		}
		if d.runSendQueue() || work || n > 0 {
			last, empty = time.Time{}, 0
			continue
		}
		if last.IsZero() {
			last = time.Now()
		}
		if time.Since(last) < e.idle {
			if empty++; empty%spinYield == 0 {
				osYield()
			}
			continue
		}
		// Idle: sleep. A kick that came while the engine polled left a
		// token that would wake it at once; the checks below see its
		// work instead.
		select {
		case <-d.bell:
		default:
		}
		if e.setAsleep(true) || d.runqLen() > 0 || p.Pending() {
			e.setAsleep(false)
			last = time.Time{}
			continue
		}
		select {
		case e.arm <- struct{}{}:
		default:
		}
		select {
		case <-d.bell:
		case <-d.done:
			return
		}
		e.setAsleep(false)
		last, empty = time.Time{}, 0
	}
}

// watchPort waits, for the sleeping engine, until the port has a packet,
// and wakes it.
func (d *Device) watchPort(p ibudp.Poller) {
	defer d.wg.Done()
	for {
		select {
		case <-d.eng.arm:
		case <-d.done:
			return
		}
		err := p.WaitRecv()
		d.Wake()
		if err != nil && d.portGone(err) {
			return
		}
	}
}

// runSendQueue runs the requester of every QP on the run list, as the
// send pipeline does, and reports whether there was any.
func (d *Device) runSendQueue() bool {
	if d.runqLen() == 0 {
		return false
	}
	d.sendMu.Lock()
	d.drainRunq(d.sendTX)
	d.sendMu.Unlock()
	return true
}

func (d *Device) runqLen() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.runq)
}
