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
	return d.postWQEs(qp, wqes)
}

// postWQEs validates send WQEs that are the NIC's own (checkSend) and
// queues them for the requester, up to the first that fails; on error the
// WQEs before it are posted.
func (d *Device) postWQEs(qp *QP, wqes []qpmgr.SendWQE) error {
	qp.Lock()
	st := qp.State()
	var bad *ib.WRError
	n := 0
	for ; n < len(wqes); n++ {
		if err := d.checkSend(qp, st, &wqes[n]); err != nil {
			bad = &ib.WRError{Index: n, WRID: wqes[n].WR.WRID, Err: err}
			break
		}
	}
	posted, err := qp.PostSend(wqes[:n])
	if err != nil && bad == nil {
		bad = &ib.WRError{Index: posted, WRID: wqes[posted].WR.WRID, Err: err}
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
}

// checkSend validates one send WQE, the NIC's own (ownSend, or decoded
// from the host's ring, SendRing.Fetch), and sets its length. It is the
// one validator of WRs: the ABI's WQE decoder checks only that a WQE
// fits its slot.
func (d *Device) checkSend(qp *QP, st ib.QPState, w *qpmgr.SendWQE) error {
	wr := &w.WR
	switch st {
	case ib.QPSRTS, ib.QPSSQD, ib.QPSErr:
	default:
		return fmt.Errorf("%w: post send in %v", ib.ErrQPState, st)
	}
	if !qp.Type.Supports(wr.Opcode) {
		return fmt.Errorf("rnic: %v not supported on a %v QP", wr.Opcode, qp.Type)
	}
	if wr.Flags&^ib.SendFlagsKnown != 0 {
		return fmt.Errorf("rnic: send flags %#x", uint8(wr.Flags&^ib.SendFlagsKnown))
	}
	w.Len = 0
	if wr.Flags&ib.SendInline != 0 {
		if wr.Opcode == ib.WRRDMARead || wr.Opcode.IsAtomic() {
			return fmt.Errorf("rnic: %v cannot be inline", wr.Opcode)
		}
		if len(wr.InlineData) > qp.Caps.MaxInlineData {
			return fmt.Errorf("rnic: %d bytes inline, QP allows %d", len(wr.InlineData), qp.Caps.MaxInlineData)
		}
		w.Len = len(wr.InlineData)
	} else {
		if len(wr.SGL) > qp.Caps.MaxSendSGE {
			return fmt.Errorf("rnic: %d SGEs, QP allows %d", len(wr.SGL), qp.Caps.MaxSendSGE)
		}
		for _, s := range wr.SGL {
			w.Len += int(s.Length)
		}
	}
	switch {
	case w.Len > ib.MaxMsgSize:
		return fmt.Errorf("rnic: message of %d bytes exceeds %d", w.Len, ib.MaxMsgSize)
	case wr.Opcode.IsAtomic() && w.Len != 8:
		return fmt.Errorf("rnic: atomic needs one 8-byte buffer, has %d bytes", w.Len)
	case qp.Type == ib.QPTypeUD && w.Len > qp.MTU():
		return fmt.Errorf("rnic: UD message of %d bytes exceeds the MTU %d", w.Len, qp.MTU())
	case qp.Type == ib.QPTypeUD && (wr.AH == nil || !wr.AH.Addr().IsValid()):
		return errors.New("rnic: UD send needs an address handle")
	case wr.AH != nil && int(wr.AH.SGIDIndex) >= ib.GIDTableLen:
		return fmt.Errorf("rnic: address handle's sgid_index %d: the port's GID table has %d entries", wr.AH.SGIDIndex, ib.GIDTableLen)
	}
	return nil
}

// FetchSend is a send doorbell: the device fetches the WQEs posted to
// qp's send source since its last fetch, decoded into its own records
// (SendRing.Fetch), validates each (checkSend, the one validator) and
// queues them for the requester. A WQE that does not decode or validate
// completes with LOC_QP_OP_ERR and takes the QP to ERR, as a NIC does at
// WQE fetch (FailSend); those after it are flushed. A garbage queue
// takes the QP to ERR. FetchSend returns how many WQEs failed (the
// garbage queue counts one) and the first one's error.
func (d *Device) FetchSend(qp *QP) (failed int, err error) {
	qp.Lock()
	src := qp.SendSource()
	qp.Unlock()
	if src == nil {
		return 0, fmt.Errorf("rnic: QP %#x has no send source", qp.QPN)
	}
	wqes, bad, err := src.Fetch()
	if err != nil {
		d.EnterError(qp)
		return 1, fmt.Errorf("rnic: QP %#x send queue: %w", qp.QPN, err)
	}
	var first error
	for len(wqes) > 0 {
		k := 0 // the first WQE that failed to decode, or len(wqes)
		for k < len(wqes) && bad[k] == nil {
			k++
		}
		if k > 0 {
			err := ErrGSI
			if qp.QPN != GSIQPN {
				err = d.postWQEs(qp, wqes[:k])
			}
			var we *ib.WRError
			if errors.As(err, &we) {
				k, bad[we.Index] = we.Index, we.Err
			} else if err != nil {
				bad[0], k = err, 0
			}
		}
		if k == len(wqes) {
			break
		}
		failed++
		if first == nil {
			first = fmt.Errorf("rnic: QP %#x WQE wr_id %d: %w", qp.QPN, wqes[k].WR.WRID, bad[k])
		}
		d.FailSend(qp, &wqes[k].WR)
		wqes, bad = wqes[k+1:], bad[k+1:]
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
