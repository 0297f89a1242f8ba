package verbs

import "github.com/rnicd/rnicd/ib"

// WCStatus is the status of a completion (enum ibv_wc_status). Anything but
// WCSuccess means the WR failed; the QP is then in ERR and its other WRs
// complete with WCWRFlushErr.
type WCStatus uint8

// Completion statuses (IBV_WC_*).
const (
	WCSuccess        WCStatus = WCStatus(ib.WCSuccess)        // IBV_WC_SUCCESS
	WCLocLenErr      WCStatus = WCStatus(ib.WCLocLenErr)      // IBV_WC_LOC_LEN_ERR: a message longer than the receive WR's buffers
	WCLocQPOpErr     WCStatus = WCStatus(ib.WCLocQPOpErr)     // IBV_WC_LOC_QP_OP_ERR: a WR the QP cannot carry (bad opcode, too long for UD, malformed)
	WCLocProtErr     WCStatus = WCStatus(ib.WCLocProtErr)     // IBV_WC_LOC_PROT_ERR: an SGE outside its MR, a wrong lkey or PD
	WCWRFlushErr     WCStatus = WCStatus(ib.WCWRFlushErr)     // IBV_WC_WR_FLUSH_ERR: flushed, the QP went to ERR before the WR ran
	WCBadRespErr     WCStatus = WCStatus(ib.WCBadRespErr)     // IBV_WC_BAD_RESP_ERR: the peer answered with a response that fits no request
	WCLocAccessErr   WCStatus = WCStatus(ib.WCLocAccessErr)   // IBV_WC_LOC_ACCESS_ERR: local memory the operation may not write
	WCRemInvReqErr   WCStatus = WCStatus(ib.WCRemInvReqErr)   // IBV_WC_REM_INV_REQ_ERR: the peer found the request invalid (too long, unsupported)
	WCRemAccessErr   WCStatus = WCStatus(ib.WCRemAccessErr)   // IBV_WC_REM_ACCESS_ERR: the peer refused the rkey, the range or the access
	WCRemOpErr       WCStatus = WCStatus(ib.WCRemOpErr)       // IBV_WC_REM_OP_ERR: the peer could not carry the operation out
	WCRetryExcErr    WCStatus = WCStatus(ib.WCRetryExcErr)    // IBV_WC_RETRY_EXC_ERR: the peer did not answer within the QP's retry budget
	WCRNRRetryExcErr WCStatus = WCStatus(ib.WCRNRRetryExcErr) // IBV_WC_RNR_RETRY_EXC_ERR: the peer had no receive WR posted, RNRRetry times
	WCFatalErr       WCStatus = WCStatus(ib.WCFatalErr)       // IBV_WC_FATAL_ERR
	WCRespTimeoutErr WCStatus = WCStatus(ib.WCRespTimeoutErr) // IBV_WC_RESP_TIMEOUT_ERR
	WCGeneralErr     WCStatus = WCStatus(ib.WCGeneralErr)     // IBV_WC_GENERAL_ERR
)

// String is the status's libibverbs name without IBV_WC_, e.g.
// "REM_ACCESS_ERR".
func (s WCStatus) String() string { return ib.WCStatus(s).String() }

// WCOpcode is the operation a completion reports (enum ibv_wc_opcode).
type WCOpcode uint8

// Completion opcodes (IBV_WC_*). A send WR completes with the opcode of its
// operation (WRITE_WITH_IMM as WCRDMAWrite, every SEND as WCSend), a
// receive WR with WCRecv, or WCRecvRDMAWithImm when a WRITE with immediate
// consumed it.
const (
	WCSend            WCOpcode = WCOpcode(ib.WCSend)            // IBV_WC_SEND
	WCRDMAWrite       WCOpcode = WCOpcode(ib.WCRDMAWrite)       // IBV_WC_RDMA_WRITE
	WCRDMARead        WCOpcode = WCOpcode(ib.WCRDMARead)        // IBV_WC_RDMA_READ
	WCCompSwap        WCOpcode = WCOpcode(ib.WCCompSwap)        // IBV_WC_COMP_SWAP
	WCFetchAdd        WCOpcode = WCOpcode(ib.WCFetchAdd)        // IBV_WC_FETCH_ADD
	WCRecv            WCOpcode = WCOpcode(ib.WCRecv)            // IBV_WC_RECV
	WCRecvRDMAWithImm WCOpcode = WCOpcode(ib.WCRecvRDMAWithImm) // IBV_WC_RECV_RDMA_WITH_IMM
)

// String is the opcode's libibverbs name without IBV_WC_, e.g. "RECV".
func (o WCOpcode) String() string { return ib.WCOpcode(o).String() }

// WCFlags are the flags of a completion (enum ibv_wc_flags).
type WCFlags uint8

// Completion flags (IBV_WC_*).
const (
	WCFlagGRH     WCFlags = WCFlags(ib.WCFlagGRH)     // IBV_WC_GRH: a UD receive; the first 40 bytes of the buffer are the GRH
	WCFlagWithImm WCFlags = WCFlags(ib.WCFlagWithImm) // IBV_WC_WITH_IMM: Imm holds the sender's immediate data
	WCFlagWithInv WCFlags = WCFlags(ib.WCFlagWithInv) // IBV_WC_WITH_INV: Imm holds the rkey the sender invalidated
)

// WC is a work completion (struct ibv_wc), as CQ.Poll returns it.
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
	w := ib.WC{WRID: wc.WRID, Status: ib.WCStatus(wc.Status), Opcode: ib.WCOpcode(wc.Opcode), ByteLen: wc.ByteLen,
		Imm: wc.Imm, QPNum: wc.QPNum, SrcQP: wc.SrcQP, WCFlags: ib.WCFlags(wc.WCFlags), PKeyIndex: wc.PKeyIndex}
	return w.String()
}

// wcFromIB is the NIC's completion w as verbs returns it.
func wcFromIB(w *ib.WC) WC {
	return WC{WRID: w.WRID, Status: WCStatus(w.Status), Opcode: WCOpcode(w.Opcode), ByteLen: w.ByteLen,
		Imm: w.Imm, QPNum: w.QPNum, SrcQP: w.SrcQP, WCFlags: WCFlags(w.WCFlags), PKeyIndex: w.PKeyIndex}
}
