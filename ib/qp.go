package ib

import (
	"fmt"
	"math/bits"
	"strings"
)

// QPState is a QP's state (enum ibv_qp_state, IBTA 10.3.1). A QP is created
// in RESET and moved by ModifyQP: INIT, then RTR (it receives), then RTS
// (it sends). An error moves it to ERR. The values are libibverbs', so
// they cross the control socket unchanged.
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

// QPType is the transport service of a QP (enum ibv_qp_type, with its
// values).
type QPType uint8

// QP types (IBV_QPT_*) rnicd supports.
const (
	QPTypeRC QPType = 2 // IBV_QPT_RC: reliable connected: every verb, acknowledged, retried
	QPTypeUC QPType = 3 // IBV_QPT_UC: unreliable connected: SEND and WRITE, a lost packet loses its message
	QPTypeUD QPType = 4 // IBV_QPT_UD: unreliable datagram: SENDs of at most one MTU, to any QP (SendWR.AH)
	// IBV_QPT_XRC_SEND: an XRC initiator (IBTA annex A14): an RC send
	// queue whose messages each name an XRC SRQ at the target
	// (SendWR.RemoteSRQN); it has no receive side.
	QPTypeXRCSend QPType = 9
	// IBV_QPT_XRC_RECV: an XRC target: the RC responder of an XRC
	// domain, whose messages land in the domain's SRQ each names.
	QPTypeXRCRecv QPType = 10
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
	case QPTypeXRCSend:
		return "XRC_SEND"
	case QPTypeXRCRecv:
		return "XRC_RECV"
	}
	return fmt.Sprintf("Type(%d)", uint8(t))
}

// AttrMask says which fields of a QPAttr a ModifyQP call sets (enum
// ibv_qp_attr_mask, with its values).
type AttrMask uint32

// QPAttr fields (IBV_QP_*). Each state change needs its own set (IBTA
// 11.2.4.2); for RC: RESET->INIT AttrState|AttrPKeyIndex|AttrPort|
// AttrAccessFlags; INIT->RTR AttrState|AttrAV|AttrPathMTU|AttrDestQPN|
// AttrRQPSN|AttrMaxDestRdAtomic|AttrMinRNRTimer; RTR->RTS AttrState|
// AttrSQPSN|AttrTimeout|AttrRetryCnt|AttrRNRRetry|AttrMaxQPRdAtomic.
const (
	AttrState            AttrMask = 1 << 0  // IBV_QP_STATE: State
	AttrCurState         AttrMask = 1 << 1  // IBV_QP_CUR_STATE
	AttrEnSQDAsyncNotify AttrMask = 1 << 2  // IBV_QP_EN_SQD_ASYNC_NOTIFY
	AttrAccessFlags      AttrMask = 1 << 3  // IBV_QP_ACCESS_FLAGS: AccessFlags
	AttrPKeyIndex        AttrMask = 1 << 4  // IBV_QP_PKEY_INDEX: PKeyIndex
	AttrPort             AttrMask = 1 << 5  // IBV_QP_PORT: PortNum
	AttrQKey             AttrMask = 1 << 6  // IBV_QP_QKEY: QKey (UD)
	AttrAV               AttrMask = 1 << 7  // IBV_QP_AV: AH, the path to the peer
	AttrPathMTU          AttrMask = 1 << 8  // IBV_QP_PATH_MTU: PathMTU
	AttrTimeout          AttrMask = 1 << 9  // IBV_QP_TIMEOUT: Timeout
	AttrRetryCnt         AttrMask = 1 << 10 // IBV_QP_RETRY_CNT: RetryCnt
	AttrRNRRetry         AttrMask = 1 << 11 // IBV_QP_RNR_RETRY: RNRRetry
	AttrRQPSN            AttrMask = 1 << 12 // IBV_QP_RQ_PSN: RQPSN
	AttrMaxQPRdAtomic    AttrMask = 1 << 13 // IBV_QP_MAX_QP_RD_ATOMIC: MaxRdAtomic
	AttrAltPath          AttrMask = 1 << 14 // IBV_QP_ALT_PATH
	AttrMinRNRTimer      AttrMask = 1 << 15 // IBV_QP_MIN_RNR_TIMER: MinRNRTimer
	AttrSQPSN            AttrMask = 1 << 16 // IBV_QP_SQ_PSN: SQPSN
	AttrMaxDestRdAtomic  AttrMask = 1 << 17 // IBV_QP_MAX_DEST_RD_ATOMIC: MaxDestRdAtomic
	AttrPathMigState     AttrMask = 1 << 18 // IBV_QP_PATH_MIG_STATE
	AttrCap              AttrMask = 1 << 19 // IBV_QP_CAP
	AttrDestQPN          AttrMask = 1 << 20 // IBV_QP_DEST_QPN: DestQPN
	AttrRateLimit        AttrMask = 1 << 25 // IBV_QP_RATE_LIMIT
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

// MTU is a path MTU in the verbs encoding (enum ibv_mtu).
type MTU uint8

// Path MTUs (IBV_MTU_*). verbs.PortAttr.ActiveMTU is the largest a QP may
// use.
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

// String is the MTU in bytes, e.g. "1024".
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

// QPCap are the sizes of a QP's queues (struct ibv_qp_cap): asked for in
// verbs.QPInitAttr, granted in verbs.QP.Cap.
type QPCap struct {
	MaxSendWR, MaxRecvWR   int // WRs each queue holds
	MaxSendSGE, MaxRecvSGE int // SGEs of one WR
	MaxInlineData          int // bytes of SendWR.InlineData
}

// QPAttr are a QP's attributes (struct ibv_qp_attr), set by ModifyQP (the
// fields its AttrMask names) and read by QueryQP.
type QPAttr struct {
	State   QPState // the state to move to
	PathMTU MTU     // RTR: at most the port's ActiveMTU; both ends must agree
	QKey    uint32  // UD: the Q_Key a sender must present
	RQPSN   uint32  // RTR: the first PSN the peer will send (its SQPSN)
	SQPSN   uint32  // RTS: the first PSN this QP sends (the peer's RQPSN)
	DestQPN uint32  // RTR, connected QPs: the peer's QP number
	// AccessFlags are the remote operations the QP accepts
	// (AccessRemoteWrite, ...Read, ...Atomic); the MR must allow them too.
	AccessFlags Access
	PKeyIndex   uint16
	PortNum     uint8 // 1: the device has one port
	AH          AH    // RTR, connected QPs: the path to the peer (its GID)
	// Timeout is the local ACK timeout, 4.096 us * 2^Timeout (14: 67 ms);
	// 0 waits forever.
	Timeout uint8
	// RetryCnt and RNRRetry are how often a request is sent again
	// without an answer and after "receiver not ready"; 7 is forever.
	RetryCnt uint8
	RNRRetry uint8
	// MinRNRTimer is the wait the responder asks for in its RNR NAKs
	// (IBTA table 45 code; 12: 0.64 ms).
	MinRNRTimer uint8
	// MaxRdAtomic and MaxDestRdAtomic are the READs and atomics
	// outstanding at once as requester and as responder.
	MaxRdAtomic     uint8
	MaxDestRdAtomic uint8
}
