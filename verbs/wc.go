package verbs

import "github.com/rnicd/rnicd/ib"

// WCStatus is the status of a completion (enum ibv_wc_status). Anything but
// WCSuccess means the WR failed; the QP is then in ERR and its other WRs
// complete with WCWRFlushErr.
type WCStatus = ib.WCStatus

// Completion statuses (IBV_WC_*).
const (
	WCSuccess        = ib.WCSuccess        // IBV_WC_SUCCESS
	WCLocLenErr      = ib.WCLocLenErr      // IBV_WC_LOC_LEN_ERR: a message longer than the receive WR's buffers
	WCLocQPOpErr     = ib.WCLocQPOpErr     // IBV_WC_LOC_QP_OP_ERR: a WR the QP cannot carry (bad opcode, too long for UD, malformed)
	WCLocProtErr     = ib.WCLocProtErr     // IBV_WC_LOC_PROT_ERR: an SGE outside its MR, a wrong lkey or PD
	WCWRFlushErr     = ib.WCWRFlushErr     // IBV_WC_WR_FLUSH_ERR: flushed, the QP went to ERR before the WR ran
	WCBadRespErr     = ib.WCBadRespErr     // IBV_WC_BAD_RESP_ERR: the peer answered with a response that fits no request
	WCLocAccessErr   = ib.WCLocAccessErr   // IBV_WC_LOC_ACCESS_ERR: local memory the operation may not write
	WCRemInvReqErr   = ib.WCRemInvReqErr   // IBV_WC_REM_INV_REQ_ERR: the peer found the request invalid (too long, unsupported)
	WCRemAccessErr   = ib.WCRemAccessErr   // IBV_WC_REM_ACCESS_ERR: the peer refused the rkey, the range or the access
	WCRemOpErr       = ib.WCRemOpErr       // IBV_WC_REM_OP_ERR: the peer could not carry the operation out
	WCRetryExcErr    = ib.WCRetryExcErr    // IBV_WC_RETRY_EXC_ERR: the peer did not answer within the QP's retry budget
	WCRNRRetryExcErr = ib.WCRNRRetryExcErr // IBV_WC_RNR_RETRY_EXC_ERR: the peer had no receive WR posted, RNRRetry times
	WCFatalErr       = ib.WCFatalErr       // IBV_WC_FATAL_ERR
	WCRespTimeoutErr = ib.WCRespTimeoutErr // IBV_WC_RESP_TIMEOUT_ERR
	WCGeneralErr     = ib.WCGeneralErr     // IBV_WC_GENERAL_ERR
)

// WCOpcode is the operation a completion reports (enum ibv_wc_opcode).
type WCOpcode = ib.WCOpcode

// Completion opcodes (IBV_WC_*). A send WR completes with the opcode of its
// operation (WRITE_WITH_IMM as WCRDMAWrite, every SEND as WCSend), a
// receive WR with WCRecv, or WCRecvRDMAWithImm when a WRITE with immediate
// consumed it.
const (
	WCSend            = ib.WCSend            // IBV_WC_SEND
	WCRDMAWrite       = ib.WCRDMAWrite       // IBV_WC_RDMA_WRITE
	WCRDMARead        = ib.WCRDMARead        // IBV_WC_RDMA_READ
	WCCompSwap        = ib.WCCompSwap        // IBV_WC_COMP_SWAP
	WCFetchAdd        = ib.WCFetchAdd        // IBV_WC_FETCH_ADD
	WCRecv            = ib.WCRecv            // IBV_WC_RECV
	WCRecvRDMAWithImm = ib.WCRecvRDMAWithImm // IBV_WC_RECV_RDMA_WITH_IMM
)

// WCFlags are the flags of a completion (enum ibv_wc_flags).
type WCFlags = ib.WCFlags

// Completion flags (IBV_WC_*).
const (
	WCFlagGRH     = ib.WCFlagGRH     // IBV_WC_GRH: a UD receive; the first 40 bytes of the buffer are the GRH
	WCFlagWithImm = ib.WCFlagWithImm // IBV_WC_WITH_IMM: Imm holds the sender's immediate data
	WCFlagWithInv = ib.WCFlagWithInv // IBV_WC_WITH_INV: Imm holds the rkey the sender invalidated
)

// WC is a work completion (struct ibv_wc), as CQ.Poll returns it: WRID,
// Status, Opcode, ByteLen, Imm, QPNum, SrcQP, WCFlags, PKeyIndex. With a
// Status other than WCSuccess libibverbs promises only WRID, Status and
// QPNum (rnicd fills Opcode too).
type WC = ib.WC
