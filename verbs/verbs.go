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
// Everything an application needs is here under libibverbs' names: work
// requests (SendWR, RecvWR, SGE), completions (WC with its WCStatus and
// WCOpcode), QP types, states and attributes, access flags and errors
// (ErrQPState, *WRError, *RequestError). No other package of rnicd is
// needed to write one.
//
// Memory that the NIC reads or writes must come from Context.Alloc, which
// returns memory the NIC can share; RegMR registers a slice of it. As in
// libibverbs, the address of a buffer in an SGE, and the address a peer
// uses with an rkey, is the buffer's virtual address in this process
// (Addr), unless the MR is zero-based.
package verbs

import (
	"errors"
	"fmt"
	"net/netip"
	"syscall"
	"unsafe"
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
	// ErrQPState is returned by a post to a QP whose state does not
	// allow it: a send before RTS, a receive in RESET.
	ErrQPState = errors.New("verbs: QP state does not allow this")
	// ErrQueueFull is returned (in a *WRError) by a post to a queue that
	// holds as many WRs as it can: poll completions first.
	ErrQueueFull = errors.New("verbs: work queue full")
)

// WRError says which work request of a post was refused and why (what
// libibverbs returns in bad_wr). The WRs before it were posted, it and
// the ones after it were not. Unwrap gives the reason, e.g. ErrQueueFull.
type WRError struct {
	Index int    // position of the refused WR in the posted slice
	WRID  uint64 // its WRID
	Err   error
}

func (e *WRError) Error() string {
	return fmt.Sprintf("verbs: work request %d (wr_id %d): %v", e.Index, e.WRID, e.Err)
}

func (e *WRError) Unwrap() error { return e.Err }

// RequestError is a verb the NIC refused (a create, a modify, a
// registration...), with the errno libibverbs would return:
// errors.Is(err, syscall.EINVAL) works on it.
type RequestError struct {
	Verb  string        // the request, e.g. "modify_qp"
	Errno syscall.Errno // EINVAL, ENOENT, EBUSY, EIO, ...
	Msg   string        // the NIC's reason
}

func (e *RequestError) Error() string {
	return fmt.Sprintf("rnicd: %s: %v: %s", e.Verb, e.Errno, e.Msg)
}

func (e *RequestError) Unwrap() error { return e.Errno }

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
