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
// needed to write one. The WR, WC and attribute types and the verbs'
// errors are the NIC's own (package ib, whose go doc shows their fields,
// e.g. go doc ib.SendWR): an application and the NIC speak one
// vocabulary, and errors.Is(err, ErrQPState) holds whichever side refused.
//
// # A wr_id's way
//
// From PostSend to the application's Poll a send WR's wr_id is written
// and read 5 times, each where the representation really changes:
//
//  1. QP.PostSend encodes the SendWR into its send ring's slot
//     (hostif.EncodeSendWQE): the slot is the ABI the C library writes too.
//  2. The daemon's engine, at the doorbell or polling the ring, fetches it
//     (Device.FetchSend calls the ring's hostif qpObj.Fetch through
//     qpmgr.SendSource, which decodes it, hostif.DecodeSendWQE) and checks
//     it (Device.checkSend, the one validator), which wraps the same
//     ib.SendWR in the engine's qpmgr.SendWQE: a copy, not a conversion.
//  3. When the WR is done (the completer's ACK, a flush), qpmgr.QP's
//     completeSend retires its ring slot (SendSource.Retire) and makes the
//     completion, an ib.WC whose WRID is the WQE's.
//  4. The CQ hands it to the completion ring (qpmgr.CompletionSink, the
//     hostif cqObj.Complete), which writes the CQE (hostif.PutCQE).
//  5. CQ.Poll decodes the CQE into the caller's []WC (hostif.GetCQE).
//
// That is 5 conversions, not the 3 aimed at (before the types were one, a
// copy on each side, a SendWR to the NIC's and the NIC's WC to the
// application's, made 7): the ring codecs, two each way, are the ABI's
// and stay while the rings are bytes a C program shares. The way still
// climbs back up three times, where the engine
// (rnic, qpmgr) calls the host interface above it through interfaces it
// defines (SendSource.Fetch, Retire, CompletionSink.Complete), so that
// the device imports nothing of the host side: reading the calls down
// from PostSend, that is where the trail goes through an interface.
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

	"github.com/rnicd/rnicd/ib"
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
	// allow it: a send before RTS, a receive in RESET. It is the NIC's
	// own (ib.ErrQPState), as are ErrQueueFull and ErrCQOverrun.
	ErrQPState = ib.ErrQPState
	// ErrQueueFull is returned (in a *WRError) by a post to a queue that
	// holds as many WRs as it can: poll completions first.
	ErrQueueFull = ib.ErrQueueFull
)

// WRError says which work request of a post was refused and why (what
// libibverbs returns in bad_wr). The WRs before it were posted, it and
// the ones after it were not. Unwrap gives the reason, e.g. ErrQueueFull.
type WRError = ib.WRError

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
