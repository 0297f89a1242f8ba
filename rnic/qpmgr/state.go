package qpmgr

import (
	"fmt"
	"math/bits"
	"strings"
)

// State is a QP state (IBTA 10.3.1). The values are those of libibverbs'
// enum ibv_qp_state, so they can cross the control socket unchanged.
type State uint8

// QP states, IBTA 10.3.1.
const (
	StateReset State = iota // IBV_QPS_RESET
	StateInit               // IBV_QPS_INIT
	StateRTR                // IBV_QPS_RTR: ready to receive
	StateRTS                // IBV_QPS_RTS: ready to send
	StateSQD                // IBV_QPS_SQD: send queue drain(ing/ed)
	StateSQE                // IBV_QPS_SQE: send queue error (UC, UD)
	StateErr                // IBV_QPS_ERR
)

var stateNames = [...]string{
	StateReset: "RESET",
	StateInit:  "INIT",
	StateRTR:   "RTR",
	StateRTS:   "RTS",
	StateSQD:   "SQD",
	StateSQE:   "SQE",
	StateErr:   "ERR",
}

// String returns the state's name as libibverbs prints it without the
// IBV_QPS_ prefix: "RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR".
func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// Type is the transport service of a QP. The values are those of
// libibverbs' enum ibv_qp_type.
type Type uint8

// QP transport services supported by rnicd.
const (
	TypeRC Type = 2 // IBV_QPT_RC: reliable connected
	TypeUC Type = 3 // IBV_QPT_UC: unreliable connected
	TypeUD Type = 4 // IBV_QPT_UD: unreliable datagram
)

// String returns "RC", "UC" or "UD".
func (t Type) String() string {
	switch t {
	case TypeRC:
		return "RC"
	case TypeUC:
		return "UC"
	case TypeUD:
		return "UD"
	}
	return fmt.Sprintf("Type(%d)", uint8(t))
}

// AttrMask says which attributes a ModifyQP call sets. The values are those
// of libibverbs' enum ibv_qp_attr_mask.
type AttrMask uint32

// ModifyQP attribute bits (IBV_QP_*).
const (
	AttrState            AttrMask = 1 << 0
	AttrCurState         AttrMask = 1 << 1
	AttrEnSQDAsyncNotify AttrMask = 1 << 2
	AttrAccessFlags      AttrMask = 1 << 3
	AttrPKeyIndex        AttrMask = 1 << 4
	AttrPort             AttrMask = 1 << 5
	AttrQKey             AttrMask = 1 << 6
	AttrAV               AttrMask = 1 << 7
	AttrPathMTU          AttrMask = 1 << 8
	AttrTimeout          AttrMask = 1 << 9
	AttrRetryCnt         AttrMask = 1 << 10
	AttrRNRRetry         AttrMask = 1 << 11
	AttrRQPSN            AttrMask = 1 << 12
	AttrMaxQPRdAtomic    AttrMask = 1 << 13
	AttrAltPath          AttrMask = 1 << 14
	AttrMinRNRTimer      AttrMask = 1 << 15
	AttrSQPSN            AttrMask = 1 << 16
	AttrMaxDestRdAtomic  AttrMask = 1 << 17
	AttrPathMigState     AttrMask = 1 << 18
	AttrCap              AttrMask = 1 << 19
	AttrDestQPN          AttrMask = 1 << 20
	AttrRateLimit        AttrMask = 1 << 25
)

// attrNames holds the libibverbs name (IBV_QP_ prefix dropped) of each
// defined bit, by bit number. Bits 21..24 are unused by libibverbs.
var attrNames = [...]string{
	0:  "STATE",
	1:  "CUR_STATE",
	2:  "EN_SQD_ASYNC_NOTIFY",
	3:  "ACCESS_FLAGS",
	4:  "PKEY_INDEX",
	5:  "PORT",
	6:  "QKEY",
	7:  "AV",
	8:  "PATH_MTU",
	9:  "TIMEOUT",
	10: "RETRY_CNT",
	11: "RNR_RETRY",
	12: "RQ_PSN",
	13: "MAX_QP_RD_ATOMIC",
	14: "ALT_PATH",
	15: "MIN_RNR_TIMER",
	16: "SQ_PSN",
	17: "MAX_DEST_RD_ATOMIC",
	18: "PATH_MIG_STATE",
	19: "CAP",
	20: "DEST_QPN",
	25: "RATE_LIMIT",
}

// String lists the bits of m by their libibverbs names without the IBV_QP_
// prefix, lowest bit first, joined by "|" (for example "STATE|PATH_MTU").
// Bits libibverbs does not define are printed in hex; an empty mask is "0".
func (m AttrMask) String() string {
	if m == 0 {
		return "0"
	}
	var b strings.Builder
	var unknown AttrMask
	for rest := m; rest != 0; rest &= rest - 1 {
		i := bits.TrailingZeros32(uint32(rest))
		if i >= len(attrNames) || attrNames[i] == "" {
			unknown |= 1 << i
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('|')
		}
		b.WriteString(attrNames[i])
	}
	if unknown != 0 {
		if b.Len() > 0 {
			b.WriteByte('|')
		}
		fmt.Fprintf(&b, "%#x", uint32(unknown))
	}
	return b.String()
}

// TransitionError says why CheckModify refused a ModifyQP call.
type TransitionError struct {
	Type     Type
	From, To State
	Missing  AttrMask // required attributes not given
	Excess   AttrMask // attributes given that the transition does not allow
	Invalid  bool     // the transition itself is not allowed
}

// Error names the transition and, if it is allowed at all, the attributes
// that are missing or not allowed.
func (e *TransitionError) Error() string {
	if e.Invalid {
		switch {
		case e.Type.slot() < 0:
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

// slot returns t's index in a transition's per-type masks, or -1 if t is
// not a type rnicd supports.
func (t Type) slot() int {
	switch t {
	case TypeRC:
		return rcSlot
	case TypeUC:
		return ucSlot
	case TypeUD:
		return udSlot
	}
	return -1
}

// stateRule describes one [from][to] transition: whether ModifyQP may make
// it, and, per transport type, which attributes it requires (req) and which
// it accepts besides those and AttrState (opt).
type stateRule struct {
	valid bool
	req   [numTypeSlots]AttrMask
	opt   [numTypeSlots]AttrMask
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
var stateTable = [...][StateErr + 1]stateRule{
	StateReset: {
		// IBTA 11.2.4.2, any state to Reset (also 10.3.1: Reset can
		// be entered from any state).
		StateReset: {valid: true},
		// IBTA 11.2.4.2, Reset to Init.
		StateInit: {
			valid: true,
			req: [numTypeSlots]AttrMask{
				rcSlot: AttrPKeyIndex | AttrPort | AttrAccessFlags,
				ucSlot: AttrPKeyIndex | AttrPort | AttrAccessFlags,
				udSlot: AttrPKeyIndex | AttrPort | AttrQKey,
			},
		},
		// IBTA 11.2.4.2, any state to Error (10.3.1: Error can be
		// entered from any state). Linux's table leaves Reset->Error
		// out; rnicd follows the spec here.
		StateErr: {valid: true},
	},
	StateInit: {
		// IBTA 11.2.4.2, any state to Reset.
		StateReset: {valid: true},
		// IBTA 11.2.4.2, Init to Init: change attributes in Init.
		StateInit: {
			valid: true,
			opt: [numTypeSlots]AttrMask{
				rcSlot: AttrPKeyIndex | AttrPort | AttrAccessFlags,
				ucSlot: AttrPKeyIndex | AttrPort | AttrAccessFlags,
				udSlot: AttrPKeyIndex | AttrPort | AttrQKey,
			},
		},
		// IBTA 11.2.4.2, Init to RTR.
		StateRTR: {
			valid: true,
			req: [numTypeSlots]AttrMask{
				rcSlot: AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN |
					AttrMaxDestRdAtomic | AttrMinRNRTimer,
				ucSlot: AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN,
			},
			opt: [numTypeSlots]AttrMask{
				rcSlot: AttrAltPath | AttrAccessFlags | AttrPKeyIndex,
				ucSlot: AttrAltPath | AttrAccessFlags | AttrPKeyIndex,
				udSlot: AttrPKeyIndex | AttrQKey,
			},
		},
		// IBTA 11.2.4.2, any state to Error.
		StateErr: {valid: true},
	},
	StateRTR: {
		// IBTA 11.2.4.2, any state to Reset.
		StateReset: {valid: true},
		// IBTA 11.2.4.2, RTR to RTS.
		StateRTS: {
			valid: true,
			req: [numTypeSlots]AttrMask{
				rcSlot: AttrTimeout | AttrRetryCnt | AttrRNRRetry |
					AttrSQPSN | AttrMaxQPRdAtomic,
				ucSlot: AttrSQPSN,
				udSlot: AttrSQPSN,
			},
			opt: [numTypeSlots]AttrMask{
				rcSlot: AttrCurState | AttrAltPath | AttrAccessFlags |
					AttrMinRNRTimer | AttrPathMigState,
				ucSlot: AttrCurState | AttrAltPath | AttrAccessFlags |
					AttrPathMigState,
				udSlot: AttrCurState | AttrQKey,
			},
		},
		// IBTA 11.2.4.2, any state to Error.
		StateErr: {valid: true},
	},
	StateRTS: {
		// IBTA 11.2.4.2, any state to Reset.
		StateReset: {valid: true},
		// IBTA 11.2.4.2, RTS to RTS: change attributes in RTS.
		StateRTS: {
			valid: true,
			opt: [numTypeSlots]AttrMask{
				rcSlot: AttrCurState | AttrAccessFlags | AttrAltPath |
					AttrPathMigState | AttrMinRNRTimer,
				ucSlot: AttrCurState | AttrAccessFlags | AttrAltPath |
					AttrPathMigState,
				udSlot: AttrCurState | AttrQKey,
			},
		},
		// IBTA 11.2.4.2, RTS to SQD (10.3.1: SQ drain).
		StateSQD: {
			valid: true,
			opt: [numTypeSlots]AttrMask{
				rcSlot: AttrEnSQDAsyncNotify,
				ucSlot: AttrEnSQDAsyncNotify,
				udSlot: AttrEnSQDAsyncNotify,
			},
		},
		// IBTA 11.2.4.2, any state to Error.
		StateErr: {valid: true},
	},
	StateSQD: {
		// IBTA 11.2.4.2, any state to Reset.
		StateReset: {valid: true},
		// IBTA 11.2.4.2, SQD to RTS: resume sending.
		StateRTS: {
			valid: true,
			opt: [numTypeSlots]AttrMask{
				rcSlot: AttrCurState | AttrAltPath | AttrAccessFlags |
					AttrMinRNRTimer | AttrPathMigState,
				ucSlot: AttrCurState | AttrAltPath | AttrAccessFlags |
					AttrPathMigState,
				udSlot: AttrCurState | AttrQKey,
			},
		},
		// IBTA 11.2.4.2, SQD to SQD: change attributes while drained.
		StateSQD: {
			valid: true,
			opt: [numTypeSlots]AttrMask{
				rcSlot: AttrPort | AttrAV | AttrTimeout | AttrRetryCnt |
					AttrRNRRetry | AttrMaxQPRdAtomic |
					AttrMaxDestRdAtomic | AttrAltPath |
					AttrAccessFlags | AttrPKeyIndex |
					AttrMinRNRTimer | AttrPathMigState,
				ucSlot: AttrAV | AttrAltPath | AttrAccessFlags |
					AttrPKeyIndex | AttrPathMigState,
				udSlot: AttrPKeyIndex | AttrQKey,
			},
		},
		// IBTA 11.2.4.2, any state to Error.
		StateErr: {valid: true},
	},
	StateSQE: {
		// IBTA 11.2.4.2, any state to Reset.
		StateReset: {valid: true},
		// IBTA 11.2.4.2, SQE to RTS: recover from a send queue error
		// (10.3.1: SQE exists for UC and UD only; an RC QP never
		// enters it, and Linux lists no attributes for RC here).
		StateRTS: {
			valid: true,
			opt: [numTypeSlots]AttrMask{
				ucSlot: AttrCurState | AttrAccessFlags,
				udSlot: AttrCurState | AttrQKey,
			},
		},
		// IBTA 11.2.4.2, any state to Error.
		StateErr: {valid: true},
	},
	StateErr: {
		// IBTA 11.2.4.2, any state to Reset.
		StateReset: {valid: true},
		// IBTA 11.2.4.2, any state to Error.
		StateErr: {valid: true},
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
func CheckModify(t Type, cur, next State, mask AttrMask) error {
	if mask&AttrState == 0 {
		next = cur
	}
	slot := t.slot()
	if slot < 0 || int(cur) >= len(stateTable) || int(next) >= len(stateTable[cur]) {
		return &TransitionError{Type: t, From: cur, To: next, Invalid: true}
	}
	rule := &stateTable[cur][next]
	if !rule.valid {
		return &TransitionError{Type: t, From: cur, To: next, Invalid: true}
	}
	req, opt := rule.req[slot], rule.opt[slot]
	missing := req &^ mask
	excess := mask &^ (req | opt | AttrState)
	if missing == 0 && excess == 0 {
		return nil
	}
	return &TransitionError{Type: t, From: cur, To: next, Missing: missing, Excess: excess}
}
