package verbs

import (
	"context"
	"errors"
	"fmt"

	"sync"

	"time"

	"github.com/rnicd/rnicd/abi"
)

// CompChannel is a completion channel (ibv_comp_channel): where armed CQs
// report completion events.
type CompChannel struct {
	ctx *Context
	h   uint32
	ev  *eventFD

	mu  sync.Mutex
	cqs []*CQ
}

// CreateCompChannel creates a completion channel (ibv_create_comp_channel).
func (c *Context) CreateCompChannel() (*CompChannel, error) {
	var r abi.Handle
	fds, err := c.call(abi.KindCreateChannel, &abi.Empty{}, nil, &r)
	if err != nil {
		return nil, err
	}
	if len(fds) != 1 {
		closeFDs(fds)
		c.destroy(abi.KindDestroyChannel, r.H)
		return nil, fmt.Errorf("verbs: create_comp_channel: reply carries %d descriptors, want a wake pipe", len(fds))
	}
	ev, err := newEventFD(fds[0])
	if err != nil {
		c.destroy(abi.KindDestroyChannel, r.H)
		return nil, err
	}
	return &CompChannel{ctx: c, h: r.H, ev: ev}, nil
}

// GetCQEvent waits for the next completion event and returns its CQ
// (ibv_get_cq_event). Re-arm the CQ with ReqNotify before polling it empty.
// It fails with ErrDeviceFatal once the daemon is gone.
func (ch *CompChannel) GetCQEvent(ctx context.Context) (*CQ, error) {
	idle := false
	for {
		ch.mu.Lock()
		for _, cq := range ch.cqs {
			if ev := cq.ring.Events(); ev != cq.seen {
				cq.seen++
				ch.mu.Unlock()
				return cq, nil
			}
		}
		ch.mu.Unlock()
		if idle {
			if err := ch.ctx.fatal(); err != nil {
				return nil, err
			}
		}
		var err error
		if idle, err = waitBounded(ctx, ch.ev); err != nil {
			return nil, err
		}
	}
}

// waitBounded waits on e for at most a tenth of a second, so that a
// waiter looks at its daemon now and then; idle says the time ran out.
func waitBounded(ctx context.Context, e *eventFD) (idle bool, err error) {
	wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	err = e.wait(wctx)
	cancel()
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return true, nil
	}
	return false, err
}

// Destroy destroys the channel (ibv_destroy_comp_channel).
func (ch *CompChannel) Destroy() error {
	if err := ch.ctx.destroy(abi.KindDestroyChannel, ch.h); err != nil {
		return err
	}
	return ch.ev.close()
}
