package qpmgr

import (
	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/rnic/trace"
)

// The trace events of a QP's completions. They read the QP, so they live
// here rather than in package trace, which imports nothing of the NIC's
// blocks: every block may emit events without a cycle.

// SendCompletionEvent is the event of the WQE at the head of qp's send
// queue retiring with status st; call it before qp.CompleteSend, with the
// QP's lock held.
func SendCompletionEvent(qp *QP, st ib.WCStatus) trace.Event {
	w := qp.SQ.At(qp.SQ.Head)
	e := trace.Event{Module: trace.ModCompleter, Step: trace.StepComplete, QPN: qp.QPN, PSN: w.FirstPSN, WRID: w.WR.WRID,
		WROp: w.WR.Opcode, Len: uint32(w.Len), Arg: uint32(st)}
	if st != ib.WCSuccess || w.WR.Flags&ib.SendSignaled != 0 || qp.SigAll {
		e.Flags |= trace.FlagCQE
	}
	return e
}

// RecvCompletionEvent is the event of the receive completion c of wr_id
// wrid on qp.
func RecvCompletionEvent(qp *QP, wrid uint64, c *RecvCompletion) trace.Event {
	return trace.Event{Module: trace.ModCompleter, Step: trace.StepComplete, QPN: qp.QPN, WRID: wrid, Len: c.ByteLen,
		Arg: uint32(c.Status), Flags: trace.FlagRecv | trace.FlagCQE}
}
