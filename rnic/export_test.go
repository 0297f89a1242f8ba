package rnic

import "time"

// Hooks for the external tests of this package.

// LossSpin is how long the polling engine stays awake after a loss.
const LossSpin = lossSpin

// LossSeen tells the engine of QPN key that a loss was seen by a QP
// with round trip rtt, as the RX handler does when a QP NAKs a gap or
// goes back.
func (d *Device) LossSeen(key uint32, rtt time.Duration) { d.queues[d.EngineOf(key)].lossSeen(rtt) }

// Recovering reports whether the engine of QPN key polls on after a loss.
func (d *Device) Recovering(key uint32) bool { return d.queues[d.EngineOf(key)].recovering() }

// HoldSend holds the send side of queue 0 (the send pipeline's lock), as
// a busy send pipeline does; the returned function lets it go.
func (d *Device) HoldSend() func() {
	d.queues[0].sendMu.Lock()
	return d.queues[0].sendMu.Unlock
}

// ForgetRunQueue empties queue 0's run list, as if its pipeline had not
// yet seen the doorbells rung since it was last free.
func (d *Device) ForgetRunQueue() {
	q := d.queues[0]
	q.mu.Lock()
	for _, qp := range q.runq {
		qp.Scheduled.Store(false)
	}
	q.runq = nil
	q.mu.Unlock()
}
