package trace

import (
	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/rnic/qpmgr"
)

// SendCompletion is the event of the WQE at the head of qp's send queue
// retiring with status st; call it before qp.CompleteSend, with the QP's
// lock held.
func SendCompletion(qp *qpmgr.QP, st ib.WCStatus) Event {
	w := qp.SQ.At(qp.SQ.Head)
	e := Event{Module: ModCompleter, Step: StepComplete, QPN: qp.QPN, PSN: w.FirstPSN, WRID: w.WR.WRID,
		WROp: w.WR.Opcode, Len: uint32(w.Len), Arg: uint32(st)}
	if st != ib.WCSuccess || w.WR.Flags&ib.SendSignaled != 0 || qp.SigAll {
		e.Flags |= FlagCQE
	}
	return e
}

// RecvCompletion is the event of a receive completion wc on qp.
func RecvCompletion(qp *qpmgr.QP, wc *ib.WC) Event {
	return Event{Module: ModCompleter, Step: StepComplete, QPN: qp.QPN, WRID: wc.WRID, Len: wc.ByteLen,
		Arg: uint32(wc.Status), Flags: FlagRecv | FlagCQE}
}
