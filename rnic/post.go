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

// postSend is PostSend for any QP, QP1 included.
func (d *Device) postSend(qp *QP, wrs []ib.SendWR) error {
	wqes := make([]qpmgr.SendWQE, 0, len(wrs))
	qp.Lock()
	st := qp.State()
	var bad *ib.WRError
	for i := range wrs {
		w, err := d.checkSend(qp, st, &wrs[i])
		if err != nil {
			bad = &ib.WRError{Index: i, WRID: wrs[i].WRID, Err: err}
			break
		}
		wqes = append(wqes, w)
	}
	posted, err := qp.PostSend(wqes)
	if err != nil && bad == nil {
		bad = &ib.WRError{Index: posted, WRID: wrs[posted].WRID, Err: err}
	}
	if d.probe.On() {
		d.tracePost(qp, wqes[:posted])
	}
	qp.Flush() // in ERR a WR completes at once, flushed
	wait := d.coalesce.mayWait(qp, wqes[:posted])
	qp.Unlock()
	if wait {
		d.coalesce.add(d, qp)
	} else {
		d.ring(qp)
	}
	if bad != nil {
		return bad
	}
	return nil
}

// checkSend validates one send WR and makes the NIC's copy of it. It is
// the one validator of WRs: the host interface's WQE decoder checks only
// that a WQE fits its slot.
func (d *Device) checkSend(qp *QP, st ib.QPState, wr *ib.SendWR) (qpmgr.SendWQE, error) {
	switch st {
	case ib.QPSRTS, ib.QPSSQD, ib.QPSErr:
	default:
		return qpmgr.SendWQE{}, fmt.Errorf("%w: post send in %v", ib.ErrQPState, st)
	}
	if !qp.Type.Supports(wr.Opcode) {
		return qpmgr.SendWQE{}, fmt.Errorf("rnic: %v not supported on a %v QP", wr.Opcode, qp.Type)
	}
	if wr.Flags&^ib.SendFlagsKnown != 0 {
		return qpmgr.SendWQE{}, fmt.Errorf("rnic: send flags %#x", uint8(wr.Flags&^ib.SendFlagsKnown))
	}
	w := qpmgr.SendWQE{WR: *wr}
	if wr.Flags&ib.SendInline != 0 {
		if wr.Opcode == ib.WRRDMARead || wr.Opcode.IsAtomic() {
			return w, fmt.Errorf("rnic: %v cannot be inline", wr.Opcode)
		}
		if len(wr.InlineData) > qp.Caps.MaxInlineData {
			return w, fmt.Errorf("rnic: %d bytes inline, QP allows %d", len(wr.InlineData), qp.Caps.MaxInlineData)
		}
		w.WR.InlineData = append([]byte(nil), wr.InlineData...)
		w.WR.SGL = nil
		w.Len = len(wr.InlineData)
	} else {
		if len(wr.SGL) > qp.Caps.MaxSendSGE {
			return w, fmt.Errorf("rnic: %d SGEs, QP allows %d", len(wr.SGL), qp.Caps.MaxSendSGE)
		}
		w.WR.SGL = append([]ib.SGE(nil), wr.SGL...)
		w.WR.InlineData = nil
		for _, s := range wr.SGL {
			w.Len += int(s.Length)
		}
	}
	switch {
	case w.Len > ib.MaxMsgSize:
		return w, fmt.Errorf("rnic: message of %d bytes exceeds %d", w.Len, ib.MaxMsgSize)
	case wr.Opcode.IsAtomic() && w.Len != 8:
		return w, fmt.Errorf("rnic: atomic needs one 8-byte buffer, has %d bytes", w.Len)
	case qp.Type == ib.QPTypeUD && w.Len > qp.MTU():
		return w, fmt.Errorf("rnic: UD message of %d bytes exceeds the MTU %d", w.Len, qp.MTU())
	case qp.Type == ib.QPTypeUD && (wr.AH == nil || !wr.AH.Addr().IsValid()):
		return w, errors.New("rnic: UD send needs an address handle")
	case wr.AH != nil && int(wr.AH.SGIDIndex) >= ib.GIDTableLen:
		return w, fmt.Errorf("rnic: address handle's sgid_index %d: the port's GID table has %d entries", wr.AH.SGIDIndex, ib.GIDTableLen)
	}
	if wr.AH != nil {
		ah := *wr.AH
		w.WR.AH = &ah
	}
	return w, nil
}

// FetchSend is a send doorbell: the device fetches the WQEs posted to
// qp's send source since its last fetch, validates each (checkSend, the
// one validator) and queues them for the requester. A WQE that does not
// decode or validate completes with LOC_QP_OP_ERR and takes the QP to
// ERR, as a NIC does at WQE fetch (FailSend); those after it are flushed.
// A garbage queue takes the QP to ERR. FetchSend returns how many WQEs
// failed (the garbage queue counts one) and the first one's error.
func (d *Device) FetchSend(qp *QP) (failed int, err error) {
	qp.Lock()
	src := qp.SendSource()
	qp.Unlock()
	if src == nil {
		return 0, fmt.Errorf("rnic: QP %#x has no send source", qp.QPN)
	}
	wrs, bad, err := src.Fetch()
	if err != nil {
		d.EnterError(qp)
		return 1, fmt.Errorf("rnic: QP %#x send queue: %w", qp.QPN, err)
	}
	var first error
	for len(wrs) > 0 {
		k := 0 // the first WR that failed to decode, or len(wrs)
		for k < len(wrs) && bad[k] == nil {
			k++
		}
		if k > 0 {
			err := d.PostSend(qp, wrs[:k])
			var we *ib.WRError
			if errors.As(err, &we) {
				k, bad[we.Index] = we.Index, we.Err
			} else if err != nil {
				bad[0], k = err, 0
			}
		}
		if k == len(wrs) {
			break
		}
		failed++
		if first == nil {
			first = fmt.Errorf("rnic: QP %#x WQE wr_id %d: %w", qp.QPN, wrs[k].WRID, bad[k])
		}
		d.FailSend(qp, &wrs[k])
		wrs, bad = wrs[k+1:], bad[k+1:]
	}
	return failed, first
}

// FailSend completes a send WQE the host interface fetched and could not
// decode, as a NIC does at WQE fetch: LOC_QP_OP_ERR (WR_FLUSH_ERR if the
// QP was in ERR already), after the QP has gone to ERR, as EnterError
// takes it there.
func (d *Device) FailSend(qp *QP, wr *ib.SendWR) {
	d.sendHeldAck(qp)
	qp.Lock()
	defer qp.Unlock()
	qp.FailSend(*wr, d.fetchFault(qp))
}

// FailRecv is FailSend for a receive WQE, which its source has retired.
func (d *Device) FailRecv(qp *QP, wrid uint64) {
	d.sendHeldAck(qp)
	qp.Lock()
	defer qp.Unlock()
	qp.FailRecv(wrid, d.fetchFault(qp))
}

// fetchFault moves qp to ERR for a WQE that failed at fetch and returns
// the WQE's status. Call with the lock held.
func (d *Device) fetchFault(qp *QP) ib.WCStatus {
	st := ib.WCLocQPOpErr
	if qp.State() == ib.QPSErr {
		st = ib.WCWRFlushErr
	}
	qp.EnterError()
	return st
}

// RefillRecv rings a QP's receive doorbell: its queue fetches from its
// source, and in ERR what it fetched completes flushed.
func (d *Device) RefillRecv(qp *QP) {
	qp.RQ.Refill()
	qp.Lock()
	qp.Flush()
	qp.Unlock()
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
		d.tracePostRecv(qp, wrs[:i])
	}
	qp.Flush()
	if err != nil {
		return &ib.WRError{Index: i, WRID: wrs[i].WRID, Err: err}
	}
	return nil
}

// tracePost tells the trace of send WQEs posted and the doorbell that
// follows them.
func (d *Device) tracePost(qp *QP, wqes []qpmgr.SendWQE) {
	for i := range wqes {
		w := &wqes[i]
		d.probe.Emit(trace.Event{Module: trace.ModVerbs, Step: trace.StepPost, QPN: qp.QPN, WRID: w.WR.WRID,
			WROp: w.WR.Opcode, Len: uint32(w.Len)})
	}
	d.probe.Emit(trace.Event{Module: trace.ModDoorbell, Step: trace.StepDoorbell, QPN: qp.QPN, Arg: uint32(len(wqes))})
}

// tracePostRecv tells the trace of receive WRs posted.
func (d *Device) tracePostRecv(qp *QP, wrs []ib.RecvWR) {
	for i := range wrs {
		n := 0
		for _, s := range wrs[i].SGL {
			n += int(s.Length)
		}
		d.probe.Emit(trace.Event{Module: trace.ModVerbs, Step: trace.StepPostRecv, QPN: qp.QPN, WRID: wrs[i].WRID,
			Len: uint32(n), Flags: trace.FlagRecv})
	}
}
