package flowctl

import "fmt"

// DCQCN is the reaction point of DCQCN (Zhu et al., SIGCOMM 2015) as
// NVIDIA's RNICs run it: alpha in 10-bit fixed point updated on its own
// timer, rate cuts at most once per monitor period, and rate increases
// driven by a timer and a byte counter, with mlx5's clamp options
// (../shared/flowctl.md has the rules and where they come from). Rules,
// step by step, with the mlx5 parameter that drives each:
//
//  1. A QP's first CNP starts its reaction point: alpha =
//     rp_initial_alpha_value, the current rate RC = the max rate (or
//     rp_rate_to_set_on_first_cnp), the target RT = the max rate, and the
//     alpha and decrease timers start; the first cut is at once.
//  2. Every rp_dce_tcp_rtt: alpha = alpha*G/1024 + (1024-G) if a CNP came
//     since the last update (capped at 1023), else alpha*G/1024 (G =
//     rp_dce_tcp_g).
//  3. Every rp_rate_reduce_monitor_period, if a CNP came: RT = RC when
//     rp_clamp_tgt_rate, or the byte stage > 0, or rp_clamp_tgt_rate_ati
//     and the timer stage > 0; RC -= min(RC*alpha >> rp_gd,
//     RC*(100-rp_min_dec_fac)/100); RC = max(RC, rp_min_rate); both
//     stages and the byte count reset and the increase timer restarts.
//  4. Every rp_time_reset the timer stage T counts, every rp_byte_reset
//     bytes sent the byte stage BC counts; on each count: hyper increase
//     (RT += rp_hai_rate) if min(T, BC) > rp_threshold, else additive
//     (RT += rp_ai_rate) if max(T, BC) >= rp_threshold, else fast recovery
//     (RT unchanged); then RT = min(RT, max rate), RC = (RC+RT)/2.
//
// One departure from the hardware, for software: a reaction point that
// is told when the pacer holds its QP back (Held, as the Manager tells
// it) counts a timer increase event only if the pacer held the QP in the
// period that event ends; otherwise the event passes and the stage does
// not count. A ConnectX QP always sends at its current rate while it has
// work; a software QP may not (its daemon is descheduled, its window or
// its CPU limits it), and its rate would climb on the timer with no
// congestion signal possible, to be released all at once when the host
// frees up. TestFairness saw exactly that: four QPs at 100 Mb/s each,
// four times their share, while the host let them send 25, then a queue
// of 512 KB overflowing in 20 ms. TCP validates its window the same way
// (RFC 7661). A reaction point never told of a hold (the unit tests of
// the formulas) runs its timers as the hardware does.
//
// Timers run lazily: the reaction point works through the timer events
// due up to the time it is asked (Rate, Sent, CNP), in time order, so a
// QP that does not send costs nothing and the results are those of free-
// running hardware timers. When RC is back at the max rate the QP is no
// longer limited (mlx5: "once this limit is reached, RP is no longer rate
// limited") and its reaction point is idle until its next CNP, which is
// then a first CNP again.
type DCQCN struct {
	cfg dcqcnConfig
}

// dcqcnConfig is Params in the units the reaction point works in:
// nanoseconds, bits per second, bytes.
type dcqcnConfig struct {
	alphaPeriod, decPeriod, incPeriod int64
	byteReset                         uint64
	threshold                         uint32
	ai, hai, minRate, maxRate         uint64
	firstRate                         uint64
	minDecFac                         uint64
	g, initialAlpha, gd               uint32
	clamp, clampATI                   bool
}

const (
	mbps = 1_000_000
	usec = 1000
)

// NewDCQCN returns DCQCN with parameters p on a port of lineRate bits per
// second (the rate rp_max_rate 0 means).
func NewDCQCN(p Params, lineRate uint64) (*DCQCN, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if lineRate == 0 {
		return nil, fmt.Errorf("flowctl: DCQCN needs the line rate")
	}
	c := dcqcnConfig{
		alphaPeriod: int64(p.RPDCETCPRTT) * usec,
		decPeriod:   int64(p.RPRateReduceMonitorPeriod) * usec,
		incPeriod:   int64(p.RPTimeReset) * usec,
		byteReset:   uint64(p.RPByteReset),
		threshold:   p.RPThreshold,
		ai:          uint64(p.RPAIRate) * mbps,
		hai:         uint64(p.RPHAIRate) * mbps,
		minRate:     uint64(p.RPMinRate) * mbps,
		maxRate:     lineRate,
		firstRate:   uint64(p.RPRateToSetOnFirstCNP) * mbps,
		minDecFac:   uint64(p.RPMinDecFac),
		g:           p.RPDCETCPG, initialAlpha: p.RPInitialAlphaValue, gd: p.RPGD,
		clamp: p.RPClampTgtRate != 0, clampATI: p.RPClampTgtRateATI != 0,
	}
	if p.RPMaxRate != 0 {
		c.maxRate = min(uint64(p.RPMaxRate)*mbps, lineRate)
	}
	c.minRate = min(c.minRate, c.maxRate)
	if c.firstRate != 0 {
		c.firstRate = max(min(c.firstRate, c.maxRate), c.minRate)
	}
	return &DCQCN{cfg: c}, nil
}

// Name returns "dcqcn".
func (d *DCQCN) Name() string { return "dcqcn" }

// NewReactionPoint returns an idle DCQCN reaction point.
func (d *DCQCN) NewReactionPoint(emit func(Event)) ReactionPoint {
	return &dcqcnRP{cfg: &d.cfg, emit: emit}
}

// dcqcnRP is one QP's DCQCN state.
type dcqcnRP struct {
	cfg  *dcqcnConfig
	emit func(Event)

	active   bool   // limited: between a first CNP and the return to the max rate
	rc, rt   uint64 // current and target rate
	alpha    uint32
	alphaCNP bool  // a CNP came since the last alpha update
	decCNP   bool  // a CNP came since the last decrease tick
	tAlpha   int64 // next alpha update
	tDec     int64 // next decrease tick (matters only with decCNP)
	tInc     int64 // next timer increase event
	stageT   uint32
	stageBC  uint32
	bytes    uint64 // sent since the last byte-counter event
	held     bool   // Held was ever called: timer increases need a hold
	lastHold int64  // the last Held
}

func (r *dcqcnRP) event(t int64, k EventKind) {
	if r.emit != nil {
		r.emit(Event{Time: t, Kind: k, Current: r.rc, Target: r.rt, Alpha: r.alpha})
	}
}

func (r *dcqcnRP) CNP(now int64) {
	c := r.cfg
	if !r.active {
		r.active = true
		r.alpha, r.alphaCNP = c.initialAlpha, false
		r.rc, r.rt = c.maxRate, c.maxRate
		if c.firstRate != 0 {
			r.rc = c.firstRate
		}
		r.stageT, r.stageBC, r.bytes = 0, 0, 0
		r.tAlpha = now + c.alphaPeriod
		r.tDec = now
		r.tInc = now + c.incPeriod
		r.decCNP = true
		r.event(now, EventCNP)
		r.advance(now)
		return
	}
	r.advance(now)
	if !r.active {
		r.CNP(now)
		return
	}
	r.alphaCNP, r.decCNP = true, true
	// The decrease timer runs on its own grid; ticks without a CNP were
	// skipped, so find the first one after now.
	if r.tDec <= now {
		r.tDec += ((now-r.tDec)/c.decPeriod + 1) * c.decPeriod
	}
	r.event(now, EventCNP)
}

// Held tells r that the pacer held its QP back at now.
func (r *dcqcnRP) Held(now int64) {
	r.held, r.lastHold = true, now
}

func (r *dcqcnRP) Sent(now int64, n int) {
	c := r.cfg
	if !r.active || n <= 0 {
		return
	}
	r.advance(now)
	if !r.active || c.byteReset == 0 {
		return
	}
	r.bytes += uint64(n)
	for r.bytes >= c.byteReset && r.active {
		r.bytes -= c.byteReset
		r.stageBC++
		r.increase(now)
	}
}

func (r *dcqcnRP) Rate(now int64) (uint64, bool) {
	if !r.active {
		return r.cfg.maxRate, false
	}
	r.advance(now)
	return r.rc, r.active
}

func (r *dcqcnRP) State() (current, target uint64, alpha uint32) {
	if !r.active {
		return r.cfg.maxRate, r.cfg.maxRate, r.alpha
	}
	return r.rc, r.rt, r.alpha
}

// advance runs the timer events due by now, earliest first; at equal
// times alpha first (a cut uses the alpha of its instant), then the cut,
// then the increase.
func (r *dcqcnRP) advance(now int64) {
	c := r.cfg
	for r.active {
		switch {
		case r.tAlpha <= now && (!r.decCNP || r.tAlpha <= r.tDec) && r.tAlpha <= r.tInc:
			if r.alpha == 0 && !r.alphaCNP {
				// Nothing to decay until the next CNP: skip to
				// the first tick after now.
				r.tAlpha += ((now-r.tAlpha)/c.alphaPeriod + 1) * c.alphaPeriod
				continue
			}
			a := r.alpha * c.g / 1024
			if r.alphaCNP {
				a = min(a+1024-c.g, 1023)
			}
			r.alpha, r.alphaCNP = a, false
			r.tAlpha += c.alphaPeriod
		case r.decCNP && r.tDec <= now && r.tDec <= r.tInc:
			r.decrease(r.tDec)
		case r.tInc <= now:
			t := r.tInc
			r.tInc += c.incPeriod
			if r.held && r.lastHold <= t-c.incPeriod {
				continue // not rate-limited in this period: no stage
			}
			r.stageT++
			r.increase(t)
		default:
			return
		}
	}
}

// decrease is rule 3, at time t.
func (r *dcqcnRP) decrease(t int64) {
	c := r.cfg
	r.decCNP = false
	if c.clamp || r.stageBC > 0 || (c.clampATI && r.stageT > 0) {
		r.rt = r.rc
	}
	cut := min(r.rc*uint64(r.alpha)>>c.gd, r.rc*(100-c.minDecFac)/100)
	r.rc = max(r.rc-cut, c.minRate)
	r.stageT, r.stageBC, r.bytes = 0, 0, 0
	r.tDec = t + c.decPeriod
	r.tInc = t + c.incPeriod
	r.event(t, EventDecrease)
}

// increase is rule 4, at time t, after a stage counted.
func (r *dcqcnRP) increase(t int64) {
	c := r.cfg
	bc := r.stageBC
	if c.byteReset == 0 {
		bc = r.stageT // no byte counter: the timer stage alone decides
	}
	kind := EventFastRecovery
	switch {
	case min(r.stageT, bc) > c.threshold:
		r.rt += c.hai
		kind = EventHyper
	case max(r.stageT, bc) >= c.threshold:
		r.rt += c.ai
		kind = EventAdditive
	}
	r.rt = min(r.rt, c.maxRate)
	// Rounded up: RT >= RC always, and RC must reach RT, not stop a bit
	// short of it.
	r.rc = (r.rc + r.rt + 1) / 2
	r.event(t, kind)
	if r.rc >= c.maxRate {
		r.rc, r.active = c.maxRate, false
		r.event(t, EventRecovered)
	}
}
