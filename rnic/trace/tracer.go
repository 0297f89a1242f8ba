package trace

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultRing is the number of events a Tracer keeps for its readers.
const DefaultRing = 1 << 16

// Tracer collects the events of one or more NICs into a ring that readers
// drain. It records only while at least one reader is subscribed; with
// none, a Probe's On reports false and the engines build no events. It is
// safe for concurrent use.
type Tracer struct {
	// on is 1 while a reader is subscribed: events are wanted. Probe.On
	// is one load of it.
	on atomic.Uint32
	// wants is what the readers' filters select together, read by every
	// Emit without the lock: nil while some reader takes every event.
	// An event no reader wants never takes the lock nor a ring slot, so
	// a filtered reader (rnicd -trace-qp, -trace-packets, rnic trace -qp)
	// is not overrun by the events it would have skipped.
	wants atomic.Pointer[[]Filter]

	mu   sync.Mutex
	ring []Event // power-of-two length; event seq s lives at s & mask
	mask uint64
	seq  uint64 // seq of the newest event, 0 before the first
	subs map[*Sub]struct{}
}

// New returns a Tracer whose ring holds size events (rounded up to a
// power of two; 0 takes DefaultRing).
func New(size int) *Tracer {
	if size <= 0 {
		size = DefaultRing
	}
	n := 1
	for n < size {
		n <<= 1
	}
	return &Tracer{ring: make([]Event, n), mask: uint64(n - 1), subs: make(map[*Sub]struct{})}
}

// readersChanged records whether t has readers and what they select;
// t.mu is held.
func (t *Tracer) readersChanged() {
	var fs []Filter
	for s := range t.subs {
		if s.f == (Filter{}) {
			fs = nil
			break
		}
		fs = append(fs, s.f)
	}
	if fs == nil {
		t.wants.Store(nil)
	} else {
		t.wants.Store(&fs)
	}
	v := uint32(0)
	if len(t.subs) > 0 {
		v = 1
	}
	t.on.Store(v)
}

// wanted reports whether some reader's filter selects e.
func (t *Tracer) wanted(e *Event) bool {
	fs := t.wants.Load()
	if fs == nil {
		return true
	}
	for i := range *fs {
		if (*fs)[i].Match(e) {
			return true
		}
	}
	return false
}

// Probe is one NIC's handle on a Tracer: the engines of a device hold it,
// nil when the device traces nothing.
type Probe struct {
	t   *Tracer
	nic string
}

// Probe returns the handle through which the NIC named nic emits events;
// nil for a nil Tracer.
func (t *Tracer) Probe(nic string) *Probe {
	if t == nil {
		return nil
	}
	return &Probe{t: t, nic: nic}
}

// On reports whether events are wanted: p is not nil and its Tracer has a
// reader. Engines check it before building an event.
func (p *Probe) On() bool { return p != nil && p.t.on.Load() != 0 }

// Tracer is the Tracer p emits into.
func (p *Probe) Tracer() *Tracer { return p.t }

// NIC is the name the probe stamps on its events.
func (p *Probe) NIC() string { return p.nic }

// Emit stamps e with the NIC's name, the time and a sequence number, and
// puts it in the ring, unless no reader's filter selects it. Call it only
// when On reported true.
func (p *Probe) Emit(e Event) {
	e.NIC = p.nic
	t := p.t
	if !t.wanted(&e) {
		return
	}
	e.Time = time.Now().UnixNano()
	t.mu.Lock()
	t.seq++
	e.Seq = t.seq
	t.ring[t.seq&t.mask] = e
	for s := range t.subs {
		if !s.f.Match(&e) {
			continue
		}
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
	t.mu.Unlock()
}

// Filter selects events for a reader. Its zero value selects all.
type Filter struct {
	// QPN, if not 0, keeps the events of that QP: every step of its
	// messages, and the packets it sent and received (a sent packet's
	// event names the QP it left from; the BTH names only the QP it goes
	// to, which on the peer may have any number).
	QPN uint32
	// NIC, if set, keeps that NIC's events.
	NIC string
	// Packets keeps only packets on the wire (transmit, receive, lost).
	Packets bool
}

// Match reports whether f selects e.
func (f *Filter) Match(e *Event) bool {
	if f.QPN != 0 && e.QPN != f.QPN {
		return false
	}
	if f.NIC != "" && e.NIC != f.NIC {
		return false
	}
	if f.Packets && !e.IsPacket() {
		return false
	}
	return true
}

// Sub is a reader of a Tracer: it sees the events emitted after it
// subscribed, in order, those its filter selects.
type Sub struct {
	t      *Tracer
	f      Filter
	next   uint64 // seq of the next event to read
	lost   uint64
	wake   chan struct{}
	closed bool
}

// Subscribe starts a reader and turns recording on.
func (t *Tracer) Subscribe(f Filter) *Sub {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := &Sub{t: t, f: f, next: t.seq + 1, wake: make(chan struct{}, 1)}
	t.subs[s] = struct{}{}
	t.readersChanged()
	return s
}

// Close ends the reader; recording stops with the last one.
func (s *Sub) Close() {
	t := s.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	delete(t.subs, s)
	t.readersChanged()
}

// Lost is the number of events the reader missed because it fell more
// than a ring behind. The ring holds what any reader selects, so with
// readers of different filters some of these may be another's.
func (s *Sub) Lost() uint64 {
	s.t.mu.Lock()
	defer s.t.mu.Unlock()
	return s.lost
}

// TryRead copies into buf the events waiting for the reader, oldest
// first, without blocking, and returns how many. Where the reader fell
// more than the ring behind, the first is a StepLost event saying how
// many went unread (some perhaps another reader's), timed as the first
// event after them: a timeline shows its gap where it is.
func (s *Sub) TryRead(buf []Event) int {
	t := s.t
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	if oldest := t.seq - t.mask; t.seq > t.mask && s.next < oldest {
		skipped := oldest - s.next
		s.lost += skipped
		s.next = oldest
		if len(buf) > 0 {
			buf[0] = Event{Seq: oldest - 1, Time: t.ring[oldest&t.mask].Time, Module: ModTrace, Step: StepLost,
				Arg: uint32(min(skipped, math.MaxUint32))}
			n = 1
		}
	}
	for ; n < len(buf) && s.next <= t.seq; s.next++ {
		e := &t.ring[s.next&t.mask]
		if s.f.Match(e) {
			buf[n] = *e
			n++
		}
	}
	return n
}

// Read waits until events are waiting, or ctx is done, and copies them
// into buf.
func (s *Sub) Read(ctx context.Context, buf []Event) (int, error) {
	for {
		if n := s.TryRead(buf); n > 0 {
			return n, nil
		}
		select {
		case <-s.wake:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}
