package perftest

// Taking completions: spinning as perftest does with an in-process NIC,
// sleeping on the CQ with a daemon.

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/rnicd/rnicd/verbs"
)

// poller waits for completions. With a daemon it does not spin a CPU
// away, which the daemons need: it polls, and when the CQ is empty waits
// on it for at most the idle timeout. With an in-process NIC it spins, as
// perftest does, and every empty poll runs the NIC's receive pipeline on
// this thread (verbs.CQ.Poll): the completion is found with no wake-up.
type poller struct {
	cq   *verbs.CQ
	idle time.Duration
	spin bool
	wcs  []verbs.WC
	// ch, with -e: an empty CQ is waited on by its completion channel,
	// re-armed after each event, as perftest's ctx_notify_events.
	ch *verbs.CompChannel
}

// newPoller polls cq for at most n completions at a time.
func (t *test) newPoller(cq *verbs.CQ, n int) *poller {
	pl := &poller{cq: cq, idle: t.idle, spin: t.ctx.Local(), wcs: make([]verbs.WC, n)}
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
	if pl.spin && pl.ch == nil {
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
		wait := pl.cq.Wait
		if pl.ch != nil {
			wait = pl.waitEvent
		}
		if err := wait(ctx); err != nil {
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

// spinUntil is pollUntil for an in-process NIC: poll until a completion
// comes, end passes or the idle timeout does, yielding between polls to
// the process's other goroutines.
func (pl *poller) spinUntil(max int, end time.Time) ([]verbs.WC, error) {
	idle := time.Now().Add(pl.idle)
	for spins := 1; ; spins++ {
		if n := pl.cq.Poll(pl.wcs[:max]); n > 0 {
			return pl.wcs[:n], nil
		}
		runtime.Gosched()
		if spins%1024 != 0 {
			continue
		}
		now := time.Now()
		if !end.IsZero() && !now.Before(end) {
			return nil, nil
		}
		if now.After(idle) {
			return nil, fmt.Errorf("%w: no completion for %v", ErrRun, pl.idle)
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
