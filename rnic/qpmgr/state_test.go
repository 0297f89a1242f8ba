package qpmgr

import (
	"errors"
	"fmt"
	"testing"

	"github.com/rnicd/rnicd/ib"
)

// stateTestAllStates and stateTestAllTypes list every state and type.
var (
	stateTestAllStates = []ib.QPState{ib.QPSReset, ib.QPSInit, ib.QPSRTR, ib.QPSRTS, ib.QPSSQD, ib.QPSSQE, ib.QPSErr}
	stateTestAllTypes  = []ib.QPType{ib.QPTypeRC, ib.QPTypeUC, ib.QPTypeUD}
)

// stateTestKnownBits is every attribute bit libibverbs defines.
const stateTestKnownBits = ib.AttrState | ib.AttrCurState | ib.AttrEnSQDAsyncNotify |
	ib.AttrAccessFlags | ib.AttrPKeyIndex | ib.AttrPort | ib.AttrQKey | ib.AttrAV |
	ib.AttrPathMTU | ib.AttrTimeout | ib.AttrRetryCnt | ib.AttrRNRRetry | ib.AttrRQPSN |
	ib.AttrMaxQPRdAtomic | ib.AttrAltPath | ib.AttrMinRNRTimer | ib.AttrSQPSN |
	ib.AttrMaxDestRdAtomic | ib.AttrPathMigState | ib.AttrCap | ib.AttrDestQPN |
	ib.AttrRateLimit

// stateTestValid is written out independently of stateTable: every valid
// (type, from, to) with its required and optional attributes (AttrState
// not included), from IBTA 11.2.4.2 as Linux's qp_state_table has it, plus
// RESET->ERR, which the spec allows and Linux does not.
var stateTestValid = func() []struct {
	t        ib.QPType
	from, to ib.QPState
	req, opt ib.AttrMask
} {
	type row = struct {
		t        ib.QPType
		from, to ib.QPState
		req, opt ib.AttrMask
	}
	var rows []row
	// any -> RESET and any -> ERR, every type, no attributes.
	for _, t := range stateTestAllTypes {
		for _, s := range stateTestAllStates {
			rows = append(rows, row{t: t, from: s, to: ib.QPSReset})
			rows = append(rows, row{t: t, from: s, to: ib.QPSErr})
		}
	}
	const (
		rcInit  = ib.AttrPKeyIndex | ib.AttrPort | ib.AttrAccessFlags
		udInit  = ib.AttrPKeyIndex | ib.AttrPort | ib.AttrQKey
		ucRTR   = ib.AttrAV | ib.AttrPathMTU | ib.AttrDestQPN | ib.AttrRQPSN
		rcRTR   = ucRTR | ib.AttrMaxDestRdAtomic | ib.AttrMinRNRTimer
		cRTROpt = ib.AttrAltPath | ib.AttrAccessFlags | ib.AttrPKeyIndex
		rcRTS   = ib.AttrTimeout | ib.AttrRetryCnt | ib.AttrRNRRetry | ib.AttrSQPSN | ib.AttrMaxQPRdAtomic
		ucToRTS = ib.AttrCurState | ib.AttrAltPath | ib.AttrAccessFlags | ib.AttrPathMigState
		rcToRTS = ucToRTS | ib.AttrMinRNRTimer
		udToRTS = ib.AttrCurState | ib.AttrQKey
	)
	rows = append(rows,
		row{ib.QPTypeRC, ib.QPSReset, ib.QPSInit, rcInit, 0},
		row{ib.QPTypeUC, ib.QPSReset, ib.QPSInit, rcInit, 0},
		row{ib.QPTypeUD, ib.QPSReset, ib.QPSInit, udInit, 0},

		row{ib.QPTypeRC, ib.QPSInit, ib.QPSInit, 0, rcInit},
		row{ib.QPTypeUC, ib.QPSInit, ib.QPSInit, 0, rcInit},
		row{ib.QPTypeUD, ib.QPSInit, ib.QPSInit, 0, udInit},

		row{ib.QPTypeRC, ib.QPSInit, ib.QPSRTR, rcRTR, cRTROpt},
		row{ib.QPTypeUC, ib.QPSInit, ib.QPSRTR, ucRTR, cRTROpt},
		row{ib.QPTypeUD, ib.QPSInit, ib.QPSRTR, 0, ib.AttrPKeyIndex | ib.AttrQKey},

		row{ib.QPTypeRC, ib.QPSRTR, ib.QPSRTS, rcRTS, rcToRTS},
		row{ib.QPTypeUC, ib.QPSRTR, ib.QPSRTS, ib.AttrSQPSN, ucToRTS},
		row{ib.QPTypeUD, ib.QPSRTR, ib.QPSRTS, ib.AttrSQPSN, udToRTS},

		row{ib.QPTypeRC, ib.QPSRTS, ib.QPSRTS, 0, rcToRTS},
		row{ib.QPTypeUC, ib.QPSRTS, ib.QPSRTS, 0, ucToRTS},
		row{ib.QPTypeUD, ib.QPSRTS, ib.QPSRTS, 0, udToRTS},

		row{ib.QPTypeRC, ib.QPSRTS, ib.QPSSQD, 0, ib.AttrEnSQDAsyncNotify},
		row{ib.QPTypeUC, ib.QPSRTS, ib.QPSSQD, 0, ib.AttrEnSQDAsyncNotify},
		row{ib.QPTypeUD, ib.QPSRTS, ib.QPSSQD, 0, ib.AttrEnSQDAsyncNotify},

		row{ib.QPTypeRC, ib.QPSSQD, ib.QPSRTS, 0, rcToRTS},
		row{ib.QPTypeUC, ib.QPSSQD, ib.QPSRTS, 0, ucToRTS},
		row{ib.QPTypeUD, ib.QPSSQD, ib.QPSRTS, 0, udToRTS},

		row{ib.QPTypeRC, ib.QPSSQD, ib.QPSSQD, 0, ib.AttrPort | ib.AttrAV | ib.AttrTimeout |
			ib.AttrRetryCnt | ib.AttrRNRRetry | ib.AttrMaxQPRdAtomic | ib.AttrMaxDestRdAtomic |
			ib.AttrAltPath | ib.AttrAccessFlags | ib.AttrPKeyIndex | ib.AttrMinRNRTimer |
			ib.AttrPathMigState},
		row{ib.QPTypeUC, ib.QPSSQD, ib.QPSSQD, 0, ib.AttrAV | ib.AttrAltPath | ib.AttrAccessFlags |
			ib.AttrPKeyIndex | ib.AttrPathMigState},
		row{ib.QPTypeUD, ib.QPSSQD, ib.QPSSQD, 0, ib.AttrPKeyIndex | ib.AttrQKey},

		row{ib.QPTypeRC, ib.QPSSQE, ib.QPSRTS, 0, 0},
		row{ib.QPTypeUC, ib.QPSSQE, ib.QPSRTS, 0, ib.AttrCurState | ib.AttrAccessFlags},
		row{ib.QPTypeUD, ib.QPSSQE, ib.QPSRTS, 0, udToRTS},
	)
	return rows
}()

func stateTestCheck(t *testing.T, typ ib.QPType, from, to ib.QPState, mask ib.AttrMask) *TransitionError {
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
			for _, m := range []ib.AttrMask{ib.AttrState | r.req, ib.AttrState | r.req | r.opt} {
				if err := CheckModify(r.t, r.from, r.to, m); err != nil {
					t.Errorf("mask %v: %v", m, err)
				}
			}
			// Each optional bit on its own.
			for b := ib.AttrMask(1); b != 0; b <<= 1 {
				if r.opt&b == 0 {
					continue
				}
				if err := CheckModify(r.t, r.from, r.to, ib.AttrState|r.req|b); err != nil {
					t.Errorf("optional %v: %v", b, err)
				}
			}
			// Each required bit removed.
			for b := ib.AttrMask(1); b != 0; b <<= 1 {
				if r.req&b == 0 {
					continue
				}
				m := ib.AttrState | (r.req &^ b) | r.opt
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
			for b := ib.AttrMask(1); b != 0; b <<= 1 {
				if (ib.AttrState|r.req|r.opt)&b != 0 {
					continue
				}
				te := stateTestCheck(t, r.t, r.from, r.to, ib.AttrState|r.req|b)
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
				for _, m := range []ib.AttrMask{ib.AttrState, stateTestKnownBits} {
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
		typ      ib.QPType
		from, to ib.QPState
	}{
		{ib.QPTypeRC, ib.QPSReset, ib.QPSRTS},
		{ib.QPTypeRC, ib.QPSReset, ib.QPSRTR},
		{ib.QPTypeRC, ib.QPSInit, ib.QPSRTS},
		{ib.QPTypeRC, ib.QPSRTR, ib.QPSInit},
		{ib.QPTypeRC, ib.QPSRTR, ib.QPSRTR},
		{ib.QPTypeRC, ib.QPSRTS, ib.QPSRTR},
		{ib.QPTypeUC, ib.QPSRTS, ib.QPSSQE},
		{ib.QPTypeUD, ib.QPSErr, ib.QPSRTS},
		{ib.QPTypeUD, ib.QPSErr, ib.QPSInit},
		{ib.QPTypeUD, ib.QPSSQD, ib.QPSSQE},
		{ib.QPTypeUC, ib.QPSSQE, ib.QPSSQD},
	} {
		te := stateTestCheck(t, c.typ, c.from, c.to, ib.AttrState)
		if te == nil || !te.Invalid {
			t.Errorf("%v %v->%v: got %v, want Invalid", c.typ, c.from, c.to, te)
		}
	}
}

func TestCheckModifyApplicationMasks(t *testing.T) {
	// The masks perftest and ibv_rc_pingpong pass to ibv_modify_qp.
	for _, c := range []struct {
		typ      ib.QPType
		from, to ib.QPState
		mask     ib.AttrMask
	}{
		{ib.QPTypeRC, ib.QPSReset, ib.QPSInit, ib.AttrState | ib.AttrPKeyIndex | ib.AttrPort | ib.AttrAccessFlags},
		{ib.QPTypeUC, ib.QPSReset, ib.QPSInit, ib.AttrState | ib.AttrPKeyIndex | ib.AttrPort | ib.AttrAccessFlags},
		{ib.QPTypeRC, ib.QPSInit, ib.QPSRTR, ib.AttrState | ib.AttrAV | ib.AttrPathMTU | ib.AttrDestQPN |
			ib.AttrRQPSN | ib.AttrMaxDestRdAtomic | ib.AttrMinRNRTimer},
		{ib.QPTypeUC, ib.QPSInit, ib.QPSRTR, ib.AttrState | ib.AttrAV | ib.AttrPathMTU | ib.AttrDestQPN | ib.AttrRQPSN},
		{ib.QPTypeRC, ib.QPSRTR, ib.QPSRTS, ib.AttrState | ib.AttrTimeout | ib.AttrRetryCnt | ib.AttrRNRRetry |
			ib.AttrSQPSN | ib.AttrMaxQPRdAtomic},
		{ib.QPTypeUC, ib.QPSRTR, ib.QPSRTS, ib.AttrState | ib.AttrSQPSN},
		{ib.QPTypeUD, ib.QPSReset, ib.QPSInit, ib.AttrState | ib.AttrPKeyIndex | ib.AttrPort | ib.AttrQKey},
		{ib.QPTypeUD, ib.QPSInit, ib.QPSRTR, ib.AttrState},
		{ib.QPTypeUD, ib.QPSRTR, ib.QPSRTS, ib.AttrState | ib.AttrSQPSN},
		{ib.QPTypeRC, ib.QPSRTS, ib.QPSErr, ib.AttrState},
		{ib.QPTypeRC, ib.QPSErr, ib.QPSReset, ib.AttrState},
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
		typ     ib.QPType
		cur     ib.QPState
		mask    ib.AttrMask
		invalid bool
		excess  ib.AttrMask
	}{
		{typ: ib.QPTypeRC, cur: ib.QPSInit, mask: ib.AttrAccessFlags},
		{typ: ib.QPTypeUD, cur: ib.QPSInit, mask: ib.AttrQKey | ib.AttrPKeyIndex},
		{typ: ib.QPTypeRC, cur: ib.QPSRTS, mask: ib.AttrMinRNRTimer | ib.AttrCurState},
		{typ: ib.QPTypeUD, cur: ib.QPSRTS, mask: ib.AttrQKey},
		{typ: ib.QPTypeRC, cur: ib.QPSSQD, mask: ib.AttrTimeout | ib.AttrAV},
		{typ: ib.QPTypeRC, cur: ib.QPSReset, mask: 0},
		{typ: ib.QPTypeRC, cur: ib.QPSRTS, mask: ib.AttrTimeout, excess: ib.AttrTimeout},
		{typ: ib.QPTypeUC, cur: ib.QPSRTS, mask: ib.AttrMinRNRTimer, excess: ib.AttrMinRNRTimer},
		{typ: ib.QPTypeRC, cur: ib.QPSRTR, mask: ib.AttrAccessFlags, invalid: true},
		{typ: ib.QPTypeUD, cur: ib.QPSSQE, mask: ib.AttrQKey, invalid: true},
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
		typ      ib.QPType
		from, to ib.QPState
		ok       bool
	}{
		{ib.QPTypeRC, ib.QPSRTR, ib.QPSRTS, true},
		{ib.QPTypeRC, ib.QPSRTS, ib.QPSRTS, true},
		{ib.QPTypeRC, ib.QPSSQD, ib.QPSRTS, true},
		{ib.QPTypeUD, ib.QPSSQE, ib.QPSRTS, true},
		{ib.QPTypeUC, ib.QPSSQE, ib.QPSRTS, true},
		{ib.QPTypeRC, ib.QPSSQE, ib.QPSRTS, false},
		{ib.QPTypeRC, ib.QPSReset, ib.QPSInit, false},
		{ib.QPTypeRC, ib.QPSInit, ib.QPSInit, false},
		{ib.QPTypeRC, ib.QPSInit, ib.QPSRTR, false},
		{ib.QPTypeRC, ib.QPSRTS, ib.QPSSQD, false},
		{ib.QPTypeRC, ib.QPSSQD, ib.QPSSQD, false},
		{ib.QPTypeRC, ib.QPSRTS, ib.QPSErr, false},
	} {
		var req ib.AttrMask
		for _, r := range stateTestValid {
			if r.t == c.typ && r.from == c.from && r.to == c.to {
				req = r.req
			}
		}
		err := CheckModify(c.typ, c.from, c.to, ib.AttrState|ib.AttrCurState|req)
		if (err == nil) != c.ok {
			t.Errorf("%v %v->%v with CUR_STATE: %v, want ok=%v", c.typ, c.from, c.to, err, c.ok)
		}
	}
}

func TestCheckModifyMissingAndExcess(t *testing.T) {
	te := stateTestCheck(t, ib.QPTypeRC, ib.QPSInit, ib.QPSRTR,
		ib.AttrState|ib.AttrAV|ib.AttrPathMTU|ib.AttrMaxDestRdAtomic|ib.AttrMinRNRTimer|ib.AttrCap|ib.AttrSQPSN)
	if te == nil {
		t.Fatal("allowed")
	}
	if te.Missing != ib.AttrDestQPN|ib.AttrRQPSN || te.Excess != ib.AttrSQPSN|ib.AttrCap || te.Invalid {
		t.Errorf("got %+v", *te)
	}
	const want = "qpmgr: modify RC QP INIT->RTR: missing required attributes RQ_PSN|DEST_QPN; attributes not allowed SQ_PSN|CAP"
	if got := te.Error(); got != want {
		t.Errorf("Error() = %q\nwant      %q", got, want)
	}
}

func TestCheckModifyBadTypeAndState(t *testing.T) {
	for _, c := range []struct {
		typ      ib.QPType
		from, to ib.QPState
	}{
		{ib.QPType(0), ib.QPSReset, ib.QPSInit},
		{ib.QPType(1), ib.QPSReset, ib.QPSInit},
		{ib.QPType(5), ib.QPSReset, ib.QPSInit},
		{ib.QPType(255), ib.QPSReset, ib.QPSErr},
		{ib.QPTypeRC, ib.QPState(7), ib.QPSReset},
		{ib.QPTypeRC, ib.QPSReset, ib.QPState(7)},
		{ib.QPTypeUD, ib.QPState(255), ib.QPState(255)},
	} {
		te := stateTestCheck(t, c.typ, c.from, c.to, ib.AttrState)
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
		{CheckModify(ib.QPTypeRC, ib.QPSReset, ib.QPSRTS, ib.AttrState),
			"qpmgr: modify RC QP: transition RESET->RTS is not allowed"},
		{CheckModify(ib.QPTypeUD, ib.QPSRTR, ib.QPSRTR, ib.AttrQKey),
			"qpmgr: modify UD QP: attributes cannot be modified in state RTR"},
		{CheckModify(ib.QPType(8), ib.QPSReset, ib.QPSInit, ib.AttrState),
			"qpmgr: modify QP: unsupported QP type Type(8)"},
		{CheckModify(ib.QPTypeRC, ib.QPSRTR, ib.QPSRTS, ib.AttrState|ib.AttrTimeout|ib.AttrRetryCnt|ib.AttrRNRRetry|ib.AttrMaxQPRdAtomic),
			"qpmgr: modify RC QP RTR->RTS: missing required attributes SQ_PSN"},
		{CheckModify(ib.QPTypeUD, ib.QPSReset, ib.QPSInit, ib.AttrState|ib.AttrPKeyIndex|ib.AttrPort|ib.AttrQKey|ib.AttrAccessFlags),
			"qpmgr: modify UD QP RESET->INIT: attributes not allowed ACCESS_FLAGS"},
		{CheckModify(ib.QPTypeUC, ib.QPSRTS, ib.QPSErr, ib.AttrState|ib.AttrRateLimit|1<<22),
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

// XRC's ends take RC's transitions with the attribute sets IBTA A14.5.2
// gives them (Linux's ib_modify_qp_is_ok): an initiator's RTR needs no
// responder resources nor RNR timer, a target's RTS no retry counts nor
// initiator depth; both still accept them, and need the rest of RC's.
func TestXRCTransitions(t *testing.T) {
	rtr := ib.AttrState | ib.AttrAV | ib.AttrPathMTU | ib.AttrDestQPN | ib.AttrRQPSN
	rts := ib.AttrState | ib.AttrTimeout | ib.AttrSQPSN
	for _, tc := range []struct {
		t         ib.QPType
		from, to  ib.QPState
		mask      ib.AttrMask
		wantError bool
	}{
		{ib.QPTypeXRCSend, ib.QPSInit, ib.QPSRTR, rtr, false},
		{ib.QPTypeXRCSend, ib.QPSInit, ib.QPSRTR, rtr | ib.AttrMaxDestRdAtomic | ib.AttrMinRNRTimer, false},
		{ib.QPTypeRC, ib.QPSInit, ib.QPSRTR, rtr, true},
		{ib.QPTypeXRCRecv, ib.QPSInit, ib.QPSRTR, rtr, true},
		{ib.QPTypeXRCRecv, ib.QPSRTR, ib.QPSRTS, rts, false},
		{ib.QPTypeXRCRecv, ib.QPSRTR, ib.QPSRTS, rts | ib.AttrRetryCnt | ib.AttrRNRRetry | ib.AttrMaxQPRdAtomic, false},
		{ib.QPTypeXRCSend, ib.QPSRTR, ib.QPSRTS, rts, true},
		{ib.QPTypeRC, ib.QPSRTR, ib.QPSRTS, rts, true},
		{ib.QPTypeXRCRecv, ib.QPSReset, ib.QPSInit, ib.AttrState | ib.AttrPort | ib.AttrPKeyIndex, true},
		{ib.QPTypeXRCRecv, ib.QPSReset, ib.QPSInit, ib.AttrState | ib.AttrPort | ib.AttrPKeyIndex | ib.AttrAccessFlags, false},
	} {
		err := CheckModify(tc.t, tc.from, tc.to, tc.mask)
		if (err != nil) != tc.wantError {
			t.Errorf("%v %v->%v with %v: %v", tc.t, tc.from, tc.to, tc.mask, err)
		}
	}
}
