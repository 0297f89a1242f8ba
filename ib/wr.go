package ib

import (
	"fmt"
	"net/netip"
)

// SGE is a scatter/gather element (struct ibv_sge): Length bytes at Addr
// in the memory region whose local key is LKey. verbs.MR.SGE makes one.
type SGE struct {
	// Addr is the address of the first byte: the buffer's virtual address
	// in the application (verbs.Addr(buf)), or its offset in a zero-based
	// MR.
	Addr uint64
	// Length is the number of bytes. An SGE of length 0 names no memory
	// and is not checked (its LKey may be anything), the same rule IBTA
	// applies to a zero-length RDMA operation.
	Length uint32
	// LKey is the MR's local key (MR.LKey).
	LKey uint32
}

// WROpcode is the operation of a send work request (enum ibv_wr_opcode).
type WROpcode uint8

// Send work request opcodes (IBV_WR_*), with libibverbs' values. UD QPs
// carry only the SENDs, UC QPs SENDs and RDMA WRITEs, RC QPs all of them
// (QPType.Supports).
const (
	WRRDMAWrite        WROpcode = 0 // IBV_WR_RDMA_WRITE: write local memory into the peer's (RemoteAddr, RKey)
	WRRDMAWriteWithImm WROpcode = 1 // IBV_WR_RDMA_WRITE_WITH_IMM: a WRITE that also consumes a receive WR at the peer, carrying Imm
	WRSend             WROpcode = 2 // IBV_WR_SEND: the message lands in the buffers of the peer's next receive WR
	WRSendWithImm      WROpcode = 3 // IBV_WR_SEND_WITH_IMM: a SEND carrying Imm in the peer's completion
	WRRDMARead         WROpcode = 4 // IBV_WR_RDMA_READ: read the peer's memory (RemoteAddr, RKey) into local memory
	WRAtomicCmpAndSwp  WROpcode = 5 // IBV_WR_ATOMIC_CMP_AND_SWP: if the peer's 8 bytes equal CompareAdd, write Swap; the old value comes back
	WRAtomicFetchAdd   WROpcode = 6 // IBV_WR_ATOMIC_FETCH_AND_ADD: add CompareAdd to the peer's 8 bytes; the old value comes back
	WRLocalInv         WROpcode = 7 // IBV_WR_LOCAL_INV: invalidate InvRKey (an MR's, or a type 2 memory window's) here; no packet
	WRBindMW           WROpcode = 8 // IBV_WR_BIND_MW: bind a memory window (Bind) to a range of an MR here; no packet
	WRSendWithInv      WROpcode = 9 // IBV_WR_SEND_WITH_INV: a SEND that invalidates InvRKey at the peer
)

var wrOpcodeNames = map[WROpcode]string{
	WRRDMAWrite: "RDMA_WRITE", WRRDMAWriteWithImm: "RDMA_WRITE_WITH_IMM",
	WRSend: "SEND", WRSendWithImm: "SEND_WITH_IMM", WRRDMARead: "RDMA_READ",
	WRAtomicCmpAndSwp: "ATOMIC_CMP_AND_SWP", WRAtomicFetchAdd: "ATOMIC_FETCH_AND_ADD",
	WRSendWithInv: "SEND_WITH_INV", WRLocalInv: "LOCAL_INV", WRBindMW: "BIND_MW",
}

// String is the opcode's libibverbs name without IBV_WR_, e.g. "RDMA_WRITE".
func (o WROpcode) String() string {
	if s, ok := wrOpcodeNames[o]; ok {
		return s
	}
	return fmt.Sprintf("WR_OPCODE(%d)", uint8(o))
}

// IsReadOrAtomic reports whether the operation waits for response data,
// which max_rd_atomic limits and fences wait for.
func (o WROpcode) IsReadOrAtomic() bool {
	return o == WRRDMARead || o == WRAtomicCmpAndSwp || o == WRAtomicFetchAdd
}

// IsLocal reports whether the operation runs in the NIC alone, sends no
// packet and completes once done (BIND_MW, LOCAL_INV: rxe's
// WR_LOCAL_OP_MASK).
func (o WROpcode) IsLocal() bool { return o == WRBindMW || o == WRLocalInv }

// IsAtomic reports whether the operation is an atomic.
func (o WROpcode) IsAtomic() bool { return o == WRAtomicCmpAndSwp || o == WRAtomicFetchAdd }

// SendFlags are the flags of a send work request (enum ibv_send_flags).
type SendFlags uint8

// Send flags (IBV_SEND_*).
const (
	SendFence     SendFlags = 1 << 0 // IBV_SEND_FENCE: wait for earlier READs and atomics to complete first
	SendSignaled  SendFlags = 1 << 1 // IBV_SEND_SIGNALED: make a completion even if the QP is not SigAll
	SendSolicited SendFlags = 1 << 2 // IBV_SEND_SOLICITED: wake a peer that asked to be woken for solicited completions only
	SendInline    SendFlags = 1 << 3 // IBV_SEND_INLINE: InlineData is the payload, copied at post time; no MR needed
)

// AH is an address handle (struct ibv_ah_attr with its GRH): where a UD
// send goes, and the primary path of a connected QP (QPAttr.AH).
type AH struct {
	// DGID is the peer's GID: for RoCEv2 its IP address, an IPv4 address
	// mapped (::ffff:a.b.c.d). verbs.PortAttr.GIDs has the local one.
	DGID [16]byte
	// FlowLabel picks the UDP source port of a connected QP's packets,
	// as rxe does (ECMP entropy).
	FlowLabel uint32
	// SGIDIndex is the index of the local GID to send from.
	SGIDIndex uint8
	HopLimit  uint8
	// TrafficClass is the IP TOS byte of the packets (DSCP and ECN).
	TrafficClass uint8
}

// Addr returns the IP address DGID stands for.
func (a *AH) Addr() netip.Addr { return netip.AddrFrom16(a.DGID).Unmap() }

// SendWR is a send work request (struct ibv_send_wr), for verbs.QP.PostSend.
// Exactly the fields its opcode uses are read.
type SendWR struct {
	// WRID is the application's own tag, returned in the WR's completion.
	WRID   uint64
	Opcode WROpcode
	Flags  SendFlags
	// SGL is the local memory of the message: gathered for WRITE and SEND,
	// scattered into for READ, one 8-byte buffer for the atomics' result.
	SGL []SGE
	// Imm is the immediate data of *_WITH_IMM, in host order (the wire
	// carries it big-endian).
	Imm uint32
	// InvRKey is the rkey SEND_WITH_INV asks the responder to invalidate,
	// or LOCAL_INV invalidates here.
	InvRKey uint32
	// Bind is what BIND_MW binds (struct ibv_send_wr's bind_mw); nil
	// for every other opcode, so that a WR, which the NIC keeps one of
	// per send queue slot, grows by a pointer only.
	Bind *MWBind
	// RemoteAddr and RKey name the peer's memory for RDMA and atomics: an
	// address in the peer's MR (its Addr plus an offset) and the MR's RKey.
	RemoteAddr uint64
	RKey       uint32
	// CompareAdd is the compare value of CMP_AND_SWP and the addend of
	// FETCH_AND_ADD; Swap is the value CMP_AND_SWP writes.
	CompareAdd uint64
	Swap       uint64
	// AH, RemoteQPN and RemoteQKey address a UD send: the peer's port, QP
	// number and Q_Key.
	AH         *AH
	RemoteQPN  uint32
	RemoteQKey uint32
	// RemoteSRQN is the XRC SRQ at the target that a send on an XRC
	// send QP is for (wr.qp_type.xrc.remote_srqn).
	RemoteSRQN uint32
	// InlineData, when Flags has SendInline, is the payload itself: the
	// NIC copies it at post time and SGL is ignored.
	InlineData []byte
}

// MWBind is a memory window bind (ibv_send_wr.bind_mw and its
// ibv_mw_bind_info): the window whose rkey is MWRKey gets the rkey RKey
// (its index kept, the low 8 bits RKey's: ibv_inc_rkey makes one) and
// answers for Length bytes at Addr of the MR MRLKey names, with Access
// (REMOTE_* and ZERO_BASED). A type 1 window with Length 0 is unbound.
type MWBind struct {
	MWRKey uint32
	RKey   uint32
	MRLKey uint32
	Addr   uint64
	Length uint64
	Access Access
}

// RecvWR is a receive work request (struct ibv_recv_wr), for
// verbs.QP.PostRecv and verbs.SRQ.PostRecv: the buffers the next incoming
// SEND (or WRITE with immediate) consumes.
type RecvWR struct {
	// WRID is the application's own tag, returned in the WR's completion.
	WRID uint64
	// SGL is where the message is scattered, in order. A UD receive gets
	// the 40-byte GRH first.
	SGL []SGE
}

// Valid reports whether o is an opcode rnicd implements (the ones above;
// libibverbs' TSO and the masked atomics are not).
func (o WROpcode) Valid() bool {
	switch o {
	case WRRDMAWrite, WRRDMAWriteWithImm, WRSend, WRSendWithImm, WRRDMARead,
		WRAtomicCmpAndSwp, WRAtomicFetchAdd, WRSendWithInv, WRLocalInv, WRBindMW:
		return true
	}
	return false
}

// WCOpcode is the opcode of the completion of a WR of opcode o
// (IBTA 11.4.2.1; libibverbs ibv_wc_opcode): the *_WITH_IMM and
// SEND_WITH_INV variants complete as their plain operation.
func (o WROpcode) WCOpcode() WCOpcode {
	switch o {
	case WRRDMAWrite, WRRDMAWriteWithImm:
		return WCRDMAWrite
	case WRRDMARead:
		return WCRDMARead
	case WRAtomicCmpAndSwp:
		return WCCompSwap
	case WRAtomicFetchAdd:
		return WCFetchAdd
	case WRBindMW:
		return WCBindMW
	case WRLocalInv:
		return WCLocalInv
	}
	return WCSend
}

// Supports reports whether a QP of type t may post a WR of opcode o
// (IBTA 9.7 and 10.2.1, table "Service types and operations"): UD carries
// only SENDs, UC adds RDMA WRITE and BIND_MW, RC has every operation
// (rxe's wr_opcode_info: LOCAL_INV on RC only).
func (t QPType) Supports(o WROpcode) bool {
	switch t {
	case QPTypeUD:
		return o == WRSend || o == WRSendWithImm
	case QPTypeUC:
		return o == WRSend || o == WRSendWithImm || o == WRRDMAWrite || o == WRRDMAWriteWithImm || o == WRBindMW
	case QPTypeRC:
		return o.Valid()
	case QPTypeXRCSend:
		// Memory windows are bound on RC and UC QPs only, as rxe's
		// opcode table has them (rxe has no XRC).
		return o.Valid() && !o.IsLocal()
	}
	return false
}

// SendFlagsKnown is every send flag rnicd understands.
const SendFlagsKnown = SendFence | SendSignaled | SendSolicited | SendInline
