package ib

import "fmt"

// WCStatus is the status of a completion (enum ibv_wc_status). Anything but
// WCSuccess means the WR failed; the QP is then in ERR and its other WRs
// complete with WCWRFlushErr.
type WCStatus uint8

// Completion statuses (IBV_WC_*), with libibverbs' values.
const (
	WCSuccess        WCStatus = 0  // IBV_WC_SUCCESS
	WCLocLenErr      WCStatus = 1  // IBV_WC_LOC_LEN_ERR: a message longer than the receive WR's buffers
	WCLocQPOpErr     WCStatus = 2  // IBV_WC_LOC_QP_OP_ERR: a WR the QP cannot carry (bad opcode, too long for UD, malformed)
	WCLocProtErr     WCStatus = 4  // IBV_WC_LOC_PROT_ERR: an SGE outside its MR, a wrong lkey or PD
	WCWRFlushErr     WCStatus = 5  // IBV_WC_WR_FLUSH_ERR: flushed, the QP went to ERR before the WR ran
	WCMWBindErr      WCStatus = 6  // IBV_WC_MW_BIND_ERR: a memory window bind the window, the MR or the QP did not allow
	WCBadRespErr     WCStatus = 7  // IBV_WC_BAD_RESP_ERR: the peer answered with a response that fits no request
	WCLocAccessErr   WCStatus = 8  // IBV_WC_LOC_ACCESS_ERR: local memory the operation may not write
	WCRemInvReqErr   WCStatus = 9  // IBV_WC_REM_INV_REQ_ERR: the peer found the request invalid (too long, unsupported)
	WCRemAccessErr   WCStatus = 10 // IBV_WC_REM_ACCESS_ERR: the peer refused the rkey, the range or the access
	WCRemOpErr       WCStatus = 11 // IBV_WC_REM_OP_ERR: the peer could not carry the operation out
	WCRetryExcErr    WCStatus = 12 // IBV_WC_RETRY_EXC_ERR: the peer did not answer within the QP's retry budget
	WCRNRRetryExcErr WCStatus = 13 // IBV_WC_RNR_RETRY_EXC_ERR: the peer had no receive WR posted, RNRRetry times
	WCFatalErr       WCStatus = 19 // IBV_WC_FATAL_ERR
	WCRespTimeoutErr WCStatus = 20 // IBV_WC_RESP_TIMEOUT_ERR
	WCGeneralErr     WCStatus = 21 // IBV_WC_GENERAL_ERR
)

var wcStatusNames = map[WCStatus]string{
	WCSuccess: "SUCCESS", WCLocLenErr: "LOC_LEN_ERR", WCLocQPOpErr: "LOC_QP_OP_ERR",
	WCLocProtErr: "LOC_PROT_ERR", WCWRFlushErr: "WR_FLUSH_ERR", WCMWBindErr: "MW_BIND_ERR", WCBadRespErr: "BAD_RESP_ERR",
	WCLocAccessErr: "LOC_ACCESS_ERR", WCRemInvReqErr: "REM_INV_REQ_ERR",
	WCRemAccessErr: "REM_ACCESS_ERR", WCRemOpErr: "REM_OP_ERR", WCRetryExcErr: "RETRY_EXC_ERR",
	WCRNRRetryExcErr: "RNR_RETRY_EXC_ERR", WCFatalErr: "FATAL_ERR",
	WCRespTimeoutErr: "RESP_TIMEOUT_ERR", WCGeneralErr: "GENERAL_ERR",
}

// String is the status's libibverbs name without IBV_WC_, e.g.
// "REM_ACCESS_ERR".
func (s WCStatus) String() string {
	if n, ok := wcStatusNames[s]; ok {
		return n
	}
	return fmt.Sprintf("WC_STATUS(%d)", uint8(s))
}

// WCOpcode is the operation a completion reports (enum ibv_wc_opcode).
type WCOpcode uint8

// Completion opcodes (IBV_WC_*). A send WR completes with the opcode of its
// operation (WRITE_WITH_IMM as WCRDMAWrite, every SEND as WCSend:
// WROpcode.WCOpcode), a receive WR with WCRecv, or WCRecvRDMAWithImm when
// a WRITE with immediate consumed it.
const (
	WCSend            WCOpcode = 0   // IBV_WC_SEND
	WCRDMAWrite       WCOpcode = 1   // IBV_WC_RDMA_WRITE
	WCRDMARead        WCOpcode = 2   // IBV_WC_RDMA_READ
	WCCompSwap        WCOpcode = 3   // IBV_WC_COMP_SWAP
	WCFetchAdd        WCOpcode = 4   // IBV_WC_FETCH_ADD
	WCBindMW          WCOpcode = 5   // IBV_WC_BIND_MW
	WCLocalInv        WCOpcode = 6   // IBV_WC_LOCAL_INV
	WCRecv            WCOpcode = 128 // IBV_WC_RECV
	WCRecvRDMAWithImm WCOpcode = 129 // IBV_WC_RECV_RDMA_WITH_IMM
)

var wcOpcodeNames = map[WCOpcode]string{
	WCSend: "SEND", WCRDMAWrite: "RDMA_WRITE", WCRDMARead: "RDMA_READ",
	WCCompSwap: "COMP_SWAP", WCFetchAdd: "FETCH_ADD", WCBindMW: "BIND_MW", WCLocalInv: "LOCAL_INV", WCRecv: "RECV",
	WCRecvRDMAWithImm: "RECV_RDMA_WITH_IMM",
}

// String is the opcode's libibverbs name without IBV_WC_, e.g. "RECV".
func (o WCOpcode) String() string {
	if n, ok := wcOpcodeNames[o]; ok {
		return n
	}
	return fmt.Sprintf("WC_OPCODE(%d)", uint8(o))
}

// WCFlags are the flags of a completion (enum ibv_wc_flags).
type WCFlags uint8

// Completion flags (IBV_WC_*).
const (
	WCFlagGRH     WCFlags = 1 << 0 // IBV_WC_GRH: a UD receive; the first 40 bytes of the buffer are the GRH
	WCFlagWithImm WCFlags = 1 << 1 // IBV_WC_WITH_IMM: Imm holds the sender's immediate data
	WCFlagWithInv WCFlags = 1 << 3 // IBV_WC_WITH_INV: Imm holds the rkey the sender invalidated
)

// WC is a work completion (struct ibv_wc), as verbs.CQ.Poll returns it.
type WC struct {
	// WRID is the WR's own WRID.
	WRID uint64
	// Status says whether the WR succeeded. With any other status than
	// WCSuccess, libibverbs promises only WRID, Status and QPNum (rnicd
	// fills Opcode too).
	Status WCStatus
	Opcode WCOpcode
	// ByteLen is the length of the message received (receive WRs, READ).
	ByteLen uint32
	// Imm is the immediate data (host order) with WCFlagWithImm, or the
	// invalidated rkey with WCFlagWithInv.
	Imm uint32
	// QPNum is the QP the WR was posted to; SrcQP the sender's QP (UD).
	QPNum     uint32
	SrcQP     uint32
	WCFlags   WCFlags
	PKeyIndex uint16
}

// String prints every field, statuses and opcodes by name.
func (wc *WC) String() string {
	return fmt.Sprintf("wc{wr_id=%d status=%v opcode=%v byte_len=%d imm=%#x qp=%#x src_qp=%#x flags=%#x}",
		wc.WRID, wc.Status, wc.Opcode, wc.ByteLen, wc.Imm, wc.QPNum, wc.SrcQP, uint8(wc.WCFlags))
}
