package qpmgr

import (
	"fmt"
	"net/netip"

	"github.com/rnicd/rnicd/rnic/dma"
)

// SGE is a scatter/gather element (ibv_sge).
type SGE = dma.SGE

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

// WCStatus is a completion status (ibv_wc_status values).
type WCStatus uint8

const (
	WCSuccess        WCStatus = 0
	WCLocLenErr      WCStatus = 1
	WCLocQPOpErr     WCStatus = 2
	WCLocProtErr     WCStatus = 4
	WCWRFlushErr     WCStatus = 5
	WCBadRespErr     WCStatus = 7
	WCLocAccessErr   WCStatus = 8
	WCRemInvReqErr   WCStatus = 9
	WCRemAccessErr   WCStatus = 10
	WCRemOpErr       WCStatus = 11
	WCRetryExcErr    WCStatus = 12
	WCRNRRetryExcErr WCStatus = 13
	WCFatalErr       WCStatus = 19
	WCRespTimeoutErr WCStatus = 20
	WCGeneralErr     WCStatus = 21
)

var wcStatusNames = map[WCStatus]string{
	WCSuccess: "SUCCESS", WCLocLenErr: "LOC_LEN_ERR", WCLocQPOpErr: "LOC_QP_OP_ERR",
	WCLocProtErr: "LOC_PROT_ERR", WCWRFlushErr: "WR_FLUSH_ERR", WCBadRespErr: "BAD_RESP_ERR",
	WCLocAccessErr: "LOC_ACCESS_ERR", WCRemInvReqErr: "REM_INV_REQ_ERR",
	WCRemAccessErr: "REM_ACCESS_ERR", WCRemOpErr: "REM_OP_ERR", WCRetryExcErr: "RETRY_EXC_ERR",
	WCRNRRetryExcErr: "RNR_RETRY_EXC_ERR", WCFatalErr: "FATAL_ERR",
	WCRespTimeoutErr: "RESP_TIMEOUT_ERR", WCGeneralErr: "GENERAL_ERR",
}

func (s WCStatus) String() string {
	if n, ok := wcStatusNames[s]; ok {
		return n
	}
	return fmt.Sprintf("WC_STATUS(%d)", uint8(s))
}

// WCOpcode is the operation a completion reports (ibv_wc_opcode values).
type WCOpcode uint8

const (
	WCSend            WCOpcode = 0
	WCRDMAWrite       WCOpcode = 1
	WCRDMARead        WCOpcode = 2
	WCCompSwap        WCOpcode = 3
	WCFetchAdd        WCOpcode = 4
	WCRecv            WCOpcode = 128
	WCRecvRDMAWithImm WCOpcode = 129
)

var wcOpcodeNames = map[WCOpcode]string{
	WCSend: "SEND", WCRDMAWrite: "RDMA_WRITE", WCRDMARead: "RDMA_READ",
	WCCompSwap: "COMP_SWAP", WCFetchAdd: "FETCH_ADD", WCRecv: "RECV",
	WCRecvRDMAWithImm: "RECV_RDMA_WITH_IMM",
}

func (o WCOpcode) String() string {
	if n, ok := wcOpcodeNames[o]; ok {
		return n
	}
	return fmt.Sprintf("WC_OPCODE(%d)", uint8(o))
}

// wcOpcode maps a send opcode to the opcode of its completion.
func (o WROpcode) wcOpcode() WCOpcode {
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

// WCFlags are ibv_wc_flags.
type WCFlags uint8

const (
	WCFlagGRH     WCFlags = 1 << 0
	WCFlagWithImm WCFlags = 1 << 1
	WCFlagWithInv WCFlags = 1 << 3
)

// WC is a work completion (ibv_wc).
type WC struct {
	WRID    uint64
	Status  WCStatus
	Opcode  WCOpcode
	ByteLen uint32
	// Imm is the immediate data (host order) with WCFlagWithImm, or the
	// invalidated rkey with WCFlagWithInv.
	Imm       uint32
	QPNum     uint32
	SrcQP     uint32
	WCFlags   WCFlags
	PKeyIndex uint16
}

func (wc *WC) String() string {
	return fmt.Sprintf("wc{wr_id=%d status=%v opcode=%v byte_len=%d imm=%#x qp=%#x src_qp=%#x flags=%#x}",
		wc.WRID, wc.Status, wc.Opcode, wc.ByteLen, wc.Imm, wc.QPNum, wc.SrcQP, uint8(wc.WCFlags))
}
