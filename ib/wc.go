package ib

import "fmt"

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
