package qpmgr

import (
	"fmt"
	"strings"

	"github.com/rnicd/rnicd/ib"
)

// TransitionError says why CheckModify refused a ModifyQP call.
type TransitionError struct {
	Type     ib.QPType
	From, To ib.QPState
	Missing  ib.AttrMask // required attributes not given
	Excess   ib.AttrMask // attributes given that the transition does not allow
	Invalid  bool        // the transition itself is not allowed
}

// Error names the transition and, if it is allowed at all, the attributes
// that are missing or not allowed.
func (e *TransitionError) Error() string {
	if e.Invalid {
		switch {
		case typeSlot(e.Type) < 0:
			return fmt.Sprintf("qpmgr: modify QP: unsupported QP type %v", e.Type)
		case e.From == e.To:
			return fmt.Sprintf("qpmgr: modify %v QP: attributes cannot be modified in state %v", e.Type, e.From)
		}
		return fmt.Sprintf("qpmgr: modify %v QP: transition %v->%v is not allowed", e.Type, e.From, e.To)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "qpmgr: modify %v QP %v->%v:", e.Type, e.From, e.To)
	if e.Missing != 0 {
		fmt.Fprintf(&b, " missing required attributes %v", e.Missing)
	}
	if e.Excess != 0 {
		if e.Missing != 0 {
			b.WriteByte(';')
		}
		fmt.Fprintf(&b, " attributes not allowed %v", e.Excess)
	}
	return b.String()
}

// Per-type slots of the transition table.
const (
	rcSlot = iota
	ucSlot
	udSlot
	numTypeSlots
)

// typeSlot returns t's index in a transition's per-type masks, or -1 if t is
// not a type rnicd supports.
func typeSlot(t ib.QPType) int {
	switch t {
	case ib.QPTypeRC, ib.QPTypeXRCSend, ib.QPTypeXRCRecv:
		return rcSlot
	case ib.QPTypeUC:
		return ucSlot
	case ib.QPTypeUD:
		return udSlot
	}
	return -1
}

// stateRule describes one [from][to] transition: whether ModifyQP may make
// it, and, per transport type, which attributes it requires (req) and which
// it accepts besides those and AttrState (opt).
type stateRule struct {
	valid bool
	req   [numTypeSlots]ib.AttrMask
	opt   [numTypeSlots]ib.AttrMask
}

// stateTable is the ModifyQP state-transition table for RC, UC and UD QPs,
// indexed [from][to]; entries left out are not valid transitions. The
// attribute sets are those of IBTA 11.2.4.2 (Modify Queue Pair) as Linux's
// ib_modify_qp_is_ok applies them, including the IB addressing attributes
// (P_Key index, port, Q_Key, AV) that RoCE applications still send.
//
// AttrCurState is accepted only where listed, which is only in transitions
// out of RTR, RTS, SQD and SQE; AttrEnSQDAsyncNotify only in RTS->SQD.
// Transitions into SQE, and into ERR on errors, are made by the QP itself,
// not by ModifyQP, and so are absent (except any->ERR, below).
var stateTable = [...][ib.QPSErr + 1]stateRule{
	ib.QPSReset: {
		// IBTA 11.2.4.2, any state to Reset (also 10.3.1: Reset can
		// be entered from any state).
		ib.QPSReset: {valid: true},
		// IBTA 11.2.4.2, Reset to Init.
		ib.QPSInit: {
			valid: true,
			req: [numTypeSlots]ib.AttrMask{
				rcSlot: ib.AttrPKeyIndex | ib.AttrPort | ib.AttrAccessFlags,
				ucSlot: ib.AttrPKeyIndex | ib.AttrPort | ib.AttrAccessFlags,
				udSlot: ib.AttrPKeyIndex | ib.AttrPort | ib.AttrQKey,
			},
		},
		// IBTA 11.2.4.2, any state to Error (10.3.1: Error can be
		// entered from any state). Linux's table leaves Reset->Error
		// out; rnicd follows the spec here.
		ib.QPSErr: {valid: true},
	},
	ib.QPSInit: {
		// IBTA 11.2.4.2, any state to Reset.
		ib.QPSReset: {valid: true},
		// IBTA 11.2.4.2, Init to Init: change attributes in Init.
		ib.QPSInit: {
			valid: true,
			opt: [numTypeSlots]ib.AttrMask{
				rcSlot: ib.AttrPKeyIndex | ib.AttrPort | ib.AttrAccessFlags,
				ucSlot: ib.AttrPKeyIndex | ib.AttrPort | ib.AttrAccessFlags,
				udSlot: ib.AttrPKeyIndex | ib.AttrPort | ib.AttrQKey,
			},
		},
		// IBTA 11.2.4.2, Init to RTR.
		ib.QPSRTR: {
			valid: true,
			req: [numTypeSlots]ib.AttrMask{
				rcSlot: ib.AttrAV | ib.AttrPathMTU | ib.AttrDestQPN | ib.AttrRQPSN |
					ib.AttrMaxDestRdAtomic | ib.AttrMinRNRTimer,
				ucSlot: ib.AttrAV | ib.AttrPathMTU | ib.AttrDestQPN | ib.AttrRQPSN,
			},
			opt: [numTypeSlots]ib.AttrMask{
				rcSlot: ib.AttrAltPath | ib.AttrAccessFlags | ib.AttrPKeyIndex,
				ucSlot: ib.AttrAltPath | ib.AttrAccessFlags | ib.AttrPKeyIndex,
				udSlot: ib.AttrPKeyIndex | ib.AttrQKey,
			},
		},
		// IBTA 11.2.4.2, any state to Error.
		ib.QPSErr: {valid: true},
	},
	ib.QPSRTR: {
		// IBTA 11.2.4.2, any state to Reset.
		ib.QPSReset: {valid: true},
		// IBTA 11.2.4.2, RTR to RTS.
		ib.QPSRTS: {
			valid: true,
			req: [numTypeSlots]ib.AttrMask{
				rcSlot: ib.AttrTimeout | ib.AttrRetryCnt | ib.AttrRNRRetry |
					ib.AttrSQPSN | ib.AttrMaxQPRdAtomic,
				ucSlot: ib.AttrSQPSN,
				udSlot: ib.AttrSQPSN,
			},
			opt: [numTypeSlots]ib.AttrMask{
				rcSlot: ib.AttrCurState | ib.AttrAltPath | ib.AttrAccessFlags |
					ib.AttrMinRNRTimer | ib.AttrPathMigState,
				ucSlot: ib.AttrCurState | ib.AttrAltPath | ib.AttrAccessFlags |
					ib.AttrPathMigState,
				udSlot: ib.AttrCurState | ib.AttrQKey,
			},
		},
		// IBTA 11.2.4.2, any state to Error.
		ib.QPSErr: {valid: true},
	},
	ib.QPSRTS: {
		// IBTA 11.2.4.2, any state to Reset.
		ib.QPSReset: {valid: true},
		// IBTA 11.2.4.2, RTS to RTS: change attributes in RTS.
		ib.QPSRTS: {
			valid: true,
			opt: [numTypeSlots]ib.AttrMask{
				rcSlot: ib.AttrCurState | ib.AttrAccessFlags | ib.AttrAltPath |
					ib.AttrPathMigState | ib.AttrMinRNRTimer,
				ucSlot: ib.AttrCurState | ib.AttrAccessFlags | ib.AttrAltPath |
					ib.AttrPathMigState,
				udSlot: ib.AttrCurState | ib.AttrQKey,
			},
		},
		// IBTA 11.2.4.2, RTS to SQD (10.3.1: SQ drain).
		ib.QPSSQD: {
			valid: true,
			opt: [numTypeSlots]ib.AttrMask{
				rcSlot: ib.AttrEnSQDAsyncNotify,
				ucSlot: ib.AttrEnSQDAsyncNotify,
				udSlot: ib.AttrEnSQDAsyncNotify,
			},
		},
		// IBTA 11.2.4.2, any state to Error.
		ib.QPSErr: {valid: true},
	},
	ib.QPSSQD: {
		// IBTA 11.2.4.2, any state to Reset.
		ib.QPSReset: {valid: true},
		// IBTA 11.2.4.2, SQD to RTS: resume sending.
		ib.QPSRTS: {
			valid: true,
			opt: [numTypeSlots]ib.AttrMask{
				rcSlot: ib.AttrCurState | ib.AttrAltPath | ib.AttrAccessFlags |
					ib.AttrMinRNRTimer | ib.AttrPathMigState,
				ucSlot: ib.AttrCurState | ib.AttrAltPath | ib.AttrAccessFlags |
					ib.AttrPathMigState,
				udSlot: ib.AttrCurState | ib.AttrQKey,
			},
		},
		// IBTA 11.2.4.2, SQD to SQD: change attributes while drained.
		ib.QPSSQD: {
			valid: true,
			opt: [numTypeSlots]ib.AttrMask{
				rcSlot: ib.AttrPort | ib.AttrAV | ib.AttrTimeout | ib.AttrRetryCnt |
					ib.AttrRNRRetry | ib.AttrMaxQPRdAtomic |
					ib.AttrMaxDestRdAtomic | ib.AttrAltPath |
					ib.AttrAccessFlags | ib.AttrPKeyIndex |
					ib.AttrMinRNRTimer | ib.AttrPathMigState,
				ucSlot: ib.AttrAV | ib.AttrAltPath | ib.AttrAccessFlags |
					ib.AttrPKeyIndex | ib.AttrPathMigState,
				udSlot: ib.AttrPKeyIndex | ib.AttrQKey,
			},
		},
		// IBTA 11.2.4.2, any state to Error.
		ib.QPSErr: {valid: true},
	},
	ib.QPSSQE: {
		// IBTA 11.2.4.2, any state to Reset.
		ib.QPSReset: {valid: true},
		// IBTA 11.2.4.2, SQE to RTS: recover from a send queue error
		// (10.3.1: SQE exists for UC and UD only; an RC QP never
		// enters it, and Linux lists no attributes for RC here).
		ib.QPSRTS: {
			valid: true,
			opt: [numTypeSlots]ib.AttrMask{
				ucSlot: ib.AttrCurState | ib.AttrAccessFlags,
				udSlot: ib.AttrCurState | ib.AttrQKey,
			},
		},
		// IBTA 11.2.4.2, any state to Error.
		ib.QPSErr: {valid: true},
	},
	ib.QPSErr: {
		// IBTA 11.2.4.2, any state to Reset.
		ib.QPSReset: {valid: true},
		// IBTA 11.2.4.2, any state to Error.
		ib.QPSErr: {valid: true},
	},
}

// CheckModify reports whether a QP of type t in state cur may move to state
// next when ModifyQP is given the attributes in mask. A mask without
// AttrState modifies attributes in the current state: it is checked as the
// transition cur->cur and next is ignored. CheckModify returns nil if the
// call is allowed, and otherwise a *TransitionError.
//
// Every transition needs its required attributes and accepts, besides those
// and AttrState, only its optional ones; transitions to RESET and ERR take
// no other attributes at all.
func CheckModify(t ib.QPType, cur, next ib.QPState, mask ib.AttrMask) error {
	if mask&ib.AttrState == 0 {
		next = cur
	}
	slot := typeSlot(t)
	if slot < 0 || int(cur) >= len(stateTable) || int(next) >= len(stateTable[cur]) {
		return &TransitionError{Type: t, From: cur, To: next, Invalid: true}
	}
	rule := &stateTable[cur][next]
	if !rule.valid {
		return &TransitionError{Type: t, From: cur, To: next, Invalid: true}
	}
	req, opt := xrcRule(t, cur, next, rule.req[slot], rule.opt[slot])
	missing := req &^ mask
	excess := mask &^ (req | opt | ib.AttrState)
	if missing == 0 && excess == 0 {
		return nil
	}
	return &TransitionError{Type: t, From: cur, To: next, Missing: missing, Excess: excess}
}
