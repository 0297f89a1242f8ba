package rnic

// Hooks for the external tests of this package.

// LossSpin is how long the polling engine stays awake after a loss.
const LossSpin = lossSpin

// LossSeen tells the engine of QPN key that a loss was seen, as the RX
// handler does when a QP NAKs a gap or goes back.
func (d *Device) LossSeen(key uint32) { d.queues[d.EngineOf(key)].lossSeen() }
