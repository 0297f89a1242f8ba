package ib

import (
	"fmt"
	"math/bits"
	"strings"
)

// QPState is a QP state (IBTA 10.3.1). The values are those of libibverbs'
// enum ibv_qp_state, so they can cross the control socket unchanged.
type QPState uint8

// QP states, IBTA 10.3.1.
const (
	QPSReset QPState = iota // IBV_QPS_RESET
	QPSInit                 // IBV_QPS_INIT
	QPSRTR                  // IBV_QPS_RTR: ready to receive
	QPSRTS                  // IBV_QPS_RTS: ready to send
	QPSSQD                  // IBV_QPS_SQD: send queue drain(ing/ed)
	QPSSQE                  // IBV_QPS_SQE: send queue error (UC, UD)
	QPSErr                  // IBV_QPS_ERR
)

var stateNames = [...]string{
	QPSReset: "RESET",
	QPSInit:  "INIT",
	QPSRTR:   "RTR",
	QPSRTS:   "RTS",
	QPSSQD:   "SQD",
	QPSSQE:   "SQE",
	QPSErr:   "ERR",
}

// String returns the state's name as libibverbs prints it without the
// IBV_QPS_ prefix: "RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR".
func (s QPState) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// QPType is the transport service of a QP. The values are those of
// libibverbs' enum ibv_qp_type.
type QPType uint8

// QP transport services supported by rnicd.
const (
	QPTypeRC QPType = 2 // IBV_QPT_RC: reliable connected
	QPTypeUC QPType = 3 // IBV_QPT_UC: unreliable connected
	QPTypeUD QPType = 4 // IBV_QPT_UD: unreliable datagram
)

// String returns "RC", "UC" or "UD".
func (t QPType) String() string {
	switch t {
	case QPTypeRC:
		return "RC"
	case QPTypeUC:
		return "UC"
	case QPTypeUD:
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

// MTU is a path MTU in the verbs encoding (ibv_mtu).
type MTU uint8

const (
	MTU256  MTU = 1
	MTU512  MTU = 2
	MTU1024 MTU = 3
	MTU2048 MTU = 4
	MTU4096 MTU = 5
)

// Bytes is the MTU in bytes, 0 if m is not a valid MTU.
func (m MTU) Bytes() int {
	if m < MTU256 || m > MTU4096 {
		return 0
	}
	return 128 << m
}

func (m MTU) String() string { return fmt.Sprintf("%d", m.Bytes()) }

// MTUFromBytes is the MTU of n bytes, 0 if n is not 256..4096 in powers of two.
func MTUFromBytes(n int) MTU {
	for m := MTU256; m <= MTU4096; m++ {
		if m.Bytes() == n {
			return m
		}
	}
	return 0
}

// Limits of the device (ibv_query_device), as rxe gives them where rxe has
// one.
const (
	MaxQPWR       = 16384
	MaxSGE        = 32
	MaxInlineData = 1024
	MaxRdAtomic   = 128 // rxe: max_qp_rd_atom
	MaxMsgSize    = 1 << 31
	// GIDTableLen is the port's GID table length (gid_tbl_len): the
	// port's one RoCEv2 GID at index 0 and 1, where rxe puts an IPv4
	// address's v1 and v2 GIDs, so the -g 1 / -x 1 habit of rxe hosts
	// works. ib_core refuses an sgid_index at or past it (EINVAL).
	GIDTableLen = 2
)

// QPCap are the sizes of a QP's queues (ibv_qp_cap).
type QPCap struct {
	MaxSendWR, MaxRecvWR   int
	MaxSendSGE, MaxRecvSGE int
	MaxInlineData          int
}

// QPAttr are a QP's attributes (ibv_qp_attr) as ModifyQP sets them.
type QPAttr struct {
	State           QPState
	PathMTU         MTU
	QKey            uint32
	RQPSN           uint32
	SQPSN           uint32
	DestQPN         uint32
	AccessFlags     Access // remote access the QP allows
	PKeyIndex       uint16
	PortNum         uint8
	AH              AH
	Timeout         uint8 // local ACK timeout: 4.096 us * 2^Timeout, 0 = none
	RetryCnt        uint8 // 7 = retry forever
	RNRRetry        uint8 // 7 = retry forever
	MinRNRTimer     uint8 // timer code the responder puts in its RNR NAKs
	MaxRdAtomic     uint8 // outstanding READ/atomic as requester
	MaxDestRdAtomic uint8 // outstanding READ/atomic as responder
}
