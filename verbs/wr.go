package verbs

import (
	"net/netip"
	"unsafe"

	"github.com/rnicd/rnicd/ib"
)

// This file and wc.go, qp.go hold the vocabulary an application posts and
// polls with, under libibverbs' names and with its values. They are verbs'
// own types, so that go doc shows their fields here; the NIC's copies of
// the same names live in package ib, and verbs converts at its boundary
// (a field-by-field copy on the stack, no allocation).

// SGE is a scatter/gather element (struct ibv_sge): Length bytes at Addr
// in the memory region whose local key is LKey. MR.SGE makes one.
type SGE struct {
	// Addr is the address of the first byte: the buffer's virtual address
	// in this process (Addr(buf)), or its offset in a zero-based MR.
	Addr uint64
	// Length is the number of bytes. An SGE of length 0 names no memory
	// and is not checked.
	Length uint32
	// LKey is the MR's local key (MR.LKey).
	LKey uint32
}

// WROpcode is the operation of a send work request (enum ibv_wr_opcode).
type WROpcode uint8

// Send work request opcodes (IBV_WR_*). UD QPs carry only the SENDs, UC
// QPs SENDs and RDMA WRITEs, RC QPs all of them.
const (
	WRRDMAWrite        WROpcode = WROpcode(ib.WRRDMAWrite)        // IBV_WR_RDMA_WRITE: write local memory into the peer's (RemoteAddr, RKey)
	WRRDMAWriteWithImm WROpcode = WROpcode(ib.WRRDMAWriteWithImm) // IBV_WR_RDMA_WRITE_WITH_IMM: a WRITE that also consumes a receive WR at the peer, carrying Imm
	WRSend             WROpcode = WROpcode(ib.WRSend)             // IBV_WR_SEND: the message lands in the buffers of the peer's next receive WR
	WRSendWithImm      WROpcode = WROpcode(ib.WRSendWithImm)      // IBV_WR_SEND_WITH_IMM: a SEND carrying Imm in the peer's completion
	WRRDMARead         WROpcode = WROpcode(ib.WRRDMARead)         // IBV_WR_RDMA_READ: read the peer's memory (RemoteAddr, RKey) into local memory
	WRAtomicCmpAndSwp  WROpcode = WROpcode(ib.WRAtomicCmpAndSwp)  // IBV_WR_ATOMIC_CMP_AND_SWP: if the peer's 8 bytes equal CompareAdd, write Swap; the old value comes back
	WRAtomicFetchAdd   WROpcode = WROpcode(ib.WRAtomicFetchAdd)   // IBV_WR_ATOMIC_FETCH_AND_ADD: add CompareAdd to the peer's 8 bytes; the old value comes back
	WRSendWithInv      WROpcode = WROpcode(ib.WRSendWithInv)      // IBV_WR_SEND_WITH_INV: a SEND that invalidates InvRKey at the peer
)

// String is the opcode's libibverbs name without IBV_WR_, e.g. "RDMA_WRITE".
func (o WROpcode) String() string { return ib.WROpcode(o).String() }

// SendFlags are the flags of a send work request (enum ibv_send_flags).
type SendFlags uint8

// Send flags (IBV_SEND_*).
const (
	SendFence     SendFlags = SendFlags(ib.SendFence)     // IBV_SEND_FENCE: wait for earlier READs and atomics to complete first
	SendSignaled  SendFlags = SendFlags(ib.SendSignaled)  // IBV_SEND_SIGNALED: make a completion even if the QP is not SigAll
	SendSolicited SendFlags = SendFlags(ib.SendSolicited) // IBV_SEND_SOLICITED: wake a peer that asked to be woken for solicited completions only
	SendInline    SendFlags = SendFlags(ib.SendInline)    // IBV_SEND_INLINE: InlineData is the payload, copied at post time; no MR needed
)

// AH is an address handle (struct ibv_ah_attr with its GRH): where a UD send
// goes, and the primary path of a connected QP (QPAttr.AH).
type AH struct {
	// DGID is the peer's GID: for RoCEv2 its IP address, an IPv4 address
	// mapped (::ffff:a.b.c.d). PortAttr.GIDs has the local one.
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

// SendWR is a send work request (struct ibv_send_wr), for QP.PostSend.
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
	// InvRKey is the rkey SEND_WITH_INV asks the responder to invalidate.
	InvRKey uint32
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
	// InlineData, when Flags has SendInline, is the payload itself: the
	// NIC copies it at post time and SGL is ignored.
	InlineData []byte
}

// RecvWR is a receive work request (struct ibv_recv_wr), for QP.PostRecv
// and SRQ.PostRecv: the buffers the next incoming SEND (or WRITE with
// immediate) consumes.
type RecvWR struct {
	// WRID is the application's own tag, returned in the WR's completion.
	WRID uint64
	// SGL is where the message is scattered, in order. A UD receive gets
	// the 40-byte GRH first.
	SGL []SGE
}

// The NIC's types of the same names must have the same layout, so that a
// WR's SGL and AH are handed over as they are; these conversions compile
// only while that holds.
var (
	_ = ib.SGE(SGE{})
	_ = ib.AH(AH{})
)

// ibSGL is sgl as the NIC's SGEs, sharing its memory.
func ibSGL(sgl []SGE) []ib.SGE {
	if len(sgl) == 0 {
		return nil
	}
	return unsafe.Slice((*ib.SGE)(&sgl[0]), len(sgl))
}

// toIB is wr as the NIC's send WR; it shares wr's SGL, AH and inline data.
func (wr *SendWR) toIB() ib.SendWR {
	return ib.SendWR{
		WRID: wr.WRID, Opcode: ib.WROpcode(wr.Opcode), Flags: ib.SendFlags(wr.Flags), SGL: ibSGL(wr.SGL),
		Imm: wr.Imm, InvRKey: wr.InvRKey, RemoteAddr: wr.RemoteAddr, RKey: wr.RKey,
		CompareAdd: wr.CompareAdd, Swap: wr.Swap, AH: (*ib.AH)(wr.AH), RemoteQPN: wr.RemoteQPN,
		RemoteQKey: wr.RemoteQKey, InlineData: wr.InlineData,
	}
}

// toIB is wr as the NIC's receive WR; it shares wr's SGL.
func (wr *RecvWR) toIB() ib.RecvWR { return ib.RecvWR{WRID: wr.WRID, SGL: ibSGL(wr.SGL)} }
