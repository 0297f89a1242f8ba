// Package spin decides how often a thread that polls shared memory (the
// polling engine over its rings and socket, an application over its CQ)
// gives its core away with sched_yield.
//
// Why it adapts: a poller that yields at every empty poll lets the thread
// it waits for run where cores are fewer than spinning threads (two
// daemons and two tools on the 2-core CI kind of machine, where yielding
// at one empty poll in 16 instead of every one took ib_send_lat from 48
// to 110 us). Where every spinning thread has a core, the same yield finds
// no one to give the core to and is pure cost: on a quiet 16-core machine
// (2026-11-28) sched_yield was the client's largest cost in its poll loop
// (__schedule 10.6% of all samples of a 2-byte ping-pong) and 5% of
// the engine's time, each poll that much later to see its work.
//
// A yield helps only threads waiting on the yielder's own CPU, and the
// kernel counts exactly that: a switch away from a thread that was still
// runnable (a yield that found someone, or a preemption) is an involuntary
// context switch of that thread. So a Yielder yields at every empty poll
// while its thread's involuntary switches grow, and, each time a check
// finds them still, yields half as often, down to one empty poll in
// MaxEvery; the first switch after that brings it back to every poll.
package spin

import "sync/atomic"

const (
	// CheckEvery is how many empty polls pass between two looks at the
	// thread's involuntary context switches (getrusage, about a yield's
	// cost).
	CheckEvery = 32
	// MaxEvery is the fewest yields: one empty poll in MaxEvery. A
	// thread that comes to wait on the poller's CPU waits at most that
	// many empty polls (a few tens of microseconds) for its first turn.
	MaxEvery = 32
)

// Yielder says at which empty polls to yield. Its zero value yields at
// every empty poll until a check finds the core unshared. It is safe
// for concurrent use (a CQ polled from several goroutines); concurrent
// polls from different threads read different threads' counters, which
// only makes it yield more.
type Yielder struct {
	polls  atomic.Uint32 // empty polls since the last check
	every  atomic.Uint32 // yield at one empty poll in every (0: 1)
	nivcsw atomic.Int64  // the thread's involuntary switches at the last check

	// switches, if set, stands in for the thread's counter (tests).
	switches func() (int64, bool)
}

// Due counts an empty poll and reports whether to yield at it.
func (y *Yielder) Due() bool {
	n := y.polls.Add(1)
	if n%CheckEvery == 0 {
		y.check()
	}
	e := y.every.Load()
	return e <= 1 || n%e == 0
}

// check compares the thread's involuntary switches with the last check's.
func (y *Yielder) check() {
	read := involuntarySwitches
	if y.switches != nil {
		read = y.switches
	}
	cur, ok := read()
	if !ok {
		y.every.Store(1)
		return
	}
	if y.nivcsw.Swap(cur) != cur {
		y.every.Store(1)
		return
	}
	e := y.every.Load()
	y.every.Store(min(max(2*e, 2), MaxEvery))
}

// Every reports how often the Yielder yields now: at one empty poll in
// Every (for tests).
func (y *Yielder) Every() uint32 { return max(y.every.Load(), 1) }
