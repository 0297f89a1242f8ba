package steer

import "testing"

// QueueOf is the low byte of the QPN modulo the queues, as the program
// computes it in the kernel; one queue, or none, is queue 0.
func TestQueueOf(t *testing.T) {
	for _, c := range []struct {
		qpn    uint32
		queues int
		want   int
	}{
		{0x11, 0, 0}, {0x11, 1, 0}, {0x11, 2, 1}, {0x12, 2, 0},
		{0x1ff, 3, 0xff % 3}, {0xabc123, 4, 0x23 % 4}, {0x100, MaxQueues, 0}, {0xff, MaxQueues, 0xff},
	} {
		if got := QueueOf(c.qpn, c.queues); got != c.want {
			t.Errorf("QueueOf(%#x, %d) = %d, want %d", c.qpn, c.queues, got, c.want)
		}
	}
}
