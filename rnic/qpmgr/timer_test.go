package qpmgr

import (
	"testing"
	"time"
)

// TestRetryTimeoutBackoff checks the retransmission timer's length: the
// local ACK timeout (4.096 us * 2^timeout) doubled per timeout in a row, at
// most MaxBackoff times, and 0 (no timer) for timeout 0.
func TestRetryTimeoutBackoff(t *testing.T) {
	qp := &QP{}
	qp.Attr.Timeout = 14
	base := 4096 * time.Nanosecond << 14 // 67.1 ms
	for backoff, want := range []time.Duration{base, 2 * base, 4 * base, 8 * base, 8 * base, 8 * base} {
		qp.Backoff = uint8(backoff)
		if got := qp.RetryTimeout(); got != want {
			t.Errorf("backoff %d: RetryTimeout %v, want %v", backoff, got, want)
		}
	}
	qp.Backoff = 255
	if got := qp.RetryTimeout(); got != 8*base {
		t.Errorf("backoff 255: RetryTimeout %v, want %v", got, 8*base)
	}
	qp.Attr.Timeout = 0
	if got := qp.RetryTimeout(); got != 0 {
		t.Errorf("timeout 0: RetryTimeout %v, want 0", got)
	}
}

// TestTimerStaleExpiry checks that an expiry of a timer stopped too late
// is not taken for the expiry of the timer armed since. stopTimer's
// time.Timer.Stop returns false once onTimer has started, and that
// onTimer may set TimerFired after stopTimer cleared it and the timer
// was armed again: at load 17 on 2 cores such a goroutine ran more than
// 20 ms late. The test plays that onTimer itself, deterministically.
func TestTimerStaleExpiry(t *testing.T) {
	kicks := make(chan struct{}, 16)
	qp := &QP{kick: func(*QP) { kicks <- struct{}{} }}
	qp.Attr.Timeout = 12 // 16.8 ms
	qp.SQ.ring = make([]SendWQE, 1)
	qp.SQ.At(0).State = WQESent
	qp.SQ.Next, qp.SQ.Tail = 1, 1

	qp.Lock()
	qp.ArmTimer()
	qp.RestartTimer() // progress: stopped and armed again
	qp.Unlock()
	qp.onTimer() // the first arm's onTimer, started before the stop
	<-kicks
	qp.Lock()
	if qp.TimerExpired() {
		t.Fatalf("a stale expiry was taken for the armed timer's, %v before it is due: %s",
			time.Until(qp.timerAt), qp.TimerString())
	}
	if !qp.timerArmed {
		t.Fatalf("the stale expiry disarmed the timer: %s", qp.TimerString())
	}
	qp.Unlock()

	// The armed timer's own expiry still comes, and is taken.
	select {
	case <-kicks:
	case <-time.After(10 * time.Second):
		t.Fatal("the armed timer never fired")
	}
	qp.Lock()
	defer qp.Unlock()
	if !qp.TimerExpired() {
		t.Fatalf("the armed timer's expiry was not taken: %s", qp.TimerString())
	}
	if qp.timerArmed {
		t.Fatalf("the timer is still armed after its expiry: %s", qp.TimerString())
	}
	qp.stopTimer()
}
