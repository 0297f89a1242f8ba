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
