package fault

import (
	"container/heap"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rnicd/rnicd/wire/ibudp"
)

// Faults are the impairments of one direction of an Injector. The zero
// value passes every packet unharmed.
type Faults struct {
	Drop      float64 // probability that a packet is lost
	Duplicate float64 // probability that a packet is delivered twice
	Corrupt   float64 // probability that one bit of the RoCE part is flipped
	// Reorder is the probability that a packet is held back until
	// ReorderBy (0 means 1) later packets have passed, or ReorderTimeout
	// (0 means 10ms) has run out.
	Reorder        float64
	ReorderBy      int
	ReorderTimeout time.Duration
	// Every packet is delayed by Delay plus a uniform random part of
	// Jitter; a timer goroutine delivers it, the caller does not wait.
	Delay, Jitter time.Duration
	// With FilterQPN set, only packets whose BTH destination QP is QPN are
	// impaired; the others pass untouched and uncounted as Matched.
	FilterQPN bool
	QPN       uint32
	// DropNth, if positive, drops the DropNth packet matched after the
	// faults are set, once: a loss placed exactly, for tests and lessons.
	DropNth int
	// Link, with a Rate, is a bottleneck the packets that survive the
	// other impairments go through last (link.go).
	Link Link
}

// Counts is what an Injector did in one direction.
type Counts struct {
	Packets    uint64 // packets seen
	Matched    uint64 // packets the filter let the faults act on
	Dropped    uint64
	Duplicated uint64
	Corrupted  uint64
	Reordered  uint64 // held back
	Delayed    uint64
	Overflow   uint64 // RX: dropped because the receive queue was full

	// The bottleneck link (Faults.Link).
	LinkPackets uint64 // packets that went through its queue
	LinkDropped uint64 // tail drops: the queue was full
	Marked      uint64 // ECN-capable packets it marked CE
	QueueDepth  uint64 // bytes in the queue now
	QueuePeak   uint64 // the most bytes it held
}

// Stats are an Injector's counters.
type Stats struct{ TX, RX Counts }

const (
	dirTX = iota
	dirRX
)

const (
	defaultReorderTimeout = 10 * time.Millisecond
	faultyRxQueue         = 8192 // packets waiting for Recv
)

// Injector wraps an ibudp.Port and impairs its traffic: it drops,
// duplicates, reorders, delays and corrupts packets, per direction, at
// rates that can be changed while it runs. It stands in for netem, which
// this kernel lacks.
//
// TX corruption flips a bit after the port sealed the ICRC (Buf.Flip), so
// the peer's ICRC check catches it (this needs a port from ibudp.Open, or
// an Injector over one). RX corruption flips a bit after the port
// verified the ICRC and marks the Buf ICRCCorrupted, so it tests how the
// engine copes with a bad packet; to model a packet the wire garbled, use
// Drop.
//
// A direction with no impairments set and no packet held or delayed is a
// pass-through: Send and Recv hand the batch straight to the port, so an
// injector nobody uses costs a flag check per batch. Otherwise it
// copies packets it holds, delays or duplicates into buffers of its own,
// and on the receive side reads the port from a goroutine of its own, so
// it allocates and copies where a bare port does not. It is safe for
// concurrent use.
type Injector struct {
	port ibudp.Port
	pool *ibudp.Pool
	// rxSet and rxPassed are a Poller's: receive impairments were
	// set (go through the injector), and the packets its TryRecv passed
	// straight through. In Injector, so that SetRX and FaultStats called
	// on the embedded Injector (the monitor's) see them.
	rxSet    atomic.Bool
	rxPassed atomic.Uint64

	mu     sync.Mutex
	rng    *rand.Rand
	dir    [2]faultDir
	closed bool
	rxCond sync.Cond     // signalled when rxRdy grows, rxErr is set or closed
	rxRdy  []*ibudp.Buf  // delivered packets waiting for Recv (owned)
	rxErr  error         // the error that ended the receive goroutine
	timers delayQueue    // delayed packets of both directions (owned)
	nDelay uint64        // packets ever delayed: the next delayed.seq
	wake   chan struct{} // pokes the timer goroutine
	done   chan struct{}

	rxLooping bool // rxLoop is reading the port (RX is not a pass-through)

	txBusy    atomic.Bool   // TX is not a pass-through: busy(dirTX), set under mu
	txPassed  atomic.Uint64 // packets Send passed straight through
	txMu      sync.Mutex    // serializes Send's impairing path; guards txOut and txOwn
	txOut     []*ibudp.Buf  // the batch Send passes to the port
	txOwn     []*ibudp.Buf  // injector buffers in txOut, returned after sending
	closeOnce sync.Once
	closeErr  error
	wg        sync.WaitGroup
	tap       ibudp.TapSlot // told of the packets the injector drops

	// followers are the injectors of the other queues of a steered port
	// (Follow): each engine's socket has its own, and what is set here is
	// set on them, so that one `rnic inject` impairs the whole port.
	followers []*Injector
}

// Follow makes g, the injector of another queue of the same port, take
// every impairment set on f from now on, and f's FaultStats count g's
// packets too. A link model (Faults.Link) is then one per queue: with n
// queues the port's rate is n times the one set. Call it before the
// ports carry traffic.
func (f *Injector) Follow(g *Injector) {
	f.mu.Lock()
	f.followers = append(f.followers, g)
	f.mu.Unlock()
}

func (f *Injector) following() []*Injector {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.followers
}

type faultDir struct {
	f       Faults
	held    []heldBuf
	counts  Counts
	matched int // packets matched since the faults were set, for DropNth
	delayed int // packets of this direction in the delay queue
	queue   linkQueue
}

// impairs reports whether c does anything to a packet.
func (c *Faults) impairs() bool {
	return c.Drop > 0 || c.Duplicate > 0 || c.Corrupt > 0 || c.Reorder > 0 ||
		c.Delay > 0 || c.Jitter > 0 || c.DropNth > 0 || c.Link.Rate > 0
}

// busy reports whether direction d must go through the injector: it has
// impairments set, or packets held or delayed that later ones must not
// overtake for free. Called with mu held.
func (f *Injector) busy(d int) bool {
	fd := &f.dir[d]
	return fd.f.impairs() || len(fd.held) > 0 || fd.delayed > 0
}

// updateTXBusy publishes busy(dirTX) to Send's fast path. Called with mu
// held, after anything that may change it.
func (f *Injector) updateTXBusy() { f.txBusy.Store(f.busy(dirTX)) }

type heldBuf struct {
	b        *ibudp.Buf
	left     int
	deadline time.Time
}

// New wraps p in an injector. seed makes the random choices repeatable.
func New(p ibudp.Port, seed int64) *Injector {
	f := &Injector{
		port: p,
		pool: ibudp.NewPool(0, 4*faultyRxQueue),
		rng:  rand.New(rand.NewPCG(uint64(seed), 0x9e3779b97f4a7c15)),
		wake: make(chan struct{}, 1),
		done: make(chan struct{}),
	}
	f.rxCond.L = &f.mu
	f.wg.Add(1)
	go f.timerLoop()
	return f
}

// SetTX sets the impairments of sent packets.
func (f *Injector) SetTX(c Faults) {
	f.set(dirTX, c)
	for _, g := range f.following() {
		g.SetTX(c)
	}
}

// SetRX sets the impairments of received packets.
func (f *Injector) SetRX(c Faults) {
	f.set(dirRX, c)
	// After set, so that a Poller's TryRecv that saw no
	// impairments and clears the flag under the lock cannot undo this.
	if c.impairs() {
		f.rxSet.Store(true)
	}
	for _, g := range f.following() {
		g.SetRX(c)
	}
}

// TX returns the impairments of sent packets.
func (f *Injector) TX() Faults { f.mu.Lock(); defer f.mu.Unlock(); return f.dir[dirTX].f }

// RX returns the impairments of received packets.
func (f *Injector) RX() Faults { f.mu.Lock(); defer f.mu.Unlock(); return f.dir[dirRX].f }

func (f *Injector) set(d int, c Faults) {
	clamp := func(p float64) float64 { return min(max(p, 0), 1) }
	c.Drop, c.Duplicate, c.Corrupt, c.Reorder = clamp(c.Drop), clamp(c.Duplicate), clamp(c.Corrupt), clamp(c.Reorder)
	c.ReorderBy = max(c.ReorderBy, 1)
	if c.ReorderTimeout <= 0 {
		c.ReorderTimeout = defaultReorderTimeout
	}
	c.Delay, c.Jitter = max(c.Delay, 0), max(c.Jitter, 0)
	if l := &c.Link; l.Rate > 0 {
		if l.Queue <= 0 {
			l.Queue = DefaultLinkQueue
		}
		l.KMin, l.KMax = max(l.KMin, 0), max(l.KMax, 0)
		l.KMin = min(l.KMin, l.KMax)
		l.PMax = clamp(l.PMax)
	} else {
		c.Link = Link{}
	}
	f.mu.Lock()
	f.dir[d].f = c
	f.dir[d].matched = 0
	if c.Link.Rate == 0 {
		f.dir[d].queue = linkQueue{}
	}
	f.updateTXBusy()
	f.rxCond.Broadcast() // a Recv waiting on the loop may pass through now, or must start it
	f.mu.Unlock()
	f.poke()
}

// FaultStats returns what the injector has done so far.
func (f *Injector) FaultStats() Stats {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := Stats{TX: f.dir[dirTX].counts, RX: f.dir[dirRX].counts}
	st.TX.Packets += f.txPassed.Load()
	st.RX.Packets += f.rxPassed.Load()
	now := time.Now()
	for d, c := range []*Counts{&st.TX, &st.RX} {
		if l := f.dir[d].f.Link; l.Rate > 0 {
			q := f.dir[d].queue
			q.drain(l.Rate, now)
			c.QueueDepth = uint64(q.depth)
		}
	}
	for _, g := range f.followers {
		o := g.FaultStats()
		st.TX.add(&o.TX)
		st.RX.add(&o.RX)
	}
	return st
}

// add adds o's counts to c's; the queue's peak is the highest of them.
func (c *Counts) add(o *Counts) {
	c.Packets += o.Packets
	c.Matched += o.Matched
	c.Dropped += o.Dropped
	c.Duplicated += o.Duplicated
	c.Corrupted += o.Corrupted
	c.Reordered += o.Reordered
	c.Delayed += o.Delayed
	c.Overflow += o.Overflow
	c.LinkPackets += o.LinkPackets
	c.LinkDropped += o.LinkDropped
	c.Marked += o.Marked
	c.QueueDepth += o.QueueDepth
	c.QueuePeak = max(c.QueuePeak, o.QueuePeak)
}

func (f *Injector) Addr() netip.Addr { return f.port.Addr() }
func (f *Injector) MTU() int         { return f.port.MTU() }

// SetTap attaches t to the injector, which tells it of the packets it
// drops (and its link of what it marks or drops, to a LinkTap), and to
// the port it wraps (ibudp.SetTap).
func (f *Injector) SetTap(t ibudp.Tap) {
	f.tap.Set(t)
	ibudp.SetTap(f.port, t)
}

// Stats returns the counters of the wrapped port.
func (f *Injector) Stats() ibudp.Stats { return f.port.Stats() }

// Close closes the wrapped port and drops every packet still held or
// delayed.
func (f *Injector) Close() error {
	f.closeOnce.Do(func() {
		f.mu.Lock()
		f.closed = true
		f.rxCond.Broadcast()
		f.mu.Unlock()
		close(f.done)
		f.closeErr = f.port.Close()
		f.wg.Wait()
		f.mu.Lock()
		for _, e := range f.timers {
			f.pool.Put(e.b)
		}
		f.timers = nil
		for d := range f.dir {
			for _, h := range f.dir[d].held {
				f.pool.Put(h.b)
			}
			f.dir[d].held = nil
		}
		f.pool.PutBatch(f.rxRdy)
		f.rxRdy = nil
		f.mu.Unlock()
	})
	return f.closeErr
}

// Send impairs the batch and passes what is left to the port now; held and
// delayed packets follow later from the timer goroutine. With nothing to
// impair, the batch goes straight to the port.
func (f *Injector) Send(bufs []*ibudp.Buf) error {
	if !f.txBusy.Load() {
		f.txPassed.Add(uint64(len(bufs)))
		return f.port.Send(bufs)
	}
	f.txMu.Lock()
	defer f.txMu.Unlock()
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return fmt.Errorf("fault: send: %w", net.ErrClosed)
	}
	now := time.Now()
	for _, b := range bufs {
		if b == nil || len(b.Data) != ibudp.BufLen || b.N < 0 || b.N > ibudp.MaxRoCELen {
			f.txOut = append(f.txOut, b) // the port counts it as invalid
			continue
		}
		// What the injector keeps for later must not refer to
		// registered memory, which may be gone by then.
		b.Flatten()
		f.impair(dirTX, b, now, &f.txOut)
	}
	f.updateTXBusy()
	f.mu.Unlock()
	var err error
	if len(f.txOut) > 0 {
		err = f.port.Send(f.txOut)
	}
	clear(f.txOut)
	f.txOut = f.txOut[:0]
	f.pool.PutBatch(f.txOwn)
	f.txOwn = f.txOwn[:0]
	return err
}

// impair decides the fate of b in direction d. What goes out now is
// appended to *out (TX) or the ready queue (RX). In TX, b is the caller's
// and anything kept for later is a copy; buffers of the injector's sent now
// are listed in f.txOwn, to go back to the pool after sending. In RX, b is
// the injector's already. Called with mu held (and, in TX, txMu).
func (f *Injector) impair(d int, b *ibudp.Buf, now time.Time, out *[]*ibudp.Buf) {
	fd := &f.dir[d]
	c := &fd.f
	fd.counts.Packets++
	if c.FilterQPN && (b.N < 8 || destQPN(b.RoCE()) != c.QPN&0xffffff) {
		f.deliver(d, b, out)
		return
	}
	fd.counts.Matched++
	fd.matched++
	defer f.releaseHeld(d, now, out)
	if f.roll(c.Drop) || fd.matched == c.DropNth {
		fd.counts.Dropped++
		if t := f.tap.Load(); t != nil {
			t.Packet(ibudp.TapFaultDropTX+ibudp.TapPoint(d), nil, b.RoCE(), b.ICRC, b.QPN)
		}
		if d == dirRX {
			f.pool.Put(b)
		}
		return
	}
	copies := [2]*ibudp.Buf{b}
	n := 1
	if f.roll(c.Duplicate) {
		fd.counts.Duplicated++
		dup := f.pool.Get()
		dup.CopyFrom(b)
		if d == dirTX {
			f.txOwn = append(f.txOwn, dup)
		}
		copies[1], n = dup, 2
	}
	if f.roll(c.Corrupt) {
		fd.counts.Corrupted++
		f.corrupt(d, b)
	}
	for _, p := range copies[:n] {
		switch {
		case f.roll(c.Reorder):
			fd.counts.Reordered++
			// left counts this packet too: releaseHeld runs after it.
			fd.held = append(fd.held, heldBuf{b: f.keep(d, p), left: c.ReorderBy + 1, deadline: now.Add(c.ReorderTimeout)})
			f.poke() // the timer goroutine releases it at the deadline
		case c.Delay > 0 || c.Jitter > 0 || c.Link.Rate > 0:
			due := now
			if c.Link.Rate > 0 {
				var ok bool
				if due, ok = f.enqueue(d, p, now); !ok {
					if p != b {
						f.dropOwn(p) // the duplicate is the injector's
					}
					continue
				}
			}
			if c.Delay > 0 || c.Jitter > 0 {
				fd.counts.Delayed++
				due = due.Add(c.Delay)
				if c.Jitter > 0 {
					due = due.Add(time.Duration(f.rng.Int64N(int64(c.Jitter))))
				}
			}
			f.nDelay++
			heap.Push(&f.timers, delayed{due: due, seq: f.nDelay, dir: d, b: f.keep(d, p), link: c.Link.Rate > 0})
			fd.delayed++
			f.poke()
		default:
			f.deliver(d, p, out)
		}
	}
}

// dropOwn forgets p, a TX duplicate of the injector's that the link
// dropped, so that it goes back to the pool after the batch is sent.
// (RX buffers are the injector's throughout: enqueue put it back.)
func (f *Injector) dropOwn(p *ibudp.Buf) {
	for i, o := range f.txOwn {
		if o == p {
			f.txOwn = append(f.txOwn[:i], f.txOwn[i+1:]...)
			f.pool.Put(p)
			return
		}
	}
}

// keep returns a buffer of the injector's holding p's packet, to be sent or
// delivered later: p itself if it is the injector's, else a copy (and the
// caller's p loses any pending corruption, which went with the copy).
func (f *Injector) keep(d int, p *ibudp.Buf) *ibudp.Buf {
	if d == dirRX {
		return p
	}
	for i, o := range f.txOwn {
		if o == p {
			f.txOwn = append(f.txOwn[:i], f.txOwn[i+1:]...)
			return p
		}
	}
	c := f.pool.Get()
	c.CopyFrom(p)
	p.Flip = 0
	return c
}

// releaseHeld counts one more packet past every held packet of direction
// d and lets out those that have waited for enough of them, or long enough.
func (f *Injector) releaseHeld(d int, now time.Time, out *[]*ibudp.Buf) {
	fd := &f.dir[d]
	kept := fd.held[:0]
	for _, h := range fd.held {
		h.left--
		if h.left <= 0 || !now.Before(h.deadline) {
			f.deliver(d, h.b, out)
			continue
		}
		kept = append(kept, h)
	}
	clear(fd.held[len(kept):])
	fd.held = kept
}

// deliver passes b on: in TX onto the list to send, in RX onto the ready
// queue.
func (f *Injector) deliver(d int, b *ibudp.Buf, out *[]*ibudp.Buf) {
	if d == dirTX {
		*out = append(*out, b)
		return
	}
	if len(f.rxRdy) >= faultyRxQueue {
		f.dir[dirRX].counts.Overflow++
		f.pool.Put(b)
		return
	}
	f.rxRdy = append(f.rxRdy, b)
	f.rxCond.Signal()
}

// corrupt flips one random bit of b's RoCE part, never one of BTH byte 4,
// whose bits the ICRC does not cover. In TX the port flips it after sealing.
func (f *Injector) corrupt(d int, b *ibudp.Buf) {
	if b.N < 2 {
		return
	}
	i := f.rng.IntN(b.N - 1)
	if i >= 4 {
		i++
	}
	bit := i*8 + f.rng.IntN(8)
	if d == dirTX {
		b.Flip = uint32(bit) + 1
		return
	}
	b.Data[ibudp.Headroom+bit/8] ^= 1 << (bit % 8)
	b.ICRC = ibudp.ICRCCorrupted
}

func (f *Injector) roll(p float64) bool { return p > 0 && f.rng.Float64() < p }

func destQPN(roce []byte) uint32 { return uint32(roce[5])<<16 | uint32(roce[6])<<8 | uint32(roce[7]) }

func (f *Injector) poke() {
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// Recv returns received packets. While RX is busy (impairments set, or
// packets held or delayed) a goroutine of the injector reads the port and
// Recv returns what it let through; otherwise Recv reads the port itself.
func (f *Injector) Recv(bufs []*ibudp.Buf) (int, error) {
	if len(bufs) == 0 {
		return 0, nil
	}
	if err := ibudp.CheckRecvBufs(bufs); err != nil {
		return 0, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for {
		switch {
		case len(f.rxRdy) > 0:
			return f.takeReady(bufs), nil
		case f.closed:
			return 0, fmt.Errorf("fault: recv: %w", net.ErrClosed)
		case f.rxErr != nil:
			return 0, f.rxErr
		case f.busy(dirRX) && !f.rxLooping:
			f.rxLooping = true
			f.wg.Add(1)
			go f.rxLoop()
		case f.rxLooping:
			// Wait for the loop's packets, or for it to end once RX is
			// a pass-through again.
			f.rxCond.Wait()
		default:
			if n, err, done := f.recvDirect(bufs); done {
				return n, err
			}
		}
	}
}

// recvDirect reads the port into bufs itself, the pass-through. If
// impairments were set while it waited, it hands the packets to them
// instead and reports not done. Called with mu held; it lets go of it
// while it waits.
func (f *Injector) recvDirect(bufs []*ibudp.Buf) (n int, err error, done bool) {
	f.mu.Unlock()
	n, err = f.port.Recv(bufs)
	f.mu.Lock()
	if err != nil {
		if f.closed || errors.Is(err, net.ErrClosed) {
			return 0, fmt.Errorf("fault: recv: %w", net.ErrClosed), true
		}
		return 0, fmt.Errorf("fault: recv: %w", err), true
	}
	if !f.busy(dirRX) {
		f.dir[dirRX].counts.Packets += uint64(n)
		return n, nil, true
	}
	now := time.Now()
	for _, b := range bufs[:n] {
		c := f.pool.Get()
		c.CopyFrom(b)
		f.impair(dirRX, c, now, nil)
	}
	return 0, nil, false
}

// takeReady moves ready packets into bufs. Called with mu held.
func (f *Injector) takeReady(bufs []*ibudp.Buf) int {
	n := min(len(bufs), len(f.rxRdy))
	for i, b := range f.rxRdy[:n] {
		bufs[i].CopyFrom(b)
		f.pool.Put(b)
	}
	rest := copy(f.rxRdy, f.rxRdy[n:])
	clear(f.rxRdy[rest:])
	f.rxRdy = f.rxRdy[:rest]
	return n
}

// rxLoop reads the port and impairs what it reads, until RX is a
// pass-through again.
func (f *Injector) rxLoop() {
	defer f.wg.Done()
	bufs := make([]*ibudp.Buf, ibudp.DefaultBatch)
	f.pool.GetBatch(bufs)
	defer func() { f.pool.PutBatch(bufs) }()
	for {
		n, err := f.port.Recv(bufs)
		f.mu.Lock()
		if err != nil {
			if f.closed || errors.Is(err, net.ErrClosed) {
				err = fmt.Errorf("fault: recv: %w", net.ErrClosed)
			}
			f.rxErr = err
			f.rxLooping = false
			f.rxCond.Broadcast()
			f.mu.Unlock()
			return
		}
		now := time.Now()
		for i := range bufs[:n] {
			b := bufs[i]
			bufs[i] = f.pool.Get()
			f.impair(dirRX, b, now, nil)
		}
		if !f.busy(dirRX) {
			f.rxLooping = false
			f.rxCond.Broadcast()
			f.mu.Unlock()
			return
		}
		f.mu.Unlock()
	}
}

// timerLoop delivers delayed packets and releases held ones whose time is
// up.
func (f *Injector) timerLoop() {
	defer f.wg.Done()
	// The timer runs only while a packet waits: an armed timer, even an
	// hour away, costs every round trip of the engine several
	// microseconds in the Go scheduler.
	t := time.NewTimer(time.Hour)
	t.Stop()
	defer t.Stop()
	var send []*ibudp.Buf
	for {
		f.mu.Lock()
		now := time.Now()
		var next time.Time // zero: nothing waits
		for len(f.timers) > 0 && !f.timers[0].due.After(now) {
			e := heap.Pop(&f.timers).(delayed)
			f.dir[e.dir].delayed--
			if e.link {
				f.dequeue(e.dir, e.b, now)
			}
			f.deliver(e.dir, e.b, &send)
		}
		if len(f.timers) > 0 {
			next = f.timers[0].due
		}
		for d := range f.dir {
			fd := &f.dir[d]
			kept := fd.held[:0]
			for _, h := range fd.held {
				if !now.Before(h.deadline) {
					f.deliver(d, h.b, &send)
					continue
				}
				if next.IsZero() || h.deadline.Before(next) {
					next = h.deadline
				}
				kept = append(kept, h)
			}
			clear(fd.held[len(kept):])
			fd.held = kept
		}
		f.updateTXBusy()
		f.mu.Unlock()
		if len(send) > 0 {
			// Errors are the port's to count; a closed port ends the loop
			// through done.
			_ = f.port.Send(send)
			f.pool.PutBatch(send)
			send = send[:0]
		}
		var expired <-chan time.Time
		if !next.IsZero() {
			t.Reset(next.Sub(now))
			expired = t.C
		} else {
			t.Stop()
		}
		select {
		case <-f.done:
			return
		case <-f.wake:
		case <-expired:
		}
	}
}

// delayed is a packet waiting in the delay queue.
type delayed struct {
	due  time.Time
	seq  uint64 // order of arrival, so that packets due together keep it
	dir  int
	b    *ibudp.Buf
	link bool // it went through the bottleneck link's queue
}

// delayQueue is a min-heap of delayed packets by due time, then arrival:
// a constant delay reorders nothing.
type delayQueue []delayed

func (q delayQueue) Len() int { return len(q) }
func (q delayQueue) Less(i, j int) bool {
	if !q[i].due.Equal(q[j].due) {
		return q[i].due.Before(q[j].due)
	}
	return q[i].seq < q[j].seq
}
func (q delayQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *delayQueue) Push(x any)   { *q = append(*q, x.(delayed)) }
func (q *delayQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	old[len(old)-1] = delayed{}
	*q = old[:len(old)-1]
	return e
}
