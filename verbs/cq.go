package verbs

import (
	"context"

	"fmt"

	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rnicd/rnicd/abi"
	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/internal/spin"

	"github.com/rnicd/rnicd/rnic"
)

// ErrCQOverrun is CQ.Err's answer once a completion did not fit.
var ErrCQOverrun = ib.ErrCQOverrun

// CQ is a completion queue (ibv_cq): a ring the NIC writes completions
// into and Poll reads with no system call.
type CQ struct {
	ctx  *Context
	h    uint32
	ch   *CompChannel
	mem  []byte
	ring *abi.Ring
	wake *eventFD // the NIC writes it when Wait sleeps

	mu   sync.Mutex
	cons uint32
	seen uint32 // events taken by GetCQEvent (under ch.mu)

	empty atomic.Uint32 // polls in a row that found nothing
	waits atomic.Uint32 // empty polls left to wait in rather than yield
	yield spin.Yielder  // at which empty polls past pollSpin to yield
}

// CreateCQ creates a CQ of at least cqe entries, reporting events to ch if
// not nil (ibv_create_cq).
func (c *Context) CreateCQ(cqe int, ch *CompChannel) (*CQ, error) {
	if cqe < 1 || cqe > rnic.MaxCQE {
		return nil, fmt.Errorf("verbs: CQ size %d outside 1..%d", cqe, rnic.MaxCQE)
	}
	req := &abi.CreateCQReq{CQE: uint32(cqe)}
	if ch != nil {
		req.Channel = ch.h
	}
	var r abi.RingReply
	fds, err := c.call(abi.KindCreateCQ, req, nil, &r)
	if err != nil {
		return nil, err
	}
	// The ring's memfd, then the read end of the CQ's wake pipe.
	if len(fds) != 2 {
		closeFDs(fds)
		c.destroy(abi.KindDestroyCQ, r.H)
		return nil, fmt.Errorf("verbs: create_cq: reply carries %d descriptors, want a ring and a wake pipe", len(fds))
	}
	wake, err := newEventFD(fds[1])
	if err != nil {
		unix.Close(fds[0])
		c.destroy(abi.KindDestroyCQ, r.H)
		return nil, err
	}
	mem, ring, err := mapRing(fds[:1], r.Send)
	if err != nil {
		wake.close()
		c.destroy(abi.KindDestroyCQ, r.H)
		return nil, err
	}
	cq := &CQ{ctx: c, h: r.H, ch: ch, mem: mem, ring: ring, wake: wake}
	c.track(r.H, cq)
	if ch != nil {
		ch.mu.Lock()
		ch.cqs = append(ch.cqs, cq)
		ch.mu.Unlock()
	}
	return cq, nil
}

// Poll moves up to len(wcs) completions into wcs and returns how many
// (ibv_poll_cq). A Poll that finds completions makes no system call. One
// that finds none, after many in a row, gives the core away
// (sched_yield), or, while the core is oversubscribed, waits at most
// 1 ms for the NIC's next completion; with an in-process NIC (OpenLocal)
// it first busy polls (Context.BusyPoll) and looks again.
func (cq *CQ) Poll(wcs []WC) int {
	if n := cq.poll(wcs); n > 0 {
		cq.empty.Store(0)
		return n
	}
	if cq.ctx.BusyPoll() > 0 {
		if n := cq.poll(wcs); n > 0 {
			cq.empty.Store(0)
			return n
		}
	}
	// An application spinning on an empty CQ holds a core the NIC that
	// is to fill it may need: on 2 cores shared by two daemons and two
	// spinning tools, a spinner that never yields starves the engine
	// for its whole time slice. After a short spin, empty polls give the
	// core away (sched_yield): every one while another thread wants this
	// core, fewer as the core proves to be the poller's alone (package
	// spin: there a yield finds no one and only delays the next look,
	// which is then when the completion is seen). A yield that took longer than
	// yieldSlow says the core is shared with threads that do not give
	// it back soon; the next pollWaits empty polls then wait up to
	// pollWait for the NIC's wake instead, so that the completion, not
	// the scheduler's next turn, ends the wait (clib's poll_cq does the
	// same).
	//
	// With a daemon both are raw system calls, unseen by the runtime: a
	// goroutine that spins on Poll never reschedules, and after 10 ms of
	// that the runtime's sysmon takes its P away at every system call
	// it sees (retake's forced preemption), waking another thread to
	// hold the P and sending this one through the scheduler to get one
	// back. rnic ib_send_lat -s 2 -n 20000, spinning, made 54,731 futex
	// calls and ran on three threads; with raw calls 236 futex calls on
	// one, typical 125 -> 34 us at load 8-12 on the 2-core CI-kind VM
	// (2026-11-27). The P is the one the spin holds anyway; a raw wait
	// is bounded by pollWait and a preemption signal ends it early. An
	// in-process NIC (OpenLocal) needs a P to complete into the CQ: its
	// calls stay the runtime's.
	if e := cq.empty.Add(1); e > pollSpin && cq.yield.Due() {
		if w := cq.waits.Load(); w > 0 {
			cq.waits.Store(w - 1)
			cq.waitCQE()
			return 0
		}
		t0 := time.Now()
		if cq.ctx.Local() {
			unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
		} else {
			unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
		}
		if time.Since(t0) > yieldSlow {
			cq.waits.Store(pollWaits)
		}
	}
	return 0
}

// The figures of the wait that follows a slow yield, clib's (cq.c):
// rstream's 64-byte ping-pong beside two CPU hogs on 2 cores took 2 ms a
// message each way with yields alone, 47 times its time on idle cores,
// and about 1 ms with the wait.
const (
	yieldSlow = 200 * time.Microsecond
	pollWaits = 64
	pollWait  = time.Millisecond
)

// waitCQE waits up to pollWait for a completion past what Poll took: the
// ring's waiting word is stored before the producer is looked at again,
// against the NIC's store of the producer and swap of the word
// (qpmgr's cqeRing.publish), so one of the two sees the other's.
func (cq *CQ) waitCQE() {
	cq.mu.Lock()
	ring, cons := cq.ring, cq.cons
	cq.mu.Unlock()
	if ring == nil || cq.wake == nil {
		return
	}
	ring.SetWaiting(true)
	if ring.Producer() != cons {
		return
	}
	cq.wake.waitFor(pollWait, !cq.ctx.Local())
}

// pollSpin is how many empty polls in a row spin before Poll starts to
// yield: about the time a completion takes through the daemon's engine
// when it has a core (a few microseconds). The empty polls after it yield
// as the engine's empty passes do (package spin).
const pollSpin = 64

func (cq *CQ) poll(wcs []WC) int {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.ring == nil {
		return 0
	}
	prod := cq.ring.Producer()
	k := 0
	for k < len(wcs) && cq.cons != prod {
		abi.GetCQE(cq.ring.Slot(cq.cons), &wcs[k])
		cq.cons++
		k++
	}
	if k > 0 {
		cq.ring.SetConsumer(cq.cons)
	}
	return k
}

// Err reports ErrCQOverrun once a completion found the CQ full (and was
// lost; the CQ was too small for its QPs), ErrClosed once it was
// destroyed, and ErrDeviceFatal once the daemon behind it has hung up:
// what a program spinning on Poll looks at now and then, as ibv_poll_cq
// fails on a dead device. The last costs a poll(2) of the control
// socket.
func (cq *CQ) Err() error {
	cq.mu.Lock()
	closed := cq.ring == nil
	overrun := !closed && cq.ring.Overrun()
	cq.mu.Unlock()
	if closed {
		return ErrClosed
	}
	if overrun {
		return ErrCQOverrun
	}
	if !cq.ctx.Local() {
		return cq.ctx.fatal()
	}
	return nil
}

// ReqNotify arms the CQ: the next completion (with solicitedOnly, the next
// solicited or failed one) sends an event to its channel
// (ibv_req_notify_cq). It writes the ring's armed word: no system call.
func (cq *CQ) ReqNotify(solicitedOnly bool) error {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.ring == nil {
		return ErrClosed
	}
	if solicitedOnly {
		cq.ring.SetArmed(abi.ArmSolicited)
	} else {
		cq.ring.SetArmed(abi.ArmAny)
	}
	return nil
}

// Wait blocks until the CQ may have completions or ctx ends; a convenience
// for tools that would rather not spin. Poll after it returns. It sets
// the ring's waiting word and sleeps on the CQ's own wake pipe, which the
// NIC writes after its next completion: a system call only when there
// was nothing to poll.
func (cq *CQ) Wait(ctx context.Context) error {
	idle := false
	for {
		cq.mu.Lock()
		if cq.ring == nil {
			cq.mu.Unlock()
			return ErrClosed
		}
		if cq.ring.Producer() != cq.cons {
			cq.mu.Unlock()
			return nil
		}
		cq.ring.SetWaiting(true)
		ready := cq.ring.Producer() != cq.cons // a completion that raced the flag
		cq.mu.Unlock()
		if ready {
			return nil
		}
		// Completions the daemon wrote before it went (a SIGTERM's
		// flush) are taken above first.
		if idle {
			if err := cq.ctx.fatal(); err != nil {
				return err
			}
		}
		var err error
		if idle, err = waitBounded(ctx, cq.wake); err != nil || !idle {
			return err
		}
	}
}

// Destroy destroys the CQ (ibv_destroy_cq).
func (cq *CQ) Destroy() error {
	if err := cq.ctx.destroy(abi.KindDestroyCQ, cq.h); err != nil {
		return err
	}
	if cq.ch != nil {
		cq.ch.mu.Lock()
		for i, o := range cq.ch.cqs {
			if o == cq {
				cq.ch.cqs = append(cq.ch.cqs[:i], cq.ch.cqs[i+1:]...)
				break
			}
		}
		cq.ch.mu.Unlock()
	}
	cq.mu.Lock()
	defer cq.mu.Unlock()
	unix.Munmap(cq.mem)
	cq.ring, cq.mem = nil, nil
	return cq.wake.close()
}
