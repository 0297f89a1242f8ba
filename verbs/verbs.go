// Package verbs is the application's side of rnicd, modeled on libibverbs:
// open a device, allocate a PD, register memory, create CQs and QPs, post
// work requests and poll completions.
//
// A Context reaches a NIC in one of two ways. Open connects to a running
// rnicd by device name over its control socket (the daemon path: memory and
// queues shared with the daemon). OpenLocal starts a NIC inside the calling
// process, for tests and the demo. Both give the same objects and the same
// semantics.
//
// Memory that the NIC reads or writes must come from Context.Alloc, which
// returns memory the NIC can share; RegMR registers a slice of it. As in
// libibverbs, the address of a buffer in an SGE, and the address a peer
// uses with an rkey, is the buffer's virtual address in this process
// (Addr), unless the MR is zero-based.
package verbs

import (
	"errors"
	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/wire/ibudp"
	"net/netip"
	"unsafe"
)

// The types of work requests, completions and attributes are the NIC's own,
// under libibverbs' names.
type (
	SendWR    = ib.SendWR
	RecvWR    = ib.RecvWR
	SGE       = ib.SGE
	WC        = ib.WC
	AH        = ib.AH
	QPAttr    = ib.QPAttr
	QPCap     = ib.QPCap
	QPType    = ib.QPType
	QPState   = ib.QPState
	AttrMask  = ib.AttrMask
	MTU       = ib.MTU
	Access    = ib.Access
	WROpcode  = ib.WROpcode
	SendFlags = ib.SendFlags
	WCStatus  = ib.WCStatus
	WCOpcode  = ib.WCOpcode
	GID       = ibudp.GID
)

// QP types, states, access flags and the rest, as libibverbs names them.
const (
	QPTypeRC = ib.QPTypeRC
	QPTypeUC = ib.QPTypeUC
	QPTypeUD = ib.QPTypeUD

	QPSReset = ib.QPSReset
	QPSInit  = ib.QPSInit
	QPSRTR   = ib.QPSRTR
	QPSRTS   = ib.QPSRTS
	QPSSQD   = ib.QPSSQD
	QPSErr   = ib.QPSErr

	AccessLocalWrite   = ib.AccessLocalWrite
	AccessRemoteWrite  = ib.AccessRemoteWrite
	AccessRemoteRead   = ib.AccessRemoteRead
	AccessRemoteAtomic = ib.AccessRemoteAtomic
	AccessZeroBased    = ib.AccessZeroBased

	MTU256  = ib.MTU256
	MTU512  = ib.MTU512
	MTU1024 = ib.MTU1024
	MTU2048 = ib.MTU2048
	MTU4096 = ib.MTU4096

	WRRDMAWrite        = ib.WRRDMAWrite
	WRRDMAWriteWithImm = ib.WRRDMAWriteWithImm
	WRSend             = ib.WRSend
	WRSendWithImm      = ib.WRSendWithImm
	WRRDMARead         = ib.WRRDMARead
	WRAtomicCmpAndSwp  = ib.WRAtomicCmpAndSwp
	WRAtomicFetchAdd   = ib.WRAtomicFetchAdd

	SendFence     = ib.SendFence
	SendSignaled  = ib.SendSignaled
	SendSolicited = ib.SendSolicited
	SendInline    = ib.SendInline

	WCSuccess = ib.WCSuccess

	AttrState           = ib.AttrState
	AttrAccessFlags     = ib.AttrAccessFlags
	AttrPKeyIndex       = ib.AttrPKeyIndex
	AttrPort            = ib.AttrPort
	AttrQKey            = ib.AttrQKey
	AttrAV              = ib.AttrAV
	AttrPathMTU         = ib.AttrPathMTU
	AttrTimeout         = ib.AttrTimeout
	AttrRetryCnt        = ib.AttrRetryCnt
	AttrRNRRetry        = ib.AttrRNRRetry
	AttrRQPSN           = ib.AttrRQPSN
	AttrMaxQPRdAtomic   = ib.AttrMaxQPRdAtomic
	AttrMinRNRTimer     = ib.AttrMinRNRTimer
	AttrSQPSN           = ib.AttrSQPSN
	AttrMaxDestRdAtomic = ib.AttrMaxDestRdAtomic
	AttrDestQPN         = ib.AttrDestQPN
)

// Errors common to both paths.
var (
	// ErrClosed is returned by any call on a closed Context or object.
	ErrClosed = errors.New("verbs: closed")
	// ErrNotShared is returned by RegMR for memory that does not come
	// from Context.Alloc.
	ErrNotShared = errors.New("verbs: buffer was not allocated by Context.Alloc")
	// ErrDeviceFatal is returned by CQ.Wait and CompChannel.GetCQEvent
	// once the daemon is gone (IBV_EVENT_DEVICE_FATAL): no completion
	// will come any more.
	ErrDeviceFatal = errors.New("verbs: device fatal error")
)

// Addr is the virtual address of b's first byte: what an SGE or a remote
// peer uses for it. b must not be empty.
func Addr(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) }

// DeviceAttr describes the device (ibv_query_device).
type DeviceAttr struct {
	Name            string
	NodeGUID        uint64
	FWVer           string
	MaxQP           int
	MaxQPWR         int
	MaxSGE          int
	MaxCQ           int
	MaxCQE          int
	MaxMR           int
	MaxMRSize       uint64
	MaxPD           int
	MaxQPRdAtom     int
	MaxQPInitRdAtom int
	MaxSRQ          int
	MaxSRQWR        int
	MaxInlineData   int
	AtomicCap       string // "ATOMIC_HCA" like rxe
}

// PortAttr describes the device's one port (ibv_query_port) and its GID
// table (ibv_query_gid).
type PortAttr struct {
	State     string // "PORT_ACTIVE"
	MaxMTU    MTU
	ActiveMTU MTU
	LinkLayer string // "Ethernet"
	Addr      netip.Addr
	// GIDs is the GID table: the port's RoCEv2 GID (Addr as an IPv4-mapped
	// or IPv6 GID) at index 0 and 1, where rxe puts an IPv4 address's v1
	// and v2 GIDs; rnicd speaks RoCEv2 only.
	GIDs []GID
	// GIDIndex is the index of Addr's RoCEv2 GID in GIDs.
	GIDIndex int
}

// QPInitAttr is what CreateQP needs (ibv_qp_init_attr).
type QPInitAttr struct {
	Type   QPType
	SendCQ *CQ
	RecvCQ *CQ
	SRQ    *SRQ
	Cap    QPCap
	SigAll bool
}

// SRQInitAttr is what CreateSRQ needs (ibv_srq_init_attr).
type SRQInitAttr struct {
	MaxWR  int
	MaxSGE int
	Limit  int
}

// QPInfo is one row of `rnic res`: a QP of the device, whoever owns it
// (rdma res show qp).
type QPInfo struct {
	QPN      uint32
	Type     QPType
	State    QPState
	SQPSN    uint32 // next PSN the requester sends
	RQPSN    uint32 // next PSN the responder expects
	DestQPN  uint32
	Dest     netip.Addr
	PathMTU  MTU
	Owner    string // process name and pid of the client, "rnicd" for the daemon's own
	SQDepth  int    // WQEs posted and not completed
	RQDepth  int    // receive WQEs posted and not consumed
	Counters map[string]uint64
}
