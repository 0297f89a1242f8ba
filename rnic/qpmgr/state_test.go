package qpmgr

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// stateTestAllStates and stateTestAllTypes list every state and type.
var (
	stateTestAllStates = []State{StateReset, StateInit, StateRTR, StateRTS, StateSQD, StateSQE, StateErr}
	stateTestAllTypes  = []Type{TypeRC, TypeUC, TypeUD}
)

// stateTestKnownBits is every attribute bit libibverbs defines.
const stateTestKnownBits = AttrState | AttrCurState | AttrEnSQDAsyncNotify |
	AttrAccessFlags | AttrPKeyIndex | AttrPort | AttrQKey | AttrAV |
	AttrPathMTU | AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrRQPSN |
	AttrMaxQPRdAtomic | AttrAltPath | AttrMinRNRTimer | AttrSQPSN |
	AttrMaxDestRdAtomic | AttrPathMigState | AttrCap | AttrDestQPN |
	AttrRateLimit

// stateTestValid is written out independently of stateTable: every valid
// (type, from, to) with its required and optional attributes (AttrState
// not included), from IBTA 11.2.4.2 as Linux's qp_state_table has it, plus
// RESET->ERR, which the spec allows and Linux does not.
var stateTestValid = func() []struct {
	t        Type
	from, to State
	req, opt AttrMask
} {
	type row = struct {
		t        Type
		from, to State
		req, opt AttrMask
	}
	var rows []row
	// any -> RESET and any -> ERR, every type, no attributes.
	for _, t := range stateTestAllTypes {
		for _, s := range stateTestAllStates {
			rows = append(rows, row{t: t, from: s, to: StateReset})
			rows = append(rows, row{t: t, from: s, to: StateErr})
		}
	}
	const (
		rcInit  = AttrPKeyIndex | AttrPort | AttrAccessFlags
		udInit  = AttrPKeyIndex | AttrPort | AttrQKey
		ucRTR   = AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN
		rcRTR   = ucRTR | AttrMaxDestRdAtomic | AttrMinRNRTimer
		cRTROpt = AttrAltPath | AttrAccessFlags | AttrPKeyIndex
		rcRTS   = AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrSQPSN | AttrMaxQPRdAtomic
		ucToRTS = AttrCurState | AttrAltPath | AttrAccessFlags | AttrPathMigState
		rcToRTS = ucToRTS | AttrMinRNRTimer
		udToRTS = AttrCurState | AttrQKey
	)
	rows = append(rows,
		row{TypeRC, StateReset, StateInit, rcInit, 0},
		row{TypeUC, StateReset, StateInit, rcInit, 0},
		row{TypeUD, StateReset, StateInit, udInit, 0},

		row{TypeRC, StateInit, StateInit, 0, rcInit},
		row{TypeUC, StateInit, StateInit, 0, rcInit},
		row{TypeUD, StateInit, StateInit, 0, udInit},

		row{TypeRC, StateInit, StateRTR, rcRTR, cRTROpt},
		row{TypeUC, StateInit, StateRTR, ucRTR, cRTROpt},
		row{TypeUD, StateInit, StateRTR, 0, AttrPKeyIndex | AttrQKey},

		row{TypeRC, StateRTR, StateRTS, rcRTS, rcToRTS},
		row{TypeUC, StateRTR, StateRTS, AttrSQPSN, ucToRTS},
		row{TypeUD, StateRTR, StateRTS, AttrSQPSN, udToRTS},

		row{TypeRC, StateRTS, StateRTS, 0, rcToRTS},
		row{TypeUC, StateRTS, StateRTS, 0, ucToRTS},
		row{TypeUD, StateRTS, StateRTS, 0, udToRTS},

		row{TypeRC, StateRTS, StateSQD, 0, AttrEnSQDAsyncNotify},
		row{TypeUC, StateRTS, StateSQD, 0, AttrEnSQDAsyncNotify},
		row{TypeUD, StateRTS, StateSQD, 0, AttrEnSQDAsyncNotify},

		row{TypeRC, StateSQD, StateRTS, 0, rcToRTS},
		row{TypeUC, StateSQD, StateRTS, 0, ucToRTS},
		row{TypeUD, StateSQD, StateRTS, 0, udToRTS},

		row{TypeRC, StateSQD, StateSQD, 0, AttrPort | AttrAV | AttrTimeout |
			AttrRetryCnt | AttrRNRRetry | AttrMaxQPRdAtomic | AttrMaxDestRdAtomic |
			AttrAltPath | AttrAccessFlags | AttrPKeyIndex | AttrMinRNRTimer |
			AttrPathMigState},
		row{TypeUC, StateSQD, StateSQD, 0, AttrAV | AttrAltPath | AttrAccessFlags |
			AttrPKeyIndex | AttrPathMigState},
		row{TypeUD, StateSQD, StateSQD, 0, AttrPKeyIndex | AttrQKey},

		row{TypeRC, StateSQE, StateRTS, 0, 0},
		row{TypeUC, StateSQE, StateRTS, 0, AttrCurState | AttrAccessFlags},
		row{TypeUD, StateSQE, StateRTS, 0, udToRTS},
	)
	return rows
}()

func stateTestCheck(t *testing.T, typ Type, from, to State, mask AttrMask) *TransitionError {
	t.Helper()
	err := CheckModify(typ, from, to, mask)
	if err == nil {
		return nil
	}
	var te *TransitionError
	if !errors.As(err, &te) {
		t.Fatalf("CheckModify(%v, %v, %v, %v) returned %T, want *TransitionError", typ, from, to, mask, err)
	}
	if te.Type != typ || te.From != from || te.To != to {
		t.Errorf("CheckModify(%v, %v, %v, %v): error names %v %v->%v", typ, from, to, mask, te.Type, te.From, te.To)
	}
	return te
}

func TestCheckModifyValidTransitions(t *testing.T) {
	for _, r := range stateTestValid {
		name := fmt.Sprintf("%v/%v->%v", r.t, r.from, r.to)
		t.Run(name, func(t *testing.T) {
			// Exactly the required attributes, with and without the
			// optional ones.
			for _, m := range []AttrMask{AttrState | r.req, AttrState | r.req | r.opt} {
				if err := CheckModify(r.t, r.from, r.to, m); err != nil {
					t.Errorf("mask %v: %v", m, err)
				}
			}
			// Each optional bit on its own.
			for b := AttrMask(1); b != 0; b <<= 1 {
				if r.opt&b == 0 {
					continue
				}
				if err := CheckModify(r.t, r.from, r.to, AttrState|r.req|b); err != nil {
					t.Errorf("optional %v: %v", b, err)
				}
			}
			// Each required bit removed.
			for b := AttrMask(1); b != 0; b <<= 1 {
				if r.req&b == 0 {
					continue
				}
				m := AttrState | (r.req &^ b) | r.opt
				te := stateTestCheck(t, r.t, r.from, r.to, m)
				if te == nil {
					t.Errorf("without %v: allowed, want Missing", b)
					continue
				}
				if te.Invalid || te.Missing != b || te.Excess != 0 {
					t.Errorf("without %v: got %+v, want Missing=%v only", b, *te, b)
				}
			}
			// Each bit the transition does not allow, known or not.
			for b := AttrMask(1); b != 0; b <<= 1 {
				if (AttrState|r.req|r.opt)&b != 0 {
					continue
				}
				te := stateTestCheck(t, r.t, r.from, r.to, AttrState|r.req|b)
				if te == nil {
					t.Errorf("extra %v: allowed, want Excess", b)
					continue
				}
				if te.Invalid || te.Excess != b || te.Missing != 0 {
					t.Errorf("extra %v: got %+v, want Excess=%v only", b, *te, b)
				}
			}
		})
	}
}

// TestCheckModifyInvalidTransitions checks that every (type, from, to) not
// listed in stateTestValid is refused as Invalid, whatever the mask.
func TestCheckModifyInvalidTransitions(t *testing.T) {
	valid := map[[3]uint8]bool{}
	for _, r := range stateTestValid {
		valid[[3]uint8{uint8(r.t), uint8(r.from), uint8(r.to)}] = true
	}
	n := 0
	for _, typ := range stateTestAllTypes {
		for _, from := range stateTestAllStates {
			for _, to := range stateTestAllStates {
				if valid[[3]uint8{uint8(typ), uint8(from), uint8(to)}] {
					continue
				}
				n++
				for _, m := range []AttrMask{AttrState, stateTestKnownBits} {
					te := stateTestCheck(t, typ, from, to, m)
					if te == nil || !te.Invalid {
						t.Errorf("%v %v->%v mask %v: got %v, want Invalid", typ, from, to, m, te)
					}
				}
			}
		}
	}
	if want := 3*7*7 - len(stateTestValid); n != want {
		t.Errorf("checked %d invalid transitions, want %d", n, want)
	}
}

func TestCheckModifyNamedInvalid(t *testing.T) {
	for _, c := range []struct {
		typ      Type
		from, to State
	}{
		{TypeRC, StateReset, StateRTS},
		{TypeRC, StateReset, StateRTR},
		{TypeRC, StateInit, StateRTS},
		{TypeRC, StateRTR, StateInit},
		{TypeRC, StateRTR, StateRTR},
		{TypeRC, StateRTS, StateRTR},
		{TypeUC, StateRTS, StateSQE},
		{TypeUD, StateErr, StateRTS},
		{TypeUD, StateErr, StateInit},
		{TypeUD, StateSQD, StateSQE},
		{TypeUC, StateSQE, StateSQD},
	} {
		te := stateTestCheck(t, c.typ, c.from, c.to, AttrState)
		if te == nil || !te.Invalid {
			t.Errorf("%v %v->%v: got %v, want Invalid", c.typ, c.from, c.to, te)
		}
	}
}

func TestCheckModifyApplicationMasks(t *testing.T) {
	// The masks perftest and ibv_rc_pingpong pass to ibv_modify_qp.
	for _, c := range []struct {
		typ      Type
		from, to State
		mask     AttrMask
	}{
		{TypeRC, StateReset, StateInit, AttrState | AttrPKeyIndex | AttrPort | AttrAccessFlags},
		{TypeUC, StateReset, StateInit, AttrState | AttrPKeyIndex | AttrPort | AttrAccessFlags},
		{TypeRC, StateInit, StateRTR, AttrState | AttrAV | AttrPathMTU | AttrDestQPN |
			AttrRQPSN | AttrMaxDestRdAtomic | AttrMinRNRTimer},
		{TypeUC, StateInit, StateRTR, AttrState | AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN},
		{TypeRC, StateRTR, StateRTS, AttrState | AttrTimeout | AttrRetryCnt | AttrRNRRetry |
			AttrSQPSN | AttrMaxQPRdAtomic},
		{TypeUC, StateRTR, StateRTS, AttrState | AttrSQPSN},
		{TypeUD, StateReset, StateInit, AttrState | AttrPKeyIndex | AttrPort | AttrQKey},
		{TypeUD, StateInit, StateRTR, AttrState},
		{TypeUD, StateRTR, StateRTS, AttrState | AttrSQPSN},
		{TypeRC, StateRTS, StateErr, AttrState},
		{TypeRC, StateErr, StateReset, AttrState},
	} {
		if err := CheckModify(c.typ, c.from, c.to, c.mask); err != nil {
			t.Errorf("%v %v->%v %v: %v", c.typ, c.from, c.to, c.mask, err)
		}
	}
}

func TestCheckModifyWithoutState(t *testing.T) {
	// Without AttrState the call modifies attributes in the current
	// state; next is ignored.
	for _, c := range []struct {
		typ     Type
		cur     State
		mask    AttrMask
		invalid bool
		excess  AttrMask
	}{
		{typ: TypeRC, cur: StateInit, mask: AttrAccessFlags},
		{typ: TypeUD, cur: StateInit, mask: AttrQKey | AttrPKeyIndex},
		{typ: TypeRC, cur: StateRTS, mask: AttrMinRNRTimer | AttrCurState},
		{typ: TypeUD, cur: StateRTS, mask: AttrQKey},
		{typ: TypeRC, cur: StateSQD, mask: AttrTimeout | AttrAV},
		{typ: TypeRC, cur: StateReset, mask: 0},
		{typ: TypeRC, cur: StateRTS, mask: AttrTimeout, excess: AttrTimeout},
		{typ: TypeUC, cur: StateRTS, mask: AttrMinRNRTimer, excess: AttrMinRNRTimer},
		{typ: TypeRC, cur: StateRTR, mask: AttrAccessFlags, invalid: true},
		{typ: TypeUD, cur: StateSQE, mask: AttrQKey, invalid: true},
	} {
		for _, next := range stateTestAllStates {
			err := CheckModify(c.typ, c.cur, next, c.mask)
			if c.excess == 0 && !c.invalid {
				if err != nil {
					t.Errorf("%v in %v, mask %v, next %v: %v", c.typ, c.cur, c.mask, next, err)
				}
				continue
			}
			te := stateTestCheck(t, c.typ, c.cur, c.cur, c.mask)
			var got *TransitionError
			if !errors.As(err, &got) || te == nil || *got != *te {
				t.Fatalf("%v in %v, mask %v: next %v changed the result: %v vs %v", c.typ, c.cur, c.mask, next, err, te)
			}
			if te.Invalid != c.invalid || te.Excess != c.excess {
				t.Errorf("%v in %v, mask %v: got %+v", c.typ, c.cur, c.mask, *te)
			}
		}
	}
}

func TestCheckModifyCurState(t *testing.T) {
	// CUR_STATE is accepted only out of RTR, RTS, SQD and SQE, and only
	// where the transition lists it.
	for _, c := range []struct {
		typ      Type
		from, to State
		ok       bool
	}{
		{TypeRC, StateRTR, StateRTS, true},
		{TypeRC, StateRTS, StateRTS, true},
		{TypeRC, StateSQD, StateRTS, true},
		{TypeUD, StateSQE, StateRTS, true},
		{TypeUC, StateSQE, StateRTS, true},
		{TypeRC, StateSQE, StateRTS, false},
		{TypeRC, StateReset, StateInit, false},
		{TypeRC, StateInit, StateInit, false},
		{TypeRC, StateInit, StateRTR, false},
		{TypeRC, StateRTS, StateSQD, false},
		{TypeRC, StateSQD, StateSQD, false},
		{TypeRC, StateRTS, StateErr, false},
	} {
		var req AttrMask
		for _, r := range stateTestValid {
			if r.t == c.typ && r.from == c.from && r.to == c.to {
				req = r.req
			}
		}
		err := CheckModify(c.typ, c.from, c.to, AttrState|AttrCurState|req)
		if (err == nil) != c.ok {
			t.Errorf("%v %v->%v with CUR_STATE: %v, want ok=%v", c.typ, c.from, c.to, err, c.ok)
		}
	}
}

func TestCheckModifyMissingAndExcess(t *testing.T) {
	te := stateTestCheck(t, TypeRC, StateInit, StateRTR,
		AttrState|AttrAV|AttrPathMTU|AttrMaxDestRdAtomic|AttrMinRNRTimer|AttrCap|AttrSQPSN)
	if te == nil {
		t.Fatal("allowed")
	}
	if te.Missing != AttrDestQPN|AttrRQPSN || te.Excess != AttrSQPSN|AttrCap || te.Invalid {
		t.Errorf("got %+v", *te)
	}
	const want = "qpmgr: modify RC QP INIT->RTR: missing required attributes RQ_PSN|DEST_QPN; attributes not allowed SQ_PSN|CAP"
	if got := te.Error(); got != want {
		t.Errorf("Error() = %q\nwant      %q", got, want)
	}
}

func TestCheckModifyBadTypeAndState(t *testing.T) {
	for _, c := range []struct {
		typ      Type
		from, to State
	}{
		{Type(0), StateReset, StateInit},
		{Type(1), StateReset, StateInit},
		{Type(5), StateReset, StateInit},
		{Type(255), StateReset, StateErr},
		{TypeRC, State(7), StateReset},
		{TypeRC, StateReset, State(7)},
		{TypeUD, State(255), State(255)},
	} {
		te := stateTestCheck(t, c.typ, c.from, c.to, AttrState)
		if te == nil || !te.Invalid {
			t.Errorf("%v %v->%v: got %v, want Invalid", c.typ, c.from, c.to, te)
		}
	}
}

func TestTransitionErrorStrings(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{CheckModify(TypeRC, StateReset, StateRTS, AttrState),
			"qpmgr: modify RC QP: transition RESET->RTS is not allowed"},
		{CheckModify(TypeUD, StateRTR, StateRTR, AttrQKey),
			"qpmgr: modify UD QP: attributes cannot be modified in state RTR"},
		{CheckModify(Type(9), StateReset, StateInit, AttrState),
			"qpmgr: modify QP: unsupported QP type Type(9)"},
		{CheckModify(TypeRC, StateRTR, StateRTS, AttrState|AttrTimeout|AttrRetryCnt|AttrRNRRetry|AttrMaxQPRdAtomic),
			"qpmgr: modify RC QP RTR->RTS: missing required attributes SQ_PSN"},
		{CheckModify(TypeUD, StateReset, StateInit, AttrState|AttrPKeyIndex|AttrPort|AttrQKey|AttrAccessFlags),
			"qpmgr: modify UD QP RESET->INIT: attributes not allowed ACCESS_FLAGS"},
		{CheckModify(TypeUC, StateRTS, StateErr, AttrState|AttrRateLimit|1<<22),
			"qpmgr: modify UC QP RTS->ERR: attributes not allowed RATE_LIMIT|0x400000"},
	} {
		if c.err == nil {
			t.Errorf("got nil, want %q", c.want)
			continue
		}
		if got := c.err.Error(); got != c.want {
			t.Errorf("Error() = %q\nwant      %q", got, c.want)
		}
	}
}

func TestStateString(t *testing.T) {
	want := []string{"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"}
	for i, s := range stateTestAllStates {
		if int(s) != i {
			t.Errorf("%v = %d, want %d (ibv_qp_state)", s, s, i)
		}
		if got := s.String(); got != want[i] {
			t.Errorf("State(%d).String() = %q, want %q", i, got, want[i])
		}
	}
	if got := State(7).String(); got != "State(7)" {
		t.Errorf("State(7).String() = %q", got)
	}
}

func TestTypeString(t *testing.T) {
	for _, c := range []struct {
		t    Type
		v    uint8
		want string
	}{
		{TypeRC, 2, "RC"}, {TypeUC, 3, "UC"}, {TypeUD, 4, "UD"}, {Type(8), 8, "Type(8)"},
	} {
		if uint8(c.t) != c.v || c.t.String() != c.want {
			t.Errorf("Type %d: %q, want %d %q", uint8(c.t), c.t.String(), c.v, c.want)
		}
	}
}

func TestAttrMaskString(t *testing.T) {
	for _, c := range []struct {
		m    AttrMask
		want string
	}{
		{0, "0"},
		{AttrState, "STATE"},
		{AttrState | AttrPathMTU, "STATE|PATH_MTU"},
		{AttrState | AttrPKeyIndex | AttrPort | AttrAccessFlags, "STATE|ACCESS_FLAGS|PKEY_INDEX|PORT"},
		{1 << 21, "0x200000"},
		{AttrDestQPN | 1<<21 | 1<<31, "DEST_QPN|0x80200000"},
		{stateTestKnownBits, "STATE|CUR_STATE|EN_SQD_ASYNC_NOTIFY|ACCESS_FLAGS|PKEY_INDEX|PORT|QKEY|AV|" +
			"PATH_MTU|TIMEOUT|RETRY_CNT|RNR_RETRY|RQ_PSN|MAX_QP_RD_ATOMIC|ALT_PATH|MIN_RNR_TIMER|" +
			"SQ_PSN|MAX_DEST_RD_ATOMIC|PATH_MIG_STATE|CAP|DEST_QPN|RATE_LIMIT"},
	} {
		if got := c.m.String(); got != c.want {
			t.Errorf("AttrMask(%#x).String() = %q, want %q", uint32(c.m), got, c.want)
		}
	}
	// The values are libibverbs' IBV_QP_* bits.
	for _, c := range []struct {
		m    AttrMask
		name string
		bit  uint
	}{
		{AttrState, "STATE", 0}, {AttrCurState, "CUR_STATE", 1},
		{AttrEnSQDAsyncNotify, "EN_SQD_ASYNC_NOTIFY", 2}, {AttrAccessFlags, "ACCESS_FLAGS", 3},
		{AttrPKeyIndex, "PKEY_INDEX", 4}, {AttrPort, "PORT", 5}, {AttrQKey, "QKEY", 6},
		{AttrAV, "AV", 7}, {AttrPathMTU, "PATH_MTU", 8}, {AttrTimeout, "TIMEOUT", 9},
		{AttrRetryCnt, "RETRY_CNT", 10}, {AttrRNRRetry, "RNR_RETRY", 11}, {AttrRQPSN, "RQ_PSN", 12},
		{AttrMaxQPRdAtomic, "MAX_QP_RD_ATOMIC", 13}, {AttrAltPath, "ALT_PATH", 14},
		{AttrMinRNRTimer, "MIN_RNR_TIMER", 15}, {AttrSQPSN, "SQ_PSN", 16},
		{AttrMaxDestRdAtomic, "MAX_DEST_RD_ATOMIC", 17}, {AttrPathMigState, "PATH_MIG_STATE", 18},
		{AttrCap, "CAP", 19}, {AttrDestQPN, "DEST_QPN", 20}, {AttrRateLimit, "RATE_LIMIT", 25},
	} {
		if c.m != 1<<c.bit || c.m.String() != c.name || strings.Contains(c.name, "|") {
			t.Errorf("%s: value %#x name %q, want bit %d", c.name, uint32(c.m), c.m.String(), c.bit)
		}
	}
}
