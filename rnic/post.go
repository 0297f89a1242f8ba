package rnic

import (
	"errors"
	"fmt"

	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/rnic/qpmgr"
	"github.com/rnicd/rnicd/rnic/trace"
)

// PostSRQRecv posts receive WRs to an SRQ (ibv_post_srq_recv).
func (d *Device) PostSRQRecv(srq *SRQ, wrs []ib.RecvWR) error {
	if i, err := srq.Post(wrs); err != nil {
		return &ib.WRError{Index: i, WRID: wrs[i].WRID, Err: err}
	}
	return nil
}

// PostSend posts send WRs and rings the doorbell (ibv_post_send). It checks
// every WR against the QP before queuing any of them after it; on error the
// WRs before the bad one are posted.
func (d *Device) PostSend(qp *QP, wrs []ib.SendWR) error {
	if qp.QPN == GSIQPN {
		return ErrGSI
	}
	return d.postSend(qp, wrs)
}

// postSend is PostSend for any QP, QP1 included: the NIC's copy of each
// WR (ownSend), then postWQEs.
func (d *Device) postSend(qp *QP, wrs []ib.SendWR) error {
	wqes := make([]qpmgr.SendWQE, len(wrs))
	for i := range wrs {
		ownSend(&wqes[i], &wrs[i])
	}
	return d.pipes.postWQEs(qp, wqes)
}

// ownSend makes w the NIC's copy of wr: what the application may reuse
// once the post returns (its SGL, its inline data, its AH) is copied.
func ownSend(w *qpmgr.SendWQE, wr *ib.SendWR) {
	w.WR = *wr
	if wr.Flags&ib.SendInline != 0 {
		w.WR.InlineData = append([]byte(nil), wr.InlineData...)
		w.WR.SGL = nil
	} else {
		w.WR.SGL = append([]ib.SGE(nil), wr.SGL...)
		w.WR.InlineData = nil
	}
	if wr.AH != nil {
		ah := *wr.AH
		w.WR.AH = &ah
	}
	if wr.Bind != nil {
		b := *wr.Bind
		w.WR.Bind = &b
	}
}

// PostRecv posts receive WRs to a QP's receive queue (ibv_post_recv).
func (d *Device) PostRecv(qp *QP, wrs []ib.RecvWR) error {
	if qp.QPN == GSIQPN {
		return ErrGSI
	}
	if qp.SRQ != nil {
		return errors.New("rnic: QP uses an SRQ; post to the SRQ")
	}
	qp.Lock()
	defer qp.Unlock()
	if qp.State() == ib.QPSReset {
		return fmt.Errorf("%w: post recv in RESET", ib.ErrQPState)
	}
	i, err := qp.RQ.Post(wrs)
	if d.probe.On() {
		tracePostRecv(d.probe, qp, wrs[:i])
	}
	qp.Flush()
	if err != nil {
		return &ib.WRError{Index: i, WRID: wrs[i].WRID, Err: err}
	}
	return nil
}

// tracePostRecv tells the trace of receive WRs posted.
func tracePostRecv(probe *trace.Probe, qp *QP, wrs []ib.RecvWR) {
	for i := range wrs {
		n := 0
		for _, s := range wrs[i].SGL {
			n += int(s.Length)
		}
		probe.Emit(trace.Event{Module: trace.ModVerbs, Step: trace.StepPostRecv, QPN: qp.QPN, WRID: wrs[i].WRID,
			Len: uint32(n), Flags: trace.FlagRecv})
	}
}
