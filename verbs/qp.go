package verbs

import (
	"net/netip"

	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/wire/ibudp"
)

// QPType is the transport service of a QP (enum ibv_qp_type).
type QPType uint8

// QP types (IBV_QPT_*).
const (
	QPTypeRC QPType = QPType(ib.QPTypeRC) // IBV_QPT_RC: reliable connected: every verb, acknowledged, retried
	QPTypeUC QPType = QPType(ib.QPTypeUC) // IBV_QPT_UC: unreliable connected: SEND and WRITE, a lost packet loses its message
	QPTypeUD QPType = QPType(ib.QPTypeUD) // IBV_QPT_UD: unreliable datagram: SENDs of at most one MTU, to any QP (SendWR.AH)
)

// String is "RC", "UC" or "UD".
func (t QPType) String() string { return ib.QPType(t).String() }

// QPState is a QP's state (enum ibv_qp_state, IBTA 10.3.1). A QP is created
// in RESET and moved by QP.Modify: INIT, then RTR (it receives), then RTS
// (it sends). An error moves it to ERR.
type QPState uint8

// QP states (IBV_QPS_*).
const (
	QPSReset QPState = QPState(ib.QPSReset) // IBV_QPS_RESET
	QPSInit  QPState = QPState(ib.QPSInit)  // IBV_QPS_INIT
	QPSRTR   QPState = QPState(ib.QPSRTR)   // IBV_QPS_RTR: ready to receive
	QPSRTS   QPState = QPState(ib.QPSRTS)   // IBV_QPS_RTS: ready to send
	QPSSQD   QPState = QPState(ib.QPSSQD)   // IBV_QPS_SQD: send queue drained
	QPSSQE   QPState = QPState(ib.QPSSQE)   // IBV_QPS_SQE: send queue error (UC, UD)
	QPSErr   QPState = QPState(ib.QPSErr)   // IBV_QPS_ERR
)

// String is the state's libibverbs name without IBV_QPS_, e.g. "RTS".
func (s QPState) String() string { return ib.QPState(s).String() }

// MTU is a path MTU in the verbs encoding (enum ibv_mtu).
type MTU uint8

// Path MTUs (IBV_MTU_*). PortAttr.ActiveMTU is the largest a QP may use.
const (
	MTU256  MTU = MTU(ib.MTU256)
	MTU512  MTU = MTU(ib.MTU512)
	MTU1024 MTU = MTU(ib.MTU1024)
	MTU2048 MTU = MTU(ib.MTU2048)
	MTU4096 MTU = MTU(ib.MTU4096)
)

// Bytes is the MTU in bytes, 0 if m is not a valid MTU.
func (m MTU) Bytes() int { return ib.MTU(m).Bytes() }

// String is the MTU in bytes, e.g. "1024".
func (m MTU) String() string { return ib.MTU(m).String() }

// MTUFromBytes is the MTU of n bytes, 0 if n is not 256..4096 in powers of two.
func MTUFromBytes(n int) MTU { return MTU(ib.MTUFromBytes(n)) }

// Access is a set of memory access flags (enum ibv_access_flags): what an
// MR lets the NIC do with its memory (PD.RegMR), and what remote
// operations a QP accepts (QPAttr.AccessFlags).
type Access uint32

// Access flags (IBV_ACCESS_*). A region the peer may write or use atomics on
// must be locally writable too.
const (
	AccessLocalWrite   Access = Access(ib.AccessLocalWrite)   // IBV_ACCESS_LOCAL_WRITE: the NIC may write it for local work (receives, READ results)
	AccessRemoteWrite  Access = Access(ib.AccessRemoteWrite)  // IBV_ACCESS_REMOTE_WRITE: RDMA WRITE from the peer
	AccessRemoteRead   Access = Access(ib.AccessRemoteRead)   // IBV_ACCESS_REMOTE_READ: RDMA READ from the peer
	AccessRemoteAtomic Access = Access(ib.AccessRemoteAtomic) // IBV_ACCESS_REMOTE_ATOMIC: atomics from the peer
	AccessMWBind       Access = Access(ib.AccessMWBind)       // IBV_ACCESS_MW_BIND: accepted; rnicd has no memory windows
	AccessZeroBased    Access = Access(ib.AccessZeroBased)    // IBV_ACCESS_ZERO_BASED: the MR answers to addresses from 0
	AccessOnDemand     Access = Access(ib.AccessOnDemand)     // IBV_ACCESS_ON_DEMAND: accepted; memory here is always resident
)

// String names the flags as libibverbs does without IBV_ACCESS_, joined by
// "|", e.g. "LOCAL_WRITE|REMOTE_READ".
func (a Access) String() string { return ib.Access(a).String() }

// AttrMask says which fields of a QPAttr QP.Modify sets (enum
// ibv_qp_attr_mask).
type AttrMask uint32

// QPAttr fields (IBV_QP_*). Each state change needs its own set (IBTA
// 11.2.4.2); for RC: RESET->INIT AttrState|AttrPKeyIndex|AttrPort|
// AttrAccessFlags; INIT->RTR AttrState|AttrAV|AttrPathMTU|AttrDestQPN|
// AttrRQPSN|AttrMaxDestRdAtomic|AttrMinRNRTimer; RTR->RTS AttrState|
// AttrSQPSN|AttrTimeout|AttrRetryCnt|AttrRNRRetry|AttrMaxQPRdAtomic.
const (
	AttrState            AttrMask = AttrMask(ib.AttrState)            // IBV_QP_STATE: State
	AttrCurState         AttrMask = AttrMask(ib.AttrCurState)         // IBV_QP_CUR_STATE
	AttrEnSQDAsyncNotify AttrMask = AttrMask(ib.AttrEnSQDAsyncNotify) // IBV_QP_EN_SQD_ASYNC_NOTIFY
	AttrAccessFlags      AttrMask = AttrMask(ib.AttrAccessFlags)      // IBV_QP_ACCESS_FLAGS: AccessFlags
	AttrPKeyIndex        AttrMask = AttrMask(ib.AttrPKeyIndex)        // IBV_QP_PKEY_INDEX: PKeyIndex
	AttrPort             AttrMask = AttrMask(ib.AttrPort)             // IBV_QP_PORT: PortNum
	AttrQKey             AttrMask = AttrMask(ib.AttrQKey)             // IBV_QP_QKEY: QKey (UD)
	AttrAV               AttrMask = AttrMask(ib.AttrAV)               // IBV_QP_AV: AH, the path to the peer
	AttrPathMTU          AttrMask = AttrMask(ib.AttrPathMTU)          // IBV_QP_PATH_MTU: PathMTU
	AttrTimeout          AttrMask = AttrMask(ib.AttrTimeout)          // IBV_QP_TIMEOUT: Timeout
	AttrRetryCnt         AttrMask = AttrMask(ib.AttrRetryCnt)         // IBV_QP_RETRY_CNT: RetryCnt
	AttrRNRRetry         AttrMask = AttrMask(ib.AttrRNRRetry)         // IBV_QP_RNR_RETRY: RNRRetry
	AttrRQPSN            AttrMask = AttrMask(ib.AttrRQPSN)            // IBV_QP_RQ_PSN: RQPSN
	AttrMaxQPRdAtomic    AttrMask = AttrMask(ib.AttrMaxQPRdAtomic)    // IBV_QP_MAX_QP_RD_ATOMIC: MaxRdAtomic
	AttrAltPath          AttrMask = AttrMask(ib.AttrAltPath)          // IBV_QP_ALT_PATH
	AttrMinRNRTimer      AttrMask = AttrMask(ib.AttrMinRNRTimer)      // IBV_QP_MIN_RNR_TIMER: MinRNRTimer
	AttrSQPSN            AttrMask = AttrMask(ib.AttrSQPSN)            // IBV_QP_SQ_PSN: SQPSN
	AttrMaxDestRdAtomic  AttrMask = AttrMask(ib.AttrMaxDestRdAtomic)  // IBV_QP_MAX_DEST_RD_ATOMIC: MaxDestRdAtomic
	AttrPathMigState     AttrMask = AttrMask(ib.AttrPathMigState)     // IBV_QP_PATH_MIG_STATE
	AttrCap              AttrMask = AttrMask(ib.AttrCap)              // IBV_QP_CAP
	AttrDestQPN          AttrMask = AttrMask(ib.AttrDestQPN)          // IBV_QP_DEST_QPN: DestQPN
	AttrRateLimit        AttrMask = AttrMask(ib.AttrRateLimit)        // IBV_QP_RATE_LIMIT
)

// String lists the bits by their libibverbs names without IBV_QP_, e.g.
// "STATE|PATH_MTU".
func (m AttrMask) String() string { return ib.AttrMask(m).String() }

// QPCap are the sizes of a QP's queues (struct ibv_qp_cap): asked for in
// QPInitAttr, granted in QP.Cap.
type QPCap struct {
	MaxSendWR, MaxRecvWR   int // WRs each queue holds
	MaxSendSGE, MaxRecvSGE int // SGEs of one WR
	MaxInlineData          int // bytes of SendWR.InlineData
}

// QPAttr are a QP's attributes (struct ibv_qp_attr), set by QP.Modify
// (the fields its AttrMask names) and read by QP.Query.
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

// toIB is a as the NIC's attributes.
func (a *QPAttr) toIB() ib.QPAttr {
	return ib.QPAttr{State: ib.QPState(a.State), PathMTU: ib.MTU(a.PathMTU), QKey: a.QKey, RQPSN: a.RQPSN,
		SQPSN: a.SQPSN, DestQPN: a.DestQPN, AccessFlags: ib.Access(a.AccessFlags), PKeyIndex: a.PKeyIndex,
		PortNum: a.PortNum, AH: ib.AH(a.AH), Timeout: a.Timeout, RetryCnt: a.RetryCnt, RNRRetry: a.RNRRetry,
		MinRNRTimer: a.MinRNRTimer, MaxRdAtomic: a.MaxRdAtomic, MaxDestRdAtomic: a.MaxDestRdAtomic}
}

// qpAttrFromIB is the NIC's attributes a as verbs returns them.
func qpAttrFromIB(a *ib.QPAttr) QPAttr {
	return QPAttr{State: QPState(a.State), PathMTU: MTU(a.PathMTU), QKey: a.QKey, RQPSN: a.RQPSN,
		SQPSN: a.SQPSN, DestQPN: a.DestQPN, AccessFlags: Access(a.AccessFlags), PKeyIndex: a.PKeyIndex,
		PortNum: a.PortNum, AH: AH(a.AH), Timeout: a.Timeout, RetryCnt: a.RetryCnt, RNRRetry: a.RNRRetry,
		MinRNRTimer: a.MinRNRTimer, MaxRdAtomic: a.MaxRdAtomic, MaxDestRdAtomic: a.MaxDestRdAtomic}
}

// GID is a port's global identifier (union ibv_gid): for RoCEv2 an IP
// address, an IPv4 address mapped (::ffff:a.b.c.d). It goes into AH.DGID
// as it is.
type GID [16]byte

// GIDFromAddr is the RoCEv2 GID of an IP address.
func GIDFromAddr(a netip.Addr) GID { return GID(ibudp.GIDFromAddr(a)) }

// Addr is the IP address the GID stands for.
func (g GID) Addr() netip.Addr { return ibudp.GID(g).Addr() }

// IsZero reports whether g is all zeros (no GID).
func (g GID) IsZero() bool { return g == GID{} }

// String gives the GID as sysfs and show_gids do, e.g.
// 0000:0000:0000:0000:0000:ffff:c612:0002.
func (g GID) String() string { return ibudp.GID(g).String() }

// MarshalText is String, for JSON.
func (g GID) MarshalText() ([]byte, error) { return []byte(g.String()), nil }
