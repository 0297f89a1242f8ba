package verbs

import (
	"context"
	"fmt"

	"github.com/rnicd/rnicd/abi"
	"github.com/rnicd/rnicd/ib"
)

// EventType is an asynchronous event's type (enum ibv_event_type).
type EventType = ib.EventType

// The asynchronous events rnicd raises (IBV_EVENT_*).
const (
	EventCQErr            = ib.EventCQErr
	EventQPFatal          = ib.EventQPFatal
	EventQPReqErr         = ib.EventQPReqErr
	EventQPAccessErr      = ib.EventQPAccessErr
	EventCommEst          = ib.EventCommEst
	EventPortActive       = ib.EventPortActive
	EventPortErr          = ib.EventPortErr
	EventSRQLimitReached  = ib.EventSRQLimitReached
	EventQPLastWQEReached = ib.EventQPLastWQEReached
)

// AsyncEvent is an asynchronous event (struct ibv_async_event): its type
// and the object it is about, one of QP, CQ and SRQ, or Port (1) for a
// port event. DEVICE_FATAL is AsyncEvents.Get's ErrDeviceFatal.
type AsyncEvent struct {
	Type EventType
	QP   *QP
	CQ   *CQ
	SRQ  *SRQ
	Port int
}

// AsyncEvents is a Context's asynchronous event queue (ibv_open_device's
// async_fd): the daemon queues the events of the Context's own QPs, CQs
// and SRQs and of the port from OpenAsyncEvents on, at most 256 at a
// time (more are dropped and counted, hostif_async_event_dropped).
type AsyncEvents struct {
	ctx *Context
	ev  *eventFD
}

// OpenAsyncEvents opens the Context's event queue; once per Context.
// Events raised before it are not kept.
func (c *Context) OpenAsyncEvents() (*AsyncEvents, error) {
	fds, err := c.call(abi.KindOpenAsync, &abi.Empty{}, nil, &abi.Empty{})
	if err != nil {
		return nil, err
	}
	if len(fds) != 1 {
		closeFDs(fds)
		return nil, fmt.Errorf("verbs: open_async: reply carries %d descriptors, want a wake pipe", len(fds))
	}
	ev, err := newEventFD(fds[0])
	if err != nil {
		return nil, err
	}
	return &AsyncEvents{ctx: c, ev: ev}, nil
}

// track makes o (a *QP, *CQ or *SRQ with handle h) what an event naming
// h is about; Context.destroy forgets it.
func (c *Context) track(h uint32, o any) { c.objs.Store(h, o) }

// Get waits for the next event (ibv_get_async_event). An event of an
// object destroyed meanwhile is skipped. It fails with ErrDeviceFatal
// once the daemon is gone, and with ctx's error when ctx ends.
func (a *AsyncEvents) Get(ctx context.Context) (AsyncEvent, error) {
	idle := false
	for {
		var r abi.AsyncEvent
		if _, err := a.ctx.call(abi.KindGetAsyncEvent, &abi.Empty{}, nil, &r); err != nil {
			if ferr := a.ctx.fatal(); ferr != nil {
				return AsyncEvent{}, ferr
			}
			return AsyncEvent{}, err
		}
		if r.Have {
			e := AsyncEvent{Type: r.Type, Port: int(r.Port)}
			if r.H == 0 {
				return e, nil
			}
			o, _ := a.ctx.objs.Load(r.H)
			switch o := o.(type) {
			case *QP:
				e.QP = o
			case *CQ:
				e.CQ = o
			case *SRQ:
				e.SRQ = o
			default:
				continue
			}
			return e, nil
		}
		if idle {
			if err := a.ctx.fatal(); err != nil {
				return AsyncEvent{}, err
			}
		}
		var err error
		if idle, err = waitBounded(ctx, a.ev); err != nil {
			return AsyncEvent{}, err
		}
	}
}

// FD is the descriptor the events' wake-ups arrive on (ibv_context's
// async_fd), for a program that prints or polls it.
func (a *AsyncEvents) FD() int { return a.ev.fd }

// Close stops waiting on the queue; the daemon keeps it until the
// Context closes.
func (a *AsyncEvents) Close() error { return a.ev.close() }

// SetLimit arms the SRQ's limit (ibv_modify_srq with IBV_SRQ_LIMIT):
// EventSRQLimitReached comes once when fewer than n WQEs are left, and
// the limit is then 0 again; 0 disarms it.
func (s *SRQ) SetLimit(n int) error {
	if n < 0 {
		return fmt.Errorf("verbs: SRQ limit %d is negative", n)
	}
	_, err := s.pd.ctx.call(abi.KindModifySRQ, &abi.ModifySRQReq{H: s.h, Mask: abi.SRQLimit, Limit: uint32(n)}, nil, &abi.Empty{})
	return err
}

// Limit reads the SRQ's armed limit (ibv_query_srq's srq_limit): 0 when
// disarmed or once it fired.
func (s *SRQ) Limit() (int, error) {
	var r abi.SRQAttrReply
	if _, err := s.pd.ctx.call(abi.KindQuerySRQ, &abi.Handle{H: s.h}, nil, &r); err != nil {
		return 0, err
	}
	return int(r.Limit), nil
}
