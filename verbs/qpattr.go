package verbs

import (
	"github.com/rnicd/rnicd/ib"
)

// QPType is the transport service of a QP (enum ibv_qp_type).
type QPType = ib.QPType

// QP types (IBV_QPT_*).
const (
	QPTypeRC = ib.QPTypeRC // IBV_QPT_RC: reliable connected: every verb, acknowledged, retried
	QPTypeUC = ib.QPTypeUC // IBV_QPT_UC: unreliable connected: SEND and WRITE, a lost packet loses its message
	QPTypeUD = ib.QPTypeUD // IBV_QPT_UD: unreliable datagram: SENDs of at most one MTU, to any QP (SendWR.AH)
)

// QPState is a QP's state (enum ibv_qp_state, IBTA 10.3.1). A QP is created
// in RESET and moved by QP.Modify: INIT, then RTR (it receives), then RTS
// (it sends). An error moves it to ERR.
type QPState = ib.QPState

// QP states (IBV_QPS_*).
const (
	QPSReset = ib.QPSReset // IBV_QPS_RESET
	QPSInit  = ib.QPSInit  // IBV_QPS_INIT
	QPSRTR   = ib.QPSRTR   // IBV_QPS_RTR: ready to receive
	QPSRTS   = ib.QPSRTS   // IBV_QPS_RTS: ready to send
	QPSSQD   = ib.QPSSQD   // IBV_QPS_SQD: send queue drained
	QPSSQE   = ib.QPSSQE   // IBV_QPS_SQE: send queue error (UC, UD)
	QPSErr   = ib.QPSErr   // IBV_QPS_ERR
)

// MTU is a path MTU in the verbs encoding (enum ibv_mtu).
type MTU = ib.MTU

// Path MTUs (IBV_MTU_*). PortAttr.ActiveMTU is the largest a QP may use.
const (
	MTU256  = ib.MTU256
	MTU512  = ib.MTU512
	MTU1024 = ib.MTU1024
	MTU2048 = ib.MTU2048
	MTU4096 = ib.MTU4096
)

// MTUFromBytes is the MTU of n bytes, 0 if n is not 256..4096 in powers of two.
func MTUFromBytes(n int) MTU { return ib.MTUFromBytes(n) }

// AttrMask says which fields of a QPAttr QP.Modify sets (enum
// ibv_qp_attr_mask).
type AttrMask = ib.AttrMask

// QPAttr fields (IBV_QP_*). Each state change needs its own set (IBTA
// 11.2.4.2); for RC: RESET->INIT AttrState|AttrPKeyIndex|AttrPort|
// AttrAccessFlags; INIT->RTR AttrState|AttrAV|AttrPathMTU|AttrDestQPN|
// AttrRQPSN|AttrMaxDestRdAtomic|AttrMinRNRTimer; RTR->RTS AttrState|
// AttrSQPSN|AttrTimeout|AttrRetryCnt|AttrRNRRetry|AttrMaxQPRdAtomic.
const (
	AttrState            = ib.AttrState            // IBV_QP_STATE: State
	AttrCurState         = ib.AttrCurState         // IBV_QP_CUR_STATE
	AttrEnSQDAsyncNotify = ib.AttrEnSQDAsyncNotify // IBV_QP_EN_SQD_ASYNC_NOTIFY
	AttrAccessFlags      = ib.AttrAccessFlags      // IBV_QP_ACCESS_FLAGS: AccessFlags
	AttrPKeyIndex        = ib.AttrPKeyIndex        // IBV_QP_PKEY_INDEX: PKeyIndex
	AttrPort             = ib.AttrPort             // IBV_QP_PORT: PortNum
	AttrQKey             = ib.AttrQKey             // IBV_QP_QKEY: QKey (UD)
	AttrAV               = ib.AttrAV               // IBV_QP_AV: AH, the path to the peer
	AttrPathMTU          = ib.AttrPathMTU          // IBV_QP_PATH_MTU: PathMTU
	AttrTimeout          = ib.AttrTimeout          // IBV_QP_TIMEOUT: Timeout
	AttrRetryCnt         = ib.AttrRetryCnt         // IBV_QP_RETRY_CNT: RetryCnt
	AttrRNRRetry         = ib.AttrRNRRetry         // IBV_QP_RNR_RETRY: RNRRetry
	AttrRQPSN            = ib.AttrRQPSN            // IBV_QP_RQ_PSN: RQPSN
	AttrMaxQPRdAtomic    = ib.AttrMaxQPRdAtomic    // IBV_QP_MAX_QP_RD_ATOMIC: MaxRdAtomic
	AttrAltPath          = ib.AttrAltPath          // IBV_QP_ALT_PATH
	AttrMinRNRTimer      = ib.AttrMinRNRTimer      // IBV_QP_MIN_RNR_TIMER: MinRNRTimer
	AttrSQPSN            = ib.AttrSQPSN            // IBV_QP_SQ_PSN: SQPSN
	AttrMaxDestRdAtomic  = ib.AttrMaxDestRdAtomic  // IBV_QP_MAX_DEST_RD_ATOMIC: MaxDestRdAtomic
	AttrPathMigState     = ib.AttrPathMigState     // IBV_QP_PATH_MIG_STATE
	AttrCap              = ib.AttrCap              // IBV_QP_CAP
	AttrDestQPN          = ib.AttrDestQPN          // IBV_QP_DEST_QPN: DestQPN
	AttrRateLimit        = ib.AttrRateLimit        // IBV_QP_RATE_LIMIT
)

// QPCap are the sizes of a QP's queues (struct ibv_qp_cap): asked for in
// QPInitAttr, granted in QP.Cap.
type QPCap = ib.QPCap

// QPAttr are a QP's attributes (struct ibv_qp_attr), set by QP.Modify
// (the fields its AttrMask names) and read by QP.Query; go doc ib.QPAttr
// says what each field does in which transition.
type QPAttr = ib.QPAttr
