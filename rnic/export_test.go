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
