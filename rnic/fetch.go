package rnic

import (
	"errors"
	"fmt"

	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/rnic/qpmgr"
	"github.com/rnicd/rnicd/rnic/trace"
)

// The WQE fetch: what a doorbell (a post in this process, a doorbell
// message, the polling engine's poll of a host ring) has the pipelines
// do before the requester runs. Each send WQE is fetched (SendRing.Fetch
// for a host ring, ownSend for a post), validated by the one validator
// (checkSend) and queued on its QP; the doorbell then runs or schedules
// the requester (ring). A WQE refused at fetch completes with an error
// and takes its QP to ERR, as a NIC does.

// fetchSend is a send doorbell: the device fetches the WQEs posted to
// qp's send source since its last fetch, decoded into its own records
// (SendRing.Fetch), validates each (checkSend, the one validator) and
// queues them for the requester. A WQE that does not decode or validate
// completes with LOC_QP_OP_ERR and takes the QP to ERR, as a NIC does at
// WQE fetch (failSend); those after it are flushed. A garbage queue
// takes the QP to ERR. fetchSend returns how many WQEs failed (the
// garbage queue counts one) and the first one's error.
func (p *pipelines) fetchSend(qp *QP) (failed int, err error) {
	qp.Lock()
	src := qp.SendSource()
	qp.Unlock()
	if src == nil {
		return 0, fmt.Errorf("rnic: QP %#x has no send source", qp.QPN)
	}
	wqes, bad, err := src.Fetch()
	if err != nil {
		p.queueOf(qp).enterError(qp)
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
				err = p.postWQEs(qp, wqes[:k])
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
		p.failSend(qp, &wqes[k].WR)
		wqes, bad = wqes[k+1:], bad[k+1:]
	}
	return failed, first
}

// failSend completes a send WQE the host interface fetched and could not
// decode, as a NIC does at WQE fetch: LOC_QP_OP_ERR (WR_FLUSH_ERR if the
// QP was in ERR already), after the QP has gone to ERR, as enterError
// takes it there.
func (p *pipelines) failSend(qp *QP, wr *ib.SendWR) {
	p.queueOf(qp).sendHeldAck(qp)
	qp.Lock()
	defer qp.Unlock()
	qp.FailSend(*wr, fetchFault(qp))
}

// failRecv is failSend for a receive WQE, which its source has retired.
func (p *pipelines) failRecv(qp *QP, wrid uint64) {
	p.queueOf(qp).sendHeldAck(qp)
	qp.Lock()
	defer qp.Unlock()
	qp.FailRecv(wrid, fetchFault(qp))
}

// fetchFault moves qp to ERR for a WQE that failed at fetch and returns
// the WQE's status. Call with the lock held.
func fetchFault(qp *QP) ib.WCStatus {
	st := ib.WCLocQPOpErr
	if qp.State() == ib.QPSErr {
		st = ib.WCWRFlushErr
	}
	qp.EnterErrorReported()
	return st
}

// refillRecv rings a QP's receive doorbell: its queue fetches from its
// source, and in ERR what it fetched completes flushed.
func refillRecv(qp *QP) {
	qp.RQ.Refill()
	qp.Lock()
	qp.Flush()
	qp.Unlock()
}

// postWQEs validates send WQEs that are the NIC's own (checkSend) and
// queues them for the requester, up to the first that fails; on error the
// WQEs before it are posted.
func (p *pipelines) postWQEs(qp *QP, wqes []qpmgr.SendWQE) error {
	qp.Lock()
	st := qp.State()
	var bad *ib.WRError
	n := 0
	for ; n < len(wqes); n++ {
		if err := checkSend(qp, st, &wqes[n]); err != nil {
			bad = &ib.WRError{Index: n, WRID: wqes[n].WR.WRID, Err: err}
			break
		}
	}
	posted, err := qp.PostSend(wqes[:n])
	if err != nil && bad == nil {
		bad = &ib.WRError{Index: posted, WRID: wqes[posted].WR.WRID, Err: err}
	}
	if p.probe.On() {
		p.tracePost(qp, wqes[:posted])
	}
	qp.Flush() // in ERR a WR completes at once, flushed
	wait := p.coalesce.mayWait(qp, wqes[:posted])
	qp.Unlock()
	if wait {
		p.coalesce.add(p, qp)
	} else {
		p.ring(qp)
	}
	if bad != nil {
		return bad
	}
	return nil
}

// checkSend validates one send WQE, the NIC's own (ownSend, or decoded
// from the host's ring, SendRing.Fetch), and sets its length. It is the
// one validator of WRs: the ABI's WQE decoder checks only that a WQE
// fits its slot.
func checkSend(qp *QP, st ib.QPState, w *qpmgr.SendWQE) error {
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
	if wr.Opcode.IsLocal() {
		// A bind or invalidation moves no data: what it names is
		// checked when it runs (wqe.Engine.local), as rxe does.
		if wr.Flags&ib.SendInline != 0 || len(wr.SGL) > 0 {
			return fmt.Errorf("rnic: %v carries no data", wr.Opcode)
		}
		if wr.Opcode == ib.WRBindMW && wr.Bind == nil {
			// The ring's decoder always gives one; a Go program's WR
			// may lack it, and the requester would dereference it.
			return fmt.Errorf("rnic: %v without its bind (SendWR.Bind)", wr.Opcode)
		}
		return nil
	}
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

// tracePost tells the trace of send WQEs posted and the doorbell that
// follows them.
func (p *pipelines) tracePost(qp *QP, wqes []qpmgr.SendWQE) {
	for i := range wqes {
		w := &wqes[i]
		p.probe.Emit(trace.Event{Module: trace.ModVerbs, Step: trace.StepPost, QPN: qp.QPN, WRID: w.WR.WRID,
			WROp: w.WR.Opcode, Len: uint32(w.Len)})
	}
	p.probe.Emit(trace.Event{Module: trace.ModDoorbell, Step: trace.StepDoorbell, QPN: qp.QPN, Arg: uint32(len(wqes))})
}
