package flowctl

import (
	"fmt"
	"strconv"
	"strings"
)

// Params are the congestion-control parameters of a device, named and
// defaulted as mlx5 names them (Linux drivers/infiniband/hw/mlx5/cong.c,
// debugfs cc_params; the mlxconfig name in each comment), so that a value
// tuned on a ConnectX card carries over. DefaultParams returns mlx5's
// defaults; the zero Params is not usable (Validate refuses it).
type Params struct {
	// Reaction point (the sender).

	RPClampTgtRate            uint32 // rp_clamp_tgt_rate (CLAMP_TGT_RATE): 1: every cut sets the target rate to the current one
	RPClampTgtRateATI         uint32 // rp_clamp_tgt_rate_ati (CLAMP_TGT_RATE_AFTER_TIME_INC): 1: so does a cut after a timer increase
	RPTimeReset               uint32 // rp_time_reset (RPG_TIME_RESET): microseconds between timer increase events
	RPByteReset               uint32 // rp_byte_reset (RPG_BYTE_RESET): bytes sent between byte-counter increase events; 0: off
	RPThreshold               uint32 // rp_threshold (RPG_THRESHOLD): stage count at which fast recovery ends
	RPAIRate                  uint32 // rp_ai_rate (RPG_AI_RATE): Mb/s added to the target rate by an additive increase
	RPMaxRate                 uint32 // rp_max_rate (RPG_MAX_RATE): Mb/s; 0: the line rate
	RPHAIRate                 uint32 // rp_hai_rate (RPG_HAI_RATE): Mb/s added by a hyper increase
	RPMinDecFac               uint32 // rp_min_dec_fac (RPG_MIN_DEC_FAC): percent; one cut leaves at least this share of the rate
	RPMinRate                 uint32 // rp_min_rate (RPG_MIN_RATE): Mb/s, the floor of the current rate
	RPRateToSetOnFirstCNP     uint32 // rp_rate_to_set_on_first_cnp (RATE_TO_SET_ON_FIRST_CNP): Mb/s; 0: keep the rate
	RPDCETCPG                 uint32 // rp_dce_tcp_g (DCE_TCP_G): alpha's gain, in 1024ths: g = (1024-G)/1024
	RPDCETCPRTT               uint32 // rp_dce_tcp_rtt (DCE_TCP_RTT): microseconds between alpha updates
	RPRateReduceMonitorPeriod uint32 // rp_rate_reduce_monitor_period (RATE_REDUCE_MONITOR_PERIOD): microseconds between cuts
	RPInitialAlphaValue       uint32 // rp_initial_alpha_value (INITIAL_ALPHA_VALUE): alpha on a QP's first CNP, in 1024ths
	RPGD                      uint32 // rp_gd (RPG_GD): a cut is RC*alpha/2^GD (alpha in 1024ths, so 11 halves at alpha 1)

	// Notification point (the receiver).

	NPMinTimeBetweenCNPs uint32 // np_min_time_between_cnps: microseconds; at most one CNP per QP per interval
	NPCNPDSCP            uint32 // np_cnp_dscp (CNP_DSCP): the DSCP of the CNPs sent
	NPCNPPrioMode        uint32 // np_cnp_prio_mode: 1: np_cnp_prio is the CNP's 802.1p priority (no VLANs here: shown only)
	NPCNPPrio            uint32 // np_cnp_prio (CNP_802P_PRIO): the CNP's 802.1p priority (shown only)
}

// DefaultParams returns mlx5's defaults (mlxconfig's, as ../shared/flowctl.md
// lists them; np_min_time_between_cnps 0 as the kernel patch that added it
// documents). The paper's own values differ (CNP interval 50 us, increase
// timer 55 us, g 1/256, byte counter 10 MB, F 5 fast-recovery steps);
// set those by name to reproduce its figures.
func DefaultParams() Params {
	return Params{
		RPClampTgtRate:            0,
		RPClampTgtRateATI:         1,
		RPTimeReset:               300,
		RPByteReset:               32767,
		RPThreshold:               1,
		RPAIRate:                  5,
		RPMaxRate:                 0,
		RPHAIRate:                 50,
		RPMinDecFac:               50,
		RPMinRate:                 1,
		RPRateToSetOnFirstCNP:     0,
		RPDCETCPG:                 1019,
		RPDCETCPRTT:               1,
		RPRateReduceMonitorPeriod: 4,
		RPInitialAlphaValue:       1023,
		RPGD:                      11,
		NPMinTimeBetweenCNPs:      0,
		NPCNPDSCP:                 48,
		NPCNPPrioMode:             1,
		NPCNPPrio:                 6,
	}
}

// param is one row of the parameter table: its mlx5 name, where it lives
// and the values it may take.
type param struct {
	name     string
	field    func(*Params) *uint32
	min, max uint32
}

// The bounds are the fields' own (a percentage, a 10-bit alpha, a 6-bit
// DSCP, a 3-bit priority, a shift) and, for periods, at least 1 us: a zero
// period would be a timer that fires forever.
var params = [...]param{
	{"rp_clamp_tgt_rate", func(p *Params) *uint32 { return &p.RPClampTgtRate }, 0, 1},
	{"rp_clamp_tgt_rate_ati", func(p *Params) *uint32 { return &p.RPClampTgtRateATI }, 0, 1},
	{"rp_time_reset", func(p *Params) *uint32 { return &p.RPTimeReset }, 1, 1 << 24},
	{"rp_byte_reset", func(p *Params) *uint32 { return &p.RPByteReset }, 0, 1 << 30},
	{"rp_threshold", func(p *Params) *uint32 { return &p.RPThreshold }, 0, 1 << 16},
	{"rp_ai_rate", func(p *Params) *uint32 { return &p.RPAIRate }, 0, 1 << 20},
	{"rp_max_rate", func(p *Params) *uint32 { return &p.RPMaxRate }, 0, 1 << 20},
	{"rp_hai_rate", func(p *Params) *uint32 { return &p.RPHAIRate }, 0, 1 << 20},
	{"rp_min_dec_fac", func(p *Params) *uint32 { return &p.RPMinDecFac }, 1, 100},
	{"rp_min_rate", func(p *Params) *uint32 { return &p.RPMinRate }, 1, 1 << 20},
	{"rp_rate_to_set_on_first_cnp", func(p *Params) *uint32 { return &p.RPRateToSetOnFirstCNP }, 0, 1 << 20},
	{"rp_dce_tcp_g", func(p *Params) *uint32 { return &p.RPDCETCPG }, 0, 1023},
	{"rp_dce_tcp_rtt", func(p *Params) *uint32 { return &p.RPDCETCPRTT }, 1, 1 << 24},
	{"rp_rate_reduce_monitor_period", func(p *Params) *uint32 { return &p.RPRateReduceMonitorPeriod }, 1, 1 << 24},
	{"rp_initial_alpha_value", func(p *Params) *uint32 { return &p.RPInitialAlphaValue }, 0, 1023},
	{"rp_gd", func(p *Params) *uint32 { return &p.RPGD }, 0, 20},
	{"np_min_time_between_cnps", func(p *Params) *uint32 { return &p.NPMinTimeBetweenCNPs }, 0, 1 << 24},
	{"np_cnp_dscp", func(p *Params) *uint32 { return &p.NPCNPDSCP }, 0, 63},
	{"np_cnp_prio_mode", func(p *Params) *uint32 { return &p.NPCNPPrioMode }, 0, 1},
	{"np_cnp_prio", func(p *Params) *uint32 { return &p.NPCNPPrio }, 0, 7},
}

func lookup(name string) *param {
	for i := range params {
		if params[i].name == name {
			return &params[i]
		}
	}
	return nil
}

// Set sets the parameter with mlx5 name name to value, a decimal number.
func (p *Params) Set(name, value string) error {
	d := lookup(name)
	if d == nil {
		return fmt.Errorf("flowctl: no parameter %q (rnicd -cc-params help lists them)", name)
	}
	v, err := strconv.ParseUint(strings.TrimSpace(value), 10, 32)
	if err != nil {
		return fmt.Errorf("flowctl: %s: %q is not a number", name, value)
	}
	if uint32(v) < d.min || uint32(v) > d.max {
		return fmt.Errorf("flowctl: %s %d is out of range [%d, %d]", name, v, d.min, d.max)
	}
	*d.field(p) = uint32(v)
	return nil
}

// Get returns the parameter with mlx5 name name.
func (p *Params) Get(name string) (uint32, bool) {
	d := lookup(name)
	if d == nil {
		return 0, false
	}
	return *d.field(p), true
}

// Range returns the least and the most the parameter named name takes.
func Range(name string) (lo, hi uint32, ok bool) {
	d := lookup(name)
	if d == nil {
		return 0, 0, false
	}
	return d.min, d.max, true
}

// Each calls f with every parameter's mlx5 name and value, in mlx5's order.
func (p *Params) Each(f func(name string, v uint32)) {
	for i := range params {
		f(params[i].name, *params[i].field(p))
	}
}

// Validate checks every parameter against its range.
func (p *Params) Validate() error {
	for i := range params {
		d := &params[i]
		if v := *d.field(p); v < d.min || v > d.max {
			return fmt.Errorf("flowctl: %s %d is out of range [%d, %d]", d.name, v, d.min, d.max)
		}
	}
	return nil
}

// SetList applies a list of name=value settings separated by commas or
// white space, as rnicd's -cc-param flag and a config file give them; a
// # starts a comment that runs to the end of its line. Settings before
// a bad one stay applied.
func (p *Params) SetList(s string) error {
	var b strings.Builder
	for _, line := range strings.Split(s, "\n") {
		line, _, _ = strings.Cut(line, "#")
		// A config file may write "name = value".
		for strings.Contains(line, " =") || strings.Contains(line, "= ") || strings.Contains(line, "\t=") || strings.Contains(line, "=\t") {
			line = strings.NewReplacer(" =", "=", "= ", "=", "\t=", "=", "=\t", "=").Replace(line)
		}
		b.WriteString(line)
		b.WriteByte('\n')
	}
	for _, kv := range strings.FieldsFunc(b.String(), func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '\t' }) {
		name, value, ok := strings.Cut(kv, "=")
		if !ok {
			return fmt.Errorf("flowctl: %q is not name=value", kv)
		}
		if err := p.Set(strings.TrimSpace(name), value); err != nil {
			return err
		}
	}
	return nil
}
