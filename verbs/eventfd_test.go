package verbs

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// wakePipe is a wake pipe as the daemon makes one: the wait gets the
// read end, and write is the daemon's write to the other.
func wakePipe(t *testing.T) (e *eventFD, write func()) {
	t.Helper()
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(p[1]) })
	e, err := newEventFD(p[0])
	if err != nil {
		t.Fatal(err)
	}
	return e, func() { unix.Write(p[1], []byte{1, 0, 0, 0, 0, 0, 0, 0}) }
}

// A wait sleeps in poll(2) until the daemon writes the wake pipe.
func TestEventFDWakes(t *testing.T) {
	e, write := wakePipe(t)
	defer e.close()
	done := make(chan error, 1)
	go func() { done <- e.wait(context.Background()) }()
	select {
	case err := <-done:
		t.Fatalf("wait returned %v with nothing written", err)
	case <-time.After(50 * time.Millisecond):
	}
	write()
	if err := <-done; err != nil {
		t.Fatalf("wait: %v", err)
	}
	// The event was taken: the next wait sleeps until its context ends.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := e.wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second wait: %v, want the deadline", err)
	}
}

// Cancelling a wait's context and closing the wait both end a wait
// sleeping in poll(2).
func TestEventFDCancelAndClose(t *testing.T) {
	e, _ := wakePipe(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.wait(ctx) }()
	time.Sleep(20 * time.Millisecond)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) && err != nil {
		t.Fatalf("cancelled wait: %v", err)
	}
	go func() { done <- e.wait(context.Background()) }()
	time.Sleep(20 * time.Millisecond)
	if err := e.close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil && !errors.Is(err, ErrClosed) {
		t.Fatalf("wait on a closed eventfd: %v", err)
	}
	if err := e.wait(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("wait after close: %v, want ErrClosed", err)
	}
	if err := e.close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
}

// An interrupt left over from a cancellation that came too late for its
// wait neither ends the next wait early nor makes it spin: it sleeps
// until its own deadline, and then takes the next event.
func TestEventFDStaleInterrupt(t *testing.T) {
	e, write := wakePipe(t)
	defer e.close()
	e.interrupt()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if err := e.wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait after a stale interrupt: %v, want the deadline", err)
	}
	write()
	if err := e.wait(context.Background()); err != nil {
		t.Fatalf("wait with an event: %v", err)
	}
}

// waitFor, the wait of a Poll whose yields were slow, returns by its
// bound with nothing written, and after a wake leaves the pipe empty,
// so that the next wait sleeps until its own wake; closed, it returns.
// Both ways: the runtime's system calls (an in-process NIC's CQ) and
// raw ones (a daemon's).
func TestEventFDWaitForBoundedAndDrains(t *testing.T) {
	for _, raw := range []bool{false, true} {
		t.Run(fmt.Sprintf("raw=%v", raw), func(t *testing.T) { testWaitForBoundedAndDrains(t, raw) })
	}
}

func testWaitForBoundedAndDrains(t *testing.T, raw bool) {
	e, write := wakePipe(t)
	done := make(chan struct{})
	go func() { e.waitFor(time.Millisecond, raw); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("waitFor(1ms) with nothing written did not return in 5 s")
	}
	for range 3 {
		write()
	}
	e.waitFor(time.Millisecond, raw)
	var b [8]byte
	if n, err := unix.Read(e.fd, b[:]); n > 0 || err != unix.EAGAIN {
		t.Fatalf("after waitFor the pipe still held %d bytes (%v)", n, err)
	}
	// A write ends the wait, long before its bound.
	go func() {
		time.Sleep(20 * time.Millisecond)
		write()
	}()
	t0 := time.Now()
	e.waitFor(10*time.Second, raw)
	if d := time.Since(t0); d > 5*time.Second {
		t.Fatalf("waitFor(10s) took %v with the pipe written after 20 ms", d)
	}
	e.close()
	e.waitFor(time.Hour, raw) // returns at once: the descriptors are gone
}
