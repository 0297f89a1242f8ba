package verbs

import "github.com/rnicd/rnicd/ib"

// This file and wc.go, qp.go name the vocabulary an application posts and
// polls with, under libibverbs' names and with its values. They are the
// NIC's own types (package ib), not copies: a SendWR goes from PostSend
// into the send ring's codec as it is, and a completion comes out of the
// completion ring's codec as the WC Poll returns. go doc ib.SendWR (and
// the others) shows their fields.

// SGE is a scatter/gather element (struct ibv_sge): Length bytes at Addr
// in the memory region whose local key is LKey. MR.SGE makes one.
type SGE = ib.SGE

// WROpcode is the operation of a send work request (enum ibv_wr_opcode).
type WROpcode = ib.WROpcode

// Send work request opcodes (IBV_WR_*). UD QPs carry only the SENDs, UC
// QPs SENDs and RDMA WRITEs, RC QPs all of them.
const (
	WRRDMAWrite        = ib.WRRDMAWrite        // IBV_WR_RDMA_WRITE: write local memory into the peer's (RemoteAddr, RKey)
	WRRDMAWriteWithImm = ib.WRRDMAWriteWithImm // IBV_WR_RDMA_WRITE_WITH_IMM: a WRITE that also consumes a receive WR at the peer, carrying Imm
	WRSend             = ib.WRSend             // IBV_WR_SEND: the message lands in the buffers of the peer's next receive WR
	WRSendWithImm      = ib.WRSendWithImm      // IBV_WR_SEND_WITH_IMM: a SEND carrying Imm in the peer's completion
	WRRDMARead         = ib.WRRDMARead         // IBV_WR_RDMA_READ: read the peer's memory (RemoteAddr, RKey) into local memory
	WRAtomicCmpAndSwp  = ib.WRAtomicCmpAndSwp  // IBV_WR_ATOMIC_CMP_AND_SWP: if the peer's 8 bytes equal CompareAdd, write Swap; the old value comes back
	WRAtomicFetchAdd   = ib.WRAtomicFetchAdd   // IBV_WR_ATOMIC_FETCH_AND_ADD: add CompareAdd to the peer's 8 bytes; the old value comes back
	WRSendWithInv      = ib.WRSendWithInv      // IBV_WR_SEND_WITH_INV: a SEND that invalidates InvRKey at the peer
)

// SendFlags are the flags of a send work request (enum ibv_send_flags).
type SendFlags = ib.SendFlags

// Send flags (IBV_SEND_*).
const (
	SendFence     = ib.SendFence     // IBV_SEND_FENCE: wait for earlier READs and atomics to complete first
	SendSignaled  = ib.SendSignaled  // IBV_SEND_SIGNALED: make a completion even if the QP is not SigAll
	SendSolicited = ib.SendSolicited // IBV_SEND_SOLICITED: wake a peer that asked to be woken for solicited completions only
	SendInline    = ib.SendInline    // IBV_SEND_INLINE: InlineData is the payload, copied at post time; no MR needed
)

// AH is an address handle (struct ibv_ah_attr with its GRH): where a UD
// send goes, and the primary path of a connected QP (QPAttr.AH).
type AH = ib.AH

// SendWR is a send work request (struct ibv_send_wr), for QP.PostSend:
// WRID, Opcode, Flags, SGL, and the fields its opcode reads (Imm, InvRKey,
// RemoteAddr and RKey, CompareAdd and Swap, AH, RemoteQPN and RemoteQKey
// for UD, InlineData with SendInline).
type SendWR = ib.SendWR

// RecvWR is a receive work request (struct ibv_recv_wr), for QP.PostRecv
// and SRQ.PostRecv: WRID and the SGL the next incoming SEND (or WRITE with
// immediate) is scattered into.
type RecvWR = ib.RecvWR
