package hostif

import (
	"sync"

	"golang.org/x/sys/unix"

	"github.com/rnicd/rnicd/abi"
	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/rnic"
)

// Asynchronous events (ibv_get_async_event). Each client has one queue,
// opened by KindOpenAsync (clib does at ibv_open_device), into which the
// device's objects raise their events through handlers this file sets
// when the client creates them: a handler is a closure over its owner's
// connection and handle, so an event can only ever reach the client
// whose object raised it. Port events go to every client with a queue.
// The queue is bounded: an event past maxAsyncEvents is dropped and
// counted (hostif_async_event_dropped), so that a client that never
// reads its events cannot grow the daemon. The client learns of a new
// event through a wake pipe (wakePipe: no client flag can block the
// daemon's write) and takes it with KindGetAsyncEvent; when the daemon
// goes, the pipe's end of file is DEVICE_FATAL.

// maxAsyncEvents is the most events a client's queue holds. The kernel's
// uverbs queue is unbounded; 256 holds every event a client's QPs, CQs
// and SRQs raise in a burst (each raises at most one or two per state
// change) while its reader is slow, in 3 KiB.
const maxAsyncEvents = 256

// asyncEvent is one queued event: its type, and the kind and handle of
// the object it is affiliated with (0 for a port event).
type asyncEvent struct {
	typ  ib.EventType
	kind objKind
	h    uint32
}

// asyncQueue is a client's event queue; its fields are mu's.
type asyncQueue struct {
	mu     sync.Mutex
	fd     int // the wake pipe's write end; valid while open
	open   bool
	closed bool
	ring   []asyncEvent // maxAsyncEvents long once open
	head   int
	n      int
}

// registerAsync adds the requests of this file to the request table.
func registerAsync(r map[abi.Kind]request) {
	empty := func() abi.Body { return &abi.Empty{} }
	// Charged by dispatch as every creating request is, so that a
	// refusal is counted (hostif_over_limit) and logged as theirs are.
	r[abi.KindOpenAsync] = request{body: empty, cost: costOf(costChannel), handle: (*conn).openAsync}
	r[abi.KindGetAsyncEvent] = request{body: empty, handle: (*conn).getAsyncEvent}
	r[abi.KindModifySRQ] = request{body: func() abi.Body { return &abi.ModifySRQReq{} }, target: kindSRQ,
		handle: (*conn).modifySRQ}
	r[abi.KindQuerySRQ] = request{body: func() abi.Body { return &abi.Handle{} }, target: kindSRQ,
		handle: (*conn).querySRQ}
}

// openAsync opens the client's queue and hands it the wake pipe's read
// end. The pipe's write end is charged as a completion channel's is
// (dispatch charges it, and refunds it if this fails; closeAsync when
// the connection ends).
func (c *conn) openAsync(object, abi.Body, []int) (abi.Body, []int, error) {
	a := &c.async
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.open || a.closed {
		return nil, nil, errf(abi.CodeBusy, "open_async: the connection's event queue is open already")
	}
	rd, wr, err := wakePipe()
	if err != nil {
		return nil, nil, err
	}
	a.fd, a.open, a.ring = wr, true, make([]asyncEvent, maxAsyncEvents)
	return &abi.Empty{}, []int{rd}, nil
}

// closeAsync closes the queue when the connection ends: no event is
// queued after it, and the wake pipe's write end goes.
func (c *conn) closeAsync() {
	a := &c.async
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.open {
		unix.Close(a.fd)
		c.s.acct.refund(c.pid, costChannel)
	}
	a.open, a.closed, a.ring, a.n = false, true, nil, 0
}

// raise queues e for the client and wakes its reader. It may run on any
// goroutine, with a device object's lock held: it takes only the queue's
// lock, and the wake is a write that never blocks. A client without a
// queue gets nothing, nor does any client once the daemon shuts down
// (its hang-up is the one event left).
func (c *conn) raise(e asyncEvent) {
	if c.s.closing.Load() {
		return
	}
	a := &c.async
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.open {
		return
	}
	if a.n == len(a.ring) {
		c.s.asyncDropped.Add(1)
		return
	}
	a.ring[(a.head+a.n)%len(a.ring)] = e
	a.n++
	c.s.asyncRaised.Add(1)
	// Under the lock: closeAsync closes fd, whose number could be
	// another descriptor's by the time a write outside it ran.
	signalFD(a.fd)
}

// pop takes the oldest event. While more wait, the wake pipe is written
// again: the client empties it before it asks (so that no wake-up is
// lost), and its fd must stay readable while an event waits, as the
// kernel's async event file is, for a program that polls it.
func (a *asyncQueue) pop() (asyncEvent, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.n == 0 {
		return asyncEvent{}, false
	}
	e := a.ring[a.head]
	a.head = (a.head + 1) % len(a.ring)
	a.n--
	if a.n > 0 && a.open {
		signalFD(a.fd)
	}
	return e, true
}

// getAsyncEvent answers the oldest event of an object that still exists
// (handles are never reused on a connection, so an event of an object
// the client destroyed meanwhile is skipped, as rdma-core's destroy
// drops them), or none.
func (c *conn) getAsyncEvent(object, abi.Body, []int) (abi.Body, []int, error) {
	for {
		e, ok := c.async.pop()
		if !ok {
			return &abi.AsyncEvent{}, nil, nil
		}
		if e.h == 0 {
			return &abi.AsyncEvent{Have: true, Type: e.typ, Port: 1}, nil, nil
		}
		if _, err := c.get(e.h, e.kind); err != nil {
			continue
		}
		return &abi.AsyncEvent{Have: true, Type: e.typ, H: e.h}, nil, nil
	}
}

// watchQP, watchCQ and watchSRQ make the device's object h raise its
// events into its owner's queue.
func (c *conn) watchQP(qp *rnic.QP, h uint32) {
	qp.SetEventHandler(func(t ib.EventType) { c.raise(asyncEvent{typ: t, kind: kindQP, h: h}) })
}

func (c *conn) watchCQ(cq *rnic.CQ, h uint32) {
	cq.SetErrorHandler(func() { c.raise(asyncEvent{typ: ib.EventCQErr, kind: kindCQ, h: h}) })
}

func (c *conn) watchSRQ(s *rnic.SRQ, h uint32) {
	s.SetLimitHandler(func() { c.raise(asyncEvent{typ: ib.EventSRQLimitReached, kind: kindSRQ, h: h}) })
}

// PortEvent tells every client of the port's link going up
// (PORT_ACTIVE) or down (PORT_ERR), as rxe's rxe_port_up and
// rxe_port_down dispatch them to every context of the device.
func (s *Server) PortEvent(active bool) {
	s.SetPortState(active)
	t := ib.EventPortErr
	if active {
		t = ib.EventPortActive
	}
	s.mu.Lock()
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.raise(asyncEvent{typ: t})
	}
}

// SetPortState sets the state query_port answers (PORT_ACTIVE, or
// PORT_DOWN while the link is down, as rxe's port) without an event: the
// state the link was found in at start.
func (s *Server) SetPortState(active bool) { s.portDown.Store(!active) }

func (s *Server) portState() uint8 {
	if s.portDown.Load() {
		return abi.PortDown
	}
	return abi.PortActive
}

// asyncCounters adds the event counters to m.
func (s *Server) asyncCounters(m map[string]uint64) {
	m["hostif_async_event"] = s.asyncRaised.Load()
	m["hostif_async_event_dropped"] = s.asyncDropped.Load()
}

// modifySRQ arms or disarms the SRQ's limit (ibv_modify_srq with
// IBV_SRQ_LIMIT). A limit above the SRQ's size is EINVAL, as rxe's
// rxe_srq_chk_attr answers; resizing (IBV_SRQ_MAX_WR), which rxe has
// and rnicd's fixed rings have not, is refused, as on a device without
// IBV_DEVICE_SRQ_RESIZE.
func (c *conn) modifySRQ(o object, b abi.Body, _ []int) (abi.Body, []int, error) {
	r, s := b.(*abi.ModifySRQReq), o.(*srqObj)
	switch {
	case r.Mask&^(abi.SRQMaxWR|abi.SRQLimit) != 0:
		return nil, nil, errf(abi.CodeInvalid, "modify_srq: unknown attribute mask %#x", r.Mask)
	case r.Mask&abi.SRQMaxWR != 0:
		return nil, nil, errf(abi.CodeInvalid, "modify_srq: rnicd cannot resize an SRQ (IBV_SRQ_MAX_WR)")
	case r.Mask&abi.SRQLimit != 0 && r.Limit > uint32(s.maxWR):
		return nil, nil, errf(abi.CodeInvalid, "modify_srq: limit %d above the SRQ's %d WRs", r.Limit, s.maxWR)
	}
	if r.Mask&abi.SRQLimit != 0 {
		s.srq.SetLimit(int(r.Limit))
	}
	return &abi.Empty{}, nil, nil
}

// querySRQ answers ibv_query_srq from the device: the limit reads 0
// once it fired.
func (c *conn) querySRQ(o object, _ abi.Body, _ []int) (abi.Body, []int, error) {
	s := o.(*srqObj)
	return &abi.SRQAttrReply{MaxWR: uint32(s.maxWR), MaxSGE: uint32(s.maxSGE), Limit: uint32(s.srq.Limit())}, nil, nil
}
