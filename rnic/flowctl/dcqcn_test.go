package flowctl

import (
	"math"
	"testing"
)

const us = int64(usec)

// newRP returns a DCQCN reaction point on a 10 Gb/s port with the default
// parameters changed by set (name=value list), and the events it emits.
func newRP(t *testing.T, set string) (*dcqcnRP, *[]Event) {
	t.Helper()
	p := DefaultParams()
	if err := p.SetList(set); err != nil {
		t.Fatal(err)
	}
	d, err := NewDCQCN(p, 10_000_000_000)
	if err != nil {
		t.Fatal(err)
	}
	var evs []Event
	return d.NewReactionPoint(func(e Event) { evs = append(evs, e) }).(*dcqcnRP), &evs
}

// alphaStep is rule 2 as ../shared/flowctl.md writes it, G = 1019.
func alphaStep(a uint32, cnp bool) uint32 {
	a = a * 1019 / 1024
	if cnp {
		a = min(a+5, 1023)
	}
	return a
}

// Alpha after k updates without a CNP, then after k with one: the
// fixed-point rule step by step, and the real-valued (1-g)^k of the paper
// with g = 5/1024, less at most one for each update's rounding down.
func TestAlpha(t *testing.T) {
	r, _ := newRP(t, "rp_rate_reduce_monitor_period=1000000,rp_time_reset=1000000")
	r.CNP(0)
	if r.alpha != 1023 {
		t.Fatalf("alpha after the first CNP %d, want rp_initial_alpha_value 1023", r.alpha)
	}
	want := uint32(1023)
	for k := 1; k <= 100; k++ {
		r.Rate(int64(k) * us) // the k-th update is due at k us
		want = alphaStep(want, false)
		if r.alpha != want {
			t.Fatalf("after %d updates without a CNP: alpha %d, want %d", k, r.alpha, want)
		}
	}
	if real := 1023 * math.Pow(1019.0/1024, 100); float64(want) > real || float64(want) < real-100 {
		t.Fatalf("alpha %d after 100 decays, the paper's formula gives %.1f", want, real)
	}
	low := want
	for k := 1; k <= 200; k++ {
		r.CNP(int64(100+k)*us - us/2) // one CNP between two updates
		r.Rate(int64(100+k) * us)
		want = alphaStep(want, true)
		if r.alpha != want {
			t.Fatalf("after %d updates with a CNP: alpha %d, want %d", k, r.alpha, want)
		}
	}
	// 1 - alpha closes in on 0 as (1-g)^k.
	if real := 1024 - (1024-float64(low))*math.Pow(1019.0/1024, 200); float64(want) > real || float64(want) < real-200 {
		t.Fatalf("alpha %d after 200 CNP updates, the paper's formula gives %.1f", want, real)
	}
	// Two updates due at once come out the same as one at a time.
	r.Rate(int64(302) * us)
	if want = alphaStep(alphaStep(want, false), false); r.alpha != want {
		t.Fatalf("two updates at once: alpha %d, want %d", r.alpha, want)
	}
}

// cut is rule 3's decrease.
func cut(rc uint64, alpha uint32) uint64 {
	return max(rc-min(rc*uint64(alpha)>>11, rc*50/100), 1_000_000)
}

// The first CNP cuts at once with alpha 1023 (just under half); a second
// CNP waits for the next monitor period and cuts with the alpha of that
// instant; the target rate stays at the line rate until an increase has
// happened (rp_clamp_tgt_rate 0).
func TestDecrease(t *testing.T) {
	r, evs := newRP(t, "")
	const line = 10_000_000_000
	if rate, limited := r.Rate(0); limited || rate != line {
		t.Fatalf("idle: %d %v", rate, limited)
	}
	r.CNP(0)
	rc := cut(line, 1023) // 10e9 - 10e9*1023/2048
	if rc != 5_004_882_813 {
		t.Fatalf("formula: %d", rc)
	}
	if rate, limited := r.Rate(0); !limited || rate != rc || r.rt != line {
		t.Fatalf("after the first CNP: RC %d RT %d limited %v, want RC %d RT %d", rate, r.rt, limited, rc, uint64(line))
	}
	r.CNP(2 * us)
	if rate, _ := r.Rate(4*us - 1); rate != rc {
		t.Fatalf("cut before the monitor period ended: %d", rate)
	}
	// alpha: decays at 1 and 2 us, rises at 3 (the CNP at 2 us came
	// after that update), decays at 4, then the cut at 4.
	a := alphaStep(alphaStep(alphaStep(alphaStep(1023, false), false), true), false)
	rc = cut(rc, a)
	if rate, _ := r.Rate(4 * us); rate != rc || r.rt != line {
		t.Fatalf("after the second cut: RC %d RT %d, want %d %d (alpha %d)", rate, r.rt, rc, uint64(line), a)
	}
	kinds := []EventKind{EventCNP, EventDecrease, EventCNP, EventDecrease}
	if len(*evs) != len(kinds) {
		t.Fatalf("events %+v", *evs)
	}
	for i, e := range *evs {
		if e.Kind != kinds[i] {
			t.Fatalf("event %d %v, want %v", i, e.Kind, kinds[i])
		}
	}
	if e := (*evs)[3]; e.Time != 4*us || e.Current != rc || e.Alpha != a {
		t.Fatalf("decrease event %+v", e)
	}
	// Many CNPs in one period make one cut.
	for i := int64(1); i <= 3; i++ {
		r.CNP(4*us + i*us/2)
	}
	r.Rate(8 * us)
	if n := len(*evs); n != 8 || (*evs)[7].Kind != EventDecrease {
		t.Fatalf("three CNPs in one period: %d events, %+v", n, (*evs)[4:])
	}
}

// increaseStep is rule 4 after a stage count.
func increaseStep(rc, rt uint64, T, BC uint32, th uint32) (uint64, uint64, EventKind) {
	k := EventFastRecovery
	switch {
	case min(T, BC) > th:
		rt += 50_000_000
		k = EventHyper
	case max(T, BC) >= th:
		rt += 5_000_000
		k = EventAdditive
	}
	rt = min(rt, 10_000_000_000)
	return (rc + rt + 1) / 2, rt, k
}

// After a cut, increases follow the stage counts: fast recovery while
// both stages are under rp_threshold, additive once one reaches it, hyper
// once both pass it; the timer drives T every rp_time_reset and the byte
// counter BC every rp_byte_reset bytes.
func TestIncreaseSequence(t *testing.T) {
	// The paper's F = 5 shows fast recovery; clamping makes the target
	// the current rate, so the increases show in RT.
	r, evs := newRP(t, "rp_threshold=3,rp_clamp_tgt_rate=1")
	r.CNP(0)
	r.CNP(1 * us) // second cut at 4 us, with RT clamped to RC
	r.Rate(4 * us)
	rc, rt := r.rc, r.rt
	if rt != cut(10_000_000_000, 1023) {
		t.Fatalf("RT %d after a clamped cut, want the RC before it", rt)
	}
	*evs = nil
	var T, BC uint32
	step := func(now int64, byTimer bool, sent int) {
		t.Helper()
		if byTimer {
			T++
			r.Rate(now)
		} else {
			BC++
			r.Sent(now, sent)
		}
		var k EventKind
		rc, rt, k = increaseStep(rc, rt, T, BC, 3)
		last := (*evs)[len(*evs)-1]
		if r.rc != rc || r.rt != rt || last.Kind != k || last.Time != now {
			t.Fatalf("T %d BC %d: RC %d RT %d %v at %d, want RC %d RT %d %v at %d", T, BC, r.rc, r.rt, last.Kind, last.Time, rc, rt, k, now)
		}
	}
	const tr = 300 * us
	start := 4 * us
	step(start+tr, true, 0)          // T1: fast recovery
	step(start+2*tr, true, 0)        // T2: fast recovery
	step(start+2*tr+1, false, 32767) // BC1
	step(start+2*tr+2, false, 32767) // BC2
	step(start+3*tr, true, 0)        // T3: additive
	step(start+3*tr+1, false, 32767) // BC3: additive
	step(start+4*tr, true, 0)        // T4: additive (BC 3 is not > 3)
	step(start+4*tr+1, false, 32767) // BC4: hyper
	step(start+5*tr, true, 0)        // T5: hyper
	want := []EventKind{EventFastRecovery, EventFastRecovery, EventFastRecovery, EventFastRecovery,
		EventAdditive, EventAdditive, EventAdditive, EventHyper, EventHyper}
	for i, e := range *evs {
		if e.Kind != want[i] {
			t.Fatalf("increase %d: %v, want %v (%+v)", i, e.Kind, want[i], *evs)
		}
	}
	// A byte counter short of rp_byte_reset counts nothing; the rest
	// carries over to the next packet.
	n := len(*evs)
	r.Sent(start+5*tr+1, 32766)
	if len(*evs) != n {
		t.Fatalf("32766 bytes made an increase")
	}
	r.Sent(start+5*tr+2, 1)
	if len(*evs) != n+1 || r.stageBC != BC+1 {
		t.Fatalf("the 32767th byte: %d events, BC %d", len(*evs)-n, r.stageBC)
	}
	// A cut resets both stages and the byte count.
	r.Sent(start+5*tr+3, 1000)
	r.CNP(start + 5*tr + 4)
	r.Rate(start + 6*tr)
	if r.stageT != 0 || r.stageBC != 0 || r.bytes != 0 {
		t.Fatalf("after a cut: T %d BC %d bytes %d", r.stageT, r.stageBC, r.bytes)
	}
}

// With the default rp_threshold 1 there is no fast recovery: the first
// timer event is already additive; and with no bytes sent it stays
// additive (BC 0 keeps min(T, BC) at 0).
func TestIncreaseDefaults(t *testing.T) {
	r, evs := newRP(t, "rp_clamp_tgt_rate=1")
	r.CNP(0)
	r.CNP(us)
	r.Rate(4 * us)
	*evs = nil
	r.Rate(4*us + 10*300*us)
	if len(*evs) != 10 {
		t.Fatalf("%d increases in 10 timer periods: %+v", len(*evs), *evs)
	}
	for _, e := range *evs {
		if e.Kind != EventAdditive {
			t.Fatalf("%+v", *evs)
		}
	}
}

// Cut after cut, the rate stops at rp_min_rate.
func TestMinRate(t *testing.T) {
	r, evs := newRP(t, "")
	for now := int64(0); now < 400*us; now += 2 * us {
		r.CNP(now)
	}
	rate, limited := r.Rate(400 * us)
	if !limited || rate != 1_000_000 {
		t.Fatalf("after 100 cuts: %d bit/s, limited %v; want rp_min_rate 1 Mb/s", rate, limited)
	}
	var cuts int
	for _, e := range *evs {
		if e.Kind == EventDecrease {
			cuts++
			if e.Current < 1_000_000 {
				t.Fatalf("cut below the minimum: %+v", e)
			}
		}
	}
	if cuts != 101 {
		t.Fatalf("%d cuts, want the first and one per 4 us period up to 400 us: 101", cuts)
	}
	// rp_min_rate 10 Mb/s.
	r, _ = newRP(t, "rp_min_rate=10")
	for now := int64(0); now < 400*us; now += 2 * us {
		r.CNP(now)
	}
	if rate, _ := r.Rate(400 * us); rate != 10_000_000 {
		t.Fatalf("rp_min_rate 10: %d", rate)
	}
}

// Left alone, a QP climbs back to the line rate, is no longer limited,
// and its next CNP is a first CNP again.
func TestRecovery(t *testing.T) {
	r, evs := newRP(t, "")
	r.CNP(0)
	rate, limited := r.Rate(1_000_000 * us)
	if limited || rate != 10_000_000_000 {
		t.Fatalf("after 1 s: %d %v", rate, limited)
	}
	if last := (*evs)[len(*evs)-1]; last.Kind != EventRecovered {
		t.Fatalf("last event %+v", last)
	}
	r.CNP(2_000_000 * us)
	if r.alpha != 1023 || r.rc != cut(10_000_000_000, 1023) {
		t.Fatalf("a CNP after recovery: alpha %d RC %d", r.alpha, r.rc)
	}
}

// rp_rate_to_set_on_first_cnp and rp_max_rate.
func TestFirstRateAndMaxRate(t *testing.T) {
	r, _ := newRP(t, "rp_rate_to_set_on_first_cnp=1000")
	r.CNP(0)
	if r.rc != cut(1_000_000_000, 1023) {
		t.Fatalf("first CNP at 1000 Mb/s: RC %d", r.rc)
	}
	r, _ = newRP(t, "rp_max_rate=2000")
	if rate, limited := r.Rate(0); limited || rate != 2_000_000_000 {
		t.Fatalf("rp_max_rate 2000: %d", rate)
	}
	r.CNP(0)
	if r.rc != cut(2_000_000_000, 1023) || r.rt != 2_000_000_000 {
		t.Fatalf("rp_max_rate 2000: RC %d RT %d", r.rc, r.rt)
	}
}
