package qpmgr

import (
	"sync/atomic"

	"github.com/rnicd/rnicd/ib"
)

// Counters are the device's counters. The zero value is ready to use and
// safe for concurrent use.
type Counters struct{ c [ib.NumCounters]atomic.Uint64 }

// Inc adds one to counter k.
func (s *Counters) Inc(k ib.Counter) { s.c[k].Add(1) }

// Add adds n to counter k.
func (s *Counters) Add(k ib.Counter, n uint64) { s.c[k].Add(n) }

// Get reads counter k.
func (s *Counters) Get(k ib.Counter) uint64 { return s.c[k].Load() }

// Snapshot returns every counter by name.
func (s *Counters) Snapshot() map[string]uint64 {
	m := make(map[string]uint64, ib.NumCounters)
	for k := ib.Counter(0); k < ib.NumCounters; k++ {
		m[k.String()] = s.c[k].Load()
	}
	return m
}
