package perftest

// Taking completions: spinning as perftest does, or with -e sleeping on
// the CQ's completion channel.

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/rnicd/rnicd/verbs"
)

// poller waits for completions. It spins on the CQ as perftest spins in
// ibv_poll_cq, with a daemon as with an in-process NIC: verbs.CQ.Poll
// gives the core away (sched_yield) after a short spin, as clib's
// poll_cq does, so the daemons still get theirs on 2 cores, and with an
// in-process NIC every empty poll runs the NIC's receive pipeline on this
// thread. Sleeping on the CQ's wake pipe instead made every completion
// a wake-up through the daemon, a pipe and Go's netpoller: rnic
// ib_send_lat -s 2 took 43-48 us a round trip on the daemon's path where
// Debian's through clib, spinning, took 20-21 us (2 cores, idle,
// 2026-11-27).
//
// With a daemon the spin is Poll alone, one goroutine on one thread, as
// perftest's is one thread: a runtime.Gosched between polls wakes another
// thread (the runtime's wakep) that takes the goroutine over, so that the
// tool ran on two or three threads at once, each competing with the
// daemons for the cores (54,731 futex calls in one ib_send_lat -n 20000).
// verbs.CQ.Poll yields the thread to other processes itself. With an
// in-process NIC the NIC's own goroutines need the Gosched.
type poller struct {
	cq    *verbs.CQ
	idle  time.Duration
	wcs   []verbs.WC
	local bool // the NIC is in this process (verbs.OpenLocal)
	// ch, with -e: an empty CQ is waited on by its completion channel,
	// re-armed after each event, as perftest's ctx_notify_events.
	ch *verbs.CompChannel
}

// newPoller polls cq for at most n completions at a time.
func (t *test) newPoller(cq *verbs.CQ, n int) *poller {
	pl := &poller{cq: cq, idle: t.idle, wcs: make([]verbs.WC, n), local: t.ctx.Local()}
	if t.res != nil {
		pl.ch = t.res.channels[cq]
	}
	return pl
}

// waitEvent is the wait of -e: the CQ's next event on its channel, then
// the CQ armed again before it is polled (perftest's ctx_notify_events).
func (pl *poller) waitEvent(ctx context.Context) error {
	if _, err := pl.ch.GetCQEvent(ctx); err != nil {
		return err
	}
	if err := pl.cq.ReqNotify(false); err != nil {
		return fmt.Errorf("couldn't request CQ notification: %w", err)
	}
	return nil
}

func (pl *poller) poll(max int) ([]verbs.WC, error) {
	return pl.pollUntil(max, time.Time{})
}

// pollOne waits for one completion, which must be a success.
func (pl *poller) pollOne(what string) error {
	wcs, err := pl.poll(1)
	if err != nil {
		return err
	}
	if wcs[0].Status != verbs.WCSuccess {
		return wcError(&wcs[0], what)
	}
	return nil
}

// pollUntil is poll that gives up without an error at end, if end is
// set: a -D run's end comes whether or not completions do.
func (pl *poller) pollUntil(max int, end time.Time) ([]verbs.WC, error) {
	if n := pl.cq.Poll(pl.wcs[:max]); n > 0 {
		return pl.wcs[:n], nil
	}
	if pl.ch == nil {
		return pl.spinUntil(max, end)
	}
	ctx, cancel := context.WithTimeout(context.Background(), pl.idle)
	defer cancel()
	if !end.IsZero() {
		var cancelEnd context.CancelFunc
		ctx, cancelEnd = context.WithDeadline(ctx, end)
		defer cancelEnd()
	}
	for {
		if n := pl.cq.Poll(pl.wcs[:max]); n > 0 {
			return pl.wcs[:n], nil
		}
		if err := pl.waitEvent(ctx); err != nil {
			if !end.IsZero() && !time.Now().Before(end) {
				return nil, nil
			}
			if errors.Is(err, context.DeadlineExceeded) {
				return nil, fmt.Errorf("%w: no completion for %v", ErrRun, pl.idle)
			}
			return nil, fmt.Errorf("%w: %w", ErrRun, err) // the daemon is gone
		}
	}
}

// spinUntil is pollUntil without -e: poll until a completion comes, end
// passes or the idle timeout does (looked at every 64 empty polls: under
// load each may wait up to a millisecond in Poll), with an in-process NIC
// yielding between polls to the process's other goroutines; a CQ that
// overran, was destroyed or whose daemon hung up ends it (CQ.Err, looked
// at every 65536 empty polls, as clib's poll_cq looks for its daemon).
func (pl *poller) spinUntil(max int, end time.Time) ([]verbs.WC, error) {
	idle := time.Now().Add(pl.idle)
	for spins := 1; ; spins++ {
		if n := pl.cq.Poll(pl.wcs[:max]); n > 0 {
			return pl.wcs[:n], nil
		}
		if pl.local {
			runtime.Gosched()
		}
		if spins%64 != 0 {
			continue
		}
		now := time.Now()
		if !end.IsZero() && !now.Before(end) {
			return nil, nil
		}
		if now.After(idle) {
			return nil, fmt.Errorf("%w: no completion for %v", ErrRun, pl.idle)
		}
		if spins%(1<<16) != 0 {
			continue
		}
		if err := pl.cq.Err(); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrRun, err)
		}
	}
}

func wcError(wc *verbs.WC, what string) error {
	err := fmt.Errorf("%w: %s completion with error: %v (vendor err 0, wr_id %d, QP %#x)", ErrRun, what, wc.Status, wc.WRID, wc.QPNum)
	if wc.Status == verbs.WCRetryExcErr {
		// What a user needs to hear: the other side is gone, not broken.
		err = fmt.Errorf("%w: the peer stopped answering (no ACK through retry_cnt 7 retries of the QP's ACK timeout)", err)
	}
	return err
}
