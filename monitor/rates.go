package monitor

import (
	"github.com/rnicd/rnicd/rnic/flowctl"
	"github.com/rnicd/rnicd/rnic/trace"
)

// RateStep is one step of a QP's reaction point, from the trace (Module
// ModFlowCtl, Step StepRate): the rate chart draws these, every cut and
// every increase, where a poll of /api/state every 0.5 s would see only
// where the sawtooth happened to be. DCQCN's timer runs every
// rpg_time_reset (300 us on mlx5), so the steps come thousands a second.
type RateStep struct {
	Seq    uint64 `json:"seq"`
	TimeNS int64  `json:"time_ns"`
	NIC    string `json:"nic"`
	QPN    uint32 `json:"qpn"`
	// Rate and Target are in bits per second (the trace keeps Mbit/s);
	// Alpha in 1024ths.
	Rate   uint64 `json:"rate"`
	Target uint64 `json:"target"`
	Alpha  uint32 `json:"alpha"`
	Kind   string `json:"kind"` // flowctl.EventKind's name
}

// keepRates is how many rate steps the monitor keeps for the chart: a
// few seconds of one QP's steps, enough between two polls of the page.
const keepRates = 8192

// rateStep turns a trace event into a RateStep, false if it is not one.
func rateStep(e *trace.Event) (RateStep, bool) {
	if e.Module != trace.ModFlowCtl || e.Step != trace.StepRate {
		return RateStep{}, false
	}
	return RateStep{TimeNS: e.Time, NIC: e.NIC, QPN: e.QPN, Rate: uint64(e.Aux) * 1e6, Target: uint64(e.Len) * 1e6,
		Alpha: uint32(e.WRID), Kind: flowctl.EventKind(e.Arg).String()}, true
}

// recordRates appends steps to the ring, numbering them.
func (m *Monitor) recordRates(rs []RateStep) {
	if len(rs) == 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range rs {
		m.rateSeq++
		r.Seq = m.rateSeq
		m.rates = append(m.rates, r)
	}
	if extra := len(m.rates) - keepRates; extra > 0 {
		m.rates = append(m.rates[:0], m.rates[extra:]...)
	}
}
