// Package kwait waits for a descriptor the way a C program does: blocked
// in poll(2), on the thread that asked, rather than in the Go runtime's
// poller.
//
// Why: when a descriptor in the runtime's poller becomes ready, the
// poller's thread wakes, hands the waiting goroutine to a thread of its
// own and, if the process was idle, wakes the runtime's monitor too: two
// or three thread wake-ups where a C program has one. On the benchmark VM
// a wake-up costs about what a packet's whole trip through the kernel does
// (a pipe ping-pong between two Go processes: 15 us one way through the
// poller, 7 us blocked in read), and a message from one application to
// another through two rnicd crosses three waits: the doorbell, the packet,
// the completion (BENCHMARKS.md).
//
// A descriptor waited on here must not be in the runtime's poller too,
// or its events wake the poller's thread all the same. The waiting thread
// keeps its P, the runtime's licence to run Go code, as in any blocking
// system call, so a process that waits here runs with at least two Ps
// (AtLeastTwo).
package kwait

import (
	"encoding/binary"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// Wait blocks until fd has one of events or stop (if not -1) is readable;
// a signal may end it early. It first lets run the goroutines the caller
// made runnable: they wait in this thread's run queue, which nobody takes
// while the thread sleeps in poll(2).
func Wait(fd int, events int16, stop int) error {
	runtime.Gosched()
	set := [2]unix.PollFd{{Fd: int32(fd), Events: events}, {Fd: int32(stop), Events: unix.POLLIN}}
	if _, err := unix.Poll(set[:], -1); err != nil && err != unix.EINTR {
		return os.NewSyscallError("poll", err)
	}
	return nil
}

// Signal adds one to the counter of eventfd fd, waking whoever waits on it.
func Signal(fd int) {
	var one [8]byte
	binary.NativeEndian.PutUint64(one[:], 1)
	unix.Write(fd, one[:])
}

// AtLeastTwo raises GOMAXPROCS to 2 unless the GOMAXPROCS environment
// variable sets it, and returns the value in force: with one P (a one-CPU
// machine or affinity mask) every other goroutine would wait for a
// Readable to end.
func AtLeastTwo() int {
	n := runtime.GOMAXPROCS(0)
	if n < 2 && os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(2)
		n = 2
	}
	return n
}
