package rnic

import "github.com/rnicd/rnicd/rnic/dma"

// Memory windows (dma/mw.go says what they are and how they are checked).
type (
	MW     = dma.MW
	MWType = dma.MWType
)

// MaxMW is the device's max_mw: windows share the MR table's key
// indexes, and the daemon's limits (hostif) hold each client to a share.
const MaxMW = 1 << 16

// AllocMW allocates a memory window of pd (ibv_alloc_mw), unbound.
func (d *Device) AllocMW(pd PD, typ MWType) (*MW, error) { return d.dma.AllocMW(pd, typ) }

// DeallocMW frees a memory window (ibv_dealloc_mw), bound or not.
func (d *Device) DeallocMW(mw *MW) error { return d.dma.DeallocMW(mw) }

// MWState returns a window's current rkey and binding.
func (d *Device) MWState(mw *MW) dma.MWState { return d.dma.State(mw) }
