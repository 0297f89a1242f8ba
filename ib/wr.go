package ib

import (
	"fmt"
	"net/netip"
)

// SGE is a scatter/gather element, as libibverbs' struct ibv_sge: Length
// bytes at Addr in the memory region named by LKey.
//
// An SGE with Length 0 names no memory and is not checked (its LKey may be
// anything), the same rule IBTA applies to a zero-length RDMA operation.
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// WROpcode is the operation of a send work request (ibv_wr_opcode values).
type WROpcode uint8

const (
	WRRDMAWrite        WROpcode = 0
	WRRDMAWriteWithImm WROpcode = 1
	WRSend             WROpcode = 2
	WRSendWithImm      WROpcode = 3
	WRRDMARead         WROpcode = 4
	WRAtomicCmpAndSwp  WROpcode = 5
	WRAtomicFetchAdd   WROpcode = 6
	WRSendWithInv      WROpcode = 9
)

var wrOpcodeNames = map[WROpcode]string{
	WRRDMAWrite: "RDMA_WRITE", WRRDMAWriteWithImm: "RDMA_WRITE_WITH_IMM",
	WRSend: "SEND", WRSendWithImm: "SEND_WITH_IMM", WRRDMARead: "RDMA_READ",
	WRAtomicCmpAndSwp: "ATOMIC_CMP_AND_SWP", WRAtomicFetchAdd: "ATOMIC_FETCH_AND_ADD",
	WRSendWithInv: "SEND_WITH_INV",
}

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

// IsAtomic reports whether the operation is an atomic.
func (o WROpcode) IsAtomic() bool { return o == WRAtomicCmpAndSwp || o == WRAtomicFetchAdd }

// SendFlags are ibv_send_flags.
type SendFlags uint8

const (
	SendFence     SendFlags = 1 << 0
	SendSignaled  SendFlags = 1 << 1
	SendSolicited SendFlags = 1 << 2
	SendInline    SendFlags = 1 << 3
)

// AH is an address handle (ibv_ah_attr with its GRH): where UD sends go, and
// the primary path of a connected QP.
type AH struct {
	DGID         [16]byte // RoCEv2: the peer's IP address as a GID
	FlowLabel    uint32
	SGIDIndex    uint8
	HopLimit     uint8
	TrafficClass uint8
}

// Addr returns the IP address DGID stands for.
func (a *AH) Addr() netip.Addr { return netip.AddrFrom16(a.DGID).Unmap() }

// SendWR is a send work request (ibv_send_wr). Exactly the fields its
// opcode uses are read.
type SendWR struct {
	WRID   uint64
	Opcode WROpcode
	Flags  SendFlags
	SGL    []SGE
	// Imm is the immediate data of *_WITH_IMM, in host order (the wire
	// carries it big-endian).
	Imm uint32
	// InvRKey is the rkey SEND_WITH_INV asks the responder to invalidate.
	InvRKey uint32
	// RDMA and atomics.
	RemoteAddr uint64
	RKey       uint32
	CompareAdd uint64 // compare value of CMP_AND_SWP, addend of FETCH_AND_ADD
	Swap       uint64
	// UD.
	AH         *AH
	RemoteQPN  uint32
	RemoteQKey uint32
	// InlineData, when Flags has SendInline, is the payload itself: the
	// NIC copies it at post time and SGL is ignored.
	InlineData []byte
}

// RecvWR is a receive work request (ibv_recv_wr).
type RecvWR struct {
	WRID uint64
	SGL  []SGE
}

// Valid reports whether o is an opcode rnicd implements (the ones above;
// libibverbs' LOCAL_INV, BIND_MW, TSO and the masked atomics are not).
func (o WROpcode) Valid() bool {
	switch o {
	case WRRDMAWrite, WRRDMAWriteWithImm, WRSend, WRSendWithImm, WRRDMARead,
		WRAtomicCmpAndSwp, WRAtomicFetchAdd, WRSendWithInv:
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
	}
	return WCSend
}

// Supports reports whether a QP of type t may post a WR of opcode o
// (IBTA 9.7 and 10.2.1, table "Service types and operations"): UD carries
// only SENDs, UC adds RDMA WRITE, RC has every operation.
func (t QPType) Supports(o WROpcode) bool {
	switch t {
	case QPTypeUD:
		return o == WRSend || o == WRSendWithImm
	case QPTypeUC:
		return o == WRSend || o == WRSendWithImm || o == WRRDMAWrite || o == WRRDMAWriteWithImm
	case QPTypeRC:
		return o.Valid()
	}
	return false
}

// SendFlagsKnown is every send flag rnicd understands.
const SendFlagsKnown = SendFence | SendSignaled | SendSolicited | SendInline
