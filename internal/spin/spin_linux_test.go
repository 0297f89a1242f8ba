package spin

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestYieldToASpinnerIsInvoluntary checks what the Yielder rests on: on a
// CPU shared with a spinning thread, a thread that yields is switched away
// while runnable, which the kernel counts as its involuntary switch.
func TestYieldToASpinnerIsInvoluntary(t *testing.T) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil || set.Count() == 0 {
		t.Fatalf("sched_getaffinity: %v", err)
	}
	cpu := 0
	for !set.IsSet(cpu) {
		cpu++
	}
	pin := func() {
		runtime.LockOSThread()
		var one unix.CPUSet
		one.Set(cpu)
		if err := unix.SchedSetaffinity(0, &one); err != nil {
			t.Errorf("sched_setaffinity: %v", err)
		}
	}
	var stop atomic.Bool
	spinning := make(chan struct{})
	go func() {
		pin() // never unlocked: the pinned thread ends with the goroutine
		close(spinning)
		for !stop.Load() {
		}
	}()
	defer stop.Store(true)
	<-spinning

	pin() // the test's goroutine ends, and its pinned thread with it
	before, ok := involuntarySwitches()
	if !ok {
		t.Fatal("getrusage(RUSAGE_THREAD) failed")
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
		if now, _ := involuntarySwitches(); now > before {
			return
		}
	}
	t.Fatalf("yielding to a spinner on CPU %d for 10 s: no involuntary switch counted", cpu)
}
