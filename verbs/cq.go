package verbs

import (
	"context"

	"fmt"

	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/rnicd/rnicd/abi"
	"github.com/rnicd/rnicd/ib"

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
// (ibv_poll_cq). It never blocks. With a daemon it makes no system call;
// with an in-process NIC (OpenLocal) a Poll that finds the CQ empty busy
// polls (Context.BusyPoll) and looks again.
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
	// for its whole time slice. After a short spin, every few empty
	// polls give the core away (sched_yield, which returns at once when
	// nothing else is runnable).
	if e := cq.empty.Add(1); e > pollSpin && e%pollYieldEvery == 0 {
		unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
	}
	return 0
}

// pollSpin is how many empty polls in a row spin before Poll starts to
// yield, one in pollYieldEvery of them: about the time a completion takes
// through the daemon's engine when it has a core (a few microseconds).
// Every empty poll after that yields, as the engine does when idle (see
// rnic's spinYield for what one yield in several cost on 2 cores).
const (
	pollSpin       = 64
	pollYieldEvery = 1
)

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
// lost); the CQ was too small for its QPs.
func (cq *CQ) Err() error {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.ring != nil && cq.ring.Overrun() {
		return ErrCQOverrun
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
