package verbs

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rnicd/rnicd/internal/kwait"
)

// eventFD is the read end of a pipe the daemon writes (its wake pipe:
// the daemon keeps the write end, so nothing this process does to the
// descriptor can block the daemon), waited on in poll(2), not through
// the runtime's poller: a poller wait costs this process two or three
// thread wake-ups per event where poll(2) costs one, on the path of
// every completion a latency test waits for (package kwait). intr is an
// eventfd of this process's own that ends a wait early (a cancelled
// context, close).
type eventFD struct {
	fd     int
	intr   int
	mu     sync.RWMutex // held shared while fd is used; close takes it
	closed atomic.Bool
}

// newEventFD waits on fd, the read end of a wake pipe the daemon sent;
// it owns fd from now on, closing it on failure.
func newEventFD(fd int) (*eventFD, error) {
	intr, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("verbs: eventfd: %w", err)
	}
	// The daemon hands the read end non-blocking; a wait sleeps in poll.
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		unix.Close(intr)
		return nil, fmt.Errorf("verbs: wake pipe: %w", err)
	}
	return &eventFD{fd: fd, intr: intr}, nil
}

// add ends a wait; intr must be open.
func (e *eventFD) add() { kwait.Signal(e.intr) }

// interrupt wakes a wait, if the descriptors are still open.
func (e *eventFD) interrupt() {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if !e.closed.Load() {
		e.add()
	}
}

// wait blocks until the daemon writes the pipe or ctx ends; it may
// return early with no error (after a cancellation raced an event).
func (e *eventFD) wait(ctx context.Context) error {
	e.mu.RLock()
	defer e.mu.RUnlock()
	stop := context.AfterFunc(ctx, e.interrupt)
	defer stop()
	var b [64]byte // eight wake-ups at a time: the caller looks at its ring after any
	for woken := false; ; woken = true {
		if e.closed.Load() {
			return ErrClosed
		}
		n, _ := unix.Read(e.fd, b[:])
		if err := ctx.Err(); err != nil {
			// An event taken with the cancellation is no loss:
			// callers look at their ring again.
			return err
		}
		if n > 0 {
			return nil
		}
		if woken {
			// The poll ended with nothing in the pipe: intr ended it
			// (a cancellation that came too late for an earlier wait),
			// drained here so that the next poll sleeps. Not done
			// after every poll: it would cost each wake-up a system
			// call on the path of every completion waited for.
			unix.Read(e.intr, b[:8])
		}
		if err := kwait.Wait(e.fd, unix.POLLIN, e.intr); err != nil {
			return fmt.Errorf("verbs: wait for the wake pipe: %w", err)
		}
	}
}

// waitFor sleeps until the daemon writes the pipe or d has passed, on
// this thread (as kwait.Wait), then empties the pipe, so that the next
// wait sleeps until its own wake. A CQ's Poll calls it, which never
// blocks longer than d. With raw, its system calls are raw ones, which
// the runtime does not see (CQ.Poll says why): the goroutine keeps its P
// for at most d.
func (e *eventFD) waitFor(d time.Duration, raw bool) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.closed.Load() {
		return
	}
	set := [1]unix.PollFd{{Fd: int32(e.fd), Events: unix.POLLIN}}
	ts := unix.NsecToTimespec(int64(d))
	if raw {
		unix.RawSyscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&set[0])), 1, uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
	} else {
		unix.Syscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&set[0])), 1, uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
	}
	var b [64]byte
	for {
		var n uintptr
		var errno unix.Errno
		if raw {
			n, _, errno = unix.RawSyscall(unix.SYS_READ, uintptr(e.fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
		} else {
			n, _, errno = unix.Syscall(unix.SYS_READ, uintptr(e.fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
		}
		if errno != 0 || n == 0 {
			return
		}
	}
}

// close wakes a wait in progress and closes the descriptors once no wait
// uses them.
func (e *eventFD) close() error {
	if e.closed.Swap(true) {
		return nil
	}
	e.add()
	e.mu.Lock()
	defer e.mu.Unlock()
	unix.Close(e.intr)
	return unix.Close(e.fd)
}
