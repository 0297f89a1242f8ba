package rnic

import "time"

// Hooks for the external tests of this package.

// LossSpin is how long the polling engine stays awake after a loss.
const LossSpin = lossSpin

// LossSeen tells the engine of QPN key that a loss was seen by a QP
// with round trip rtt, as the RX handler does when a QP NAKs a gap or
// goes back.
func (d *Device) LossSeen(key uint32, rtt time.Duration) {
	d.pipes.queues[d.pipes.engineOf(key)].lossSeen(rtt)
}

// Recovering reports whether the engine of QPN key polls on after a loss.
func (d *Device) Recovering(key uint32) bool {
	return d.pipes.queues[d.pipes.engineOf(key)].recovering()
}

// HoldSend holds the send side of queue 0 (the send pipeline's lock), as
// a busy send pipeline does; the returned function lets it go.
func (d *Device) HoldSend() func() {
	q := d.pipes.queues[0]
	q.sendMu.Lock()
	return q.sendMu.Unlock
}

// ForgetRunQueue empties queue 0's run list, as if its pipeline had not
// yet seen the doorbells rung since it was last free.
func (d *Device) ForgetRunQueue() {
	q := d.pipes.queues[0]
	q.mu.Lock()
	for _, qp := range q.runq {
		qp.Scheduled.Store(false)
	}
	q.runq = nil
	q.mu.Unlock()
}

// The pipelines' calls that tests make directly, as the host interface's
// rings and the polling engine make them.

// FetchSend is the send doorbell's fetch of qp's send source.
func (d *Device) FetchSend(qp *QP) (failed int, err error) { return d.pipes.fetchSend(qp) }

// Polling reports whether the device runs a polling engine.
func (d *Device) Polling() bool { return d.pipes.polling() }

// Watch makes the engine of key poll h.
func (d *Device) Watch(h HostQueue, key uint32) { d.pipes.watch(h, key) }

// Unwatch stops polling h.
func (d *Device) Unwatch(h HostQueue) { d.pipes.unwatch(h) }

// EngineOf is the engine that owns the QP numbered qpn.
func (d *Device) EngineOf(qpn uint32) int { return d.pipes.engineOf(qpn) }
