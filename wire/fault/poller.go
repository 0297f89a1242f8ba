package fault

import (
	"fmt"
	"net"
	"time"

	"github.com/rnicd/rnicd/wire/ibudp"
)

// Poller is an Injector over an ibudp.Poller that is an ibudp.Poller
// itself, for a NIC that polls its port (the daemon's polling engine,
// rnic's engine.go), so that injected faults apply to what it polls.
//
// Until receive impairments are first set, TryRecv, WaitRecv and Pending
// are the port's own, at the cost of one atomic load. After, they go
// through the injector: while it impairs, its goroutine reads the port
// and they take what it lets through; once it passes packets through
// again, they read the port themselves. Only one goroutine at a time may
// call TryRecv (the NIC's receive lock orders them).
type Poller struct {
	*Injector
	p ibudp.Poller
}

// NewPoller wraps p, as New does.
func NewPoller(p ibudp.Poller, seed int64) *Poller {
	return &Poller{Injector: New(p, seed), p: p}
}

// TryRecv returns the packets waiting, impaired, without blocking.
func (f *Poller) TryRecv(bufs []*ibudp.Buf) (int, error) {
	if !f.rxSet.Load() {
		n, err := f.p.TryRecv(bufs)
		f.rxPassed.Add(uint64(n))
		return n, err
	}
	if len(bufs) == 0 {
		return 0, nil
	}
	if err := ibudp.CheckRecvBufs(bufs); err != nil {
		return 0, err
	}
	f.mu.Lock()
	switch {
	case len(f.rxRdy) > 0:
		n := f.takeReady(bufs)
		f.mu.Unlock()
		return n, nil
	case f.closed:
		f.mu.Unlock()
		return 0, fmt.Errorf("fault: recv: %w", net.ErrClosed)
	case f.rxErr != nil:
		err := f.rxErr
		f.mu.Unlock()
		return 0, err
	case f.busy(dirRX) && !f.rxLooping:
		f.rxLooping = true
		f.wg.Add(1)
		go f.rxLoop()
		f.mu.Unlock()
		return 0, nil
	case f.rxLooping:
		f.mu.Unlock()
		return 0, nil
	}
	if !f.dir[dirRX].f.impairs() {
		f.rxSet.Store(false) // a pass-through again: back to the fast path
	}
	f.mu.Unlock()
	n, err := f.p.TryRecv(bufs)
	if n == 0 || err != nil {
		return n, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.busy(dirRX) {
		f.dir[dirRX].counts.Packets += uint64(n)
		return n, nil
	}
	// Impairments were set while the port was read: these packets go
	// through them.
	now := time.Now()
	for _, b := range bufs[:n] {
		c := f.pool.Get()
		c.CopyFrom(b)
		f.impair(dirRX, c, now, nil)
	}
	return f.takeReady(bufs), nil
}

// WaitRecv blocks until a packet may be waiting.
func (f *Poller) WaitRecv() error {
	if !f.rxSet.Load() {
		return f.p.WaitRecv()
	}
	f.mu.Lock()
	for len(f.rxRdy) == 0 && f.rxLooping && !f.closed && f.rxErr == nil {
		f.rxCond.Wait()
	}
	closed, looping, ready := f.closed, f.rxLooping, len(f.rxRdy) > 0
	f.mu.Unlock()
	switch {
	case closed:
		return fmt.Errorf("fault: recv: %w", net.ErrClosed)
	case ready || looping:
		return nil
	}
	// Not impairing, or not yet: the next TryRecv starts the loop or
	// reads the port, so wait for the port only if it passes through.
	f.mu.Lock()
	busy := f.busy(dirRX)
	f.mu.Unlock()
	if busy {
		return nil
	}
	return f.p.WaitRecv()
}

// Pending reports whether packets wait that WaitRecv would not see.
func (f *Poller) Pending() bool {
	if !f.rxSet.Load() {
		return f.p.Pending()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.rxRdy) > 0 || !f.rxLooping && f.p.Pending()
}
