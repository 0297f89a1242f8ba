package rnic

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/rnic/dma"
	"github.com/rnicd/rnicd/rnic/qpmgr"
	"github.com/rnicd/rnicd/wire/ibudp"
)

// The verbs objects, under the names libibverbs gives them: the blocks
// that own them (dma, qpmgr) are the device's inside, and the Device's
// methods hand them out. What a verb carries (WRs, WCs, attributes) is
// package ib's, under its own name.
type (
	PD  = dma.PD
	MR  = dma.MR
	CQ  = qpmgr.CQ
	SRQ = qpmgr.RecvQueue
	QP  = qpmgr.QP
)

// Device limits (ibv_query_device).
const (
	MaxCQE = 1 << 20
)

// PortAttr describes the port (ibv_query_port, ibv_query_gid).
type PortAttr struct {
	Addr      netip.Addr
	GID       ibudp.GID
	ActiveMTU int
}

// QueryPort returns the port's address, GID and active MTU.
func (d *Device) QueryPort() PortAttr {
	a := d.port.Addr()
	return PortAttr{Addr: a, GID: ibudp.GIDFromAddr(a), ActiveMTU: d.port.MTU()}
}

// AllocPD allocates a protection domain (ibv_alloc_pd).
func (d *Device) AllocPD() PD {
	d.mu.Lock()
	defer d.mu.Unlock()
	pd := d.nextPD
	d.nextPD++
	return pd
}

// RegMR registers buf as a memory region answering to addresses va ..
// va+len(buf)-1 (ibv_reg_mr: va is the address the application uses in
// SGEs and hands its peer with the rkey).
func (d *Device) RegMR(pd PD, buf []byte, va uint64, access ib.Access) (*MR, error) {
	return d.dma.Register(pd, buf, va, access)
}

// DeregMR deregisters a memory region (ibv_dereg_mr).
func (d *Device) DeregMR(mr *MR) error { return d.dma.Deregister(mr.LKey) }

// CreateCQ creates a completion queue of n entries (ibv_create_cq).
func (d *Device) CreateCQ(n int) (*CQ, error) {
	if n < 1 || n > MaxCQE {
		return nil, fmt.Errorf("rnic: CQ size %d outside 1..%d", n, MaxCQE)
	}
	return qpmgr.NewCQ(n), nil
}

// CreateSRQ creates a shared receive queue (ibv_create_srq).
func (d *Device) CreateSRQ(pd PD, maxWR, maxSGE int) (*SRQ, error) {
	if maxWR < 1 || maxWR > ib.MaxQPWR || maxSGE < 1 || maxSGE > ib.MaxSGE {
		return nil, fmt.Errorf("rnic: SRQ of %d WRs x %d SGEs outside the device limits", maxWR, maxSGE)
	}
	return qpmgr.NewRecvQueue(maxWR, maxSGE), nil
}

// PostSRQRecv posts receive WRs to an SRQ (ibv_post_srq_recv).
func (d *Device) PostSRQRecv(srq *SRQ, wrs []ib.RecvWR) error {
	if i, err := srq.Post(wrs); err != nil {
		return &ib.WRError{Index: i, WRID: wrs[i].WRID, Err: err}
	}
	return nil
}

// QPInitAttr is what CreateQP needs (ibv_qp_init_attr).
type QPInitAttr struct {
	PD     PD
	Type   ib.QPType
	SendCQ *CQ
	RecvCQ *CQ
	SRQ    *SRQ
	Caps   ib.QPCap
	SigAll bool
}

// CreateQP creates a queue pair in RESET (ibv_create_qp).
func (d *Device) CreateQP(a QPInitAttr) (*QP, error) {
	if a.PD == 0 {
		return nil, errors.New("rnic: create QP: no PD")
	}
	qpn, err := d.qps.Alloc()
	if err != nil {
		return nil, err
	}
	qp, err := qpmgr.New(qpmgr.Config{
		QPN: qpn, Type: a.Type, PD: a.PD, SendCQ: a.SendCQ, RecvCQ: a.RecvCQ, SRQ: a.SRQ,
		Caps: a.Caps, SigAll: a.SigAll, PortMTU: d.port.MTU(), Counters: d.countersOf(qpn), Kick: d.kick,
	})
	if err != nil {
		d.qps.Remove(qpn)
		return nil, fmt.Errorf("rnic: create QP: %w", err)
	}
	d.qps.Insert(qp)
	return qp, nil
}

// ModifyQP changes a QP's state and attributes (ibv_modify_qp). A wrong
// transition or attribute changes nothing.
func (d *Device) ModifyQP(qp *QP, attr *ib.QPAttr, mask ib.AttrMask) error {
	if qp.QPN == GSIQPN {
		return ErrGSI
	}
	d.sendHeldAck(qp) // owed for a message the application may have seen complete
	return qp.Modify(attr, mask)
}

// QueryQP returns a QP's state and attributes (ibv_query_qp).
func (d *Device) QueryQP(qp *QP) ib.QPAttr {
	qp.Lock()
	defer qp.Unlock()
	return qp.Attr
}

// DestroyQP destroys a QP (ibv_destroy_qp).
func (d *Device) DestroyQP(qp *QP) error {
	if qp.QPN == GSIQPN {
		return ErrGSI
	}
	d.awaitReceiveBatch(qp)
	d.sendHeldAck(qp)
	qp.Destroy()
	d.qps.Remove(qp.QPN)
	return nil
}

// awaitReceiveBatch returns once the receive batch in progress, if any,
// has ended. A batch pushes its completions before it sends the ACKs they
// owe (rx.Handler.Flush, one per QP at the batch's end), so an application
// may poll a receive completion and destroy the QP while the ACK is still
// to leave; without the wait the peer retries, against nobody, a message
// the application saw complete. A delayed ACK (sendHeldAck) is owed too.
// The batch is that of qp's engine, the only one that receives for it.
func (d *Device) awaitReceiveBatch(qp *QP) {
	q := d.queueOf(qp)
	q.recvMu.Lock()
	q.recvMu.Unlock()
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

// Counters returns the device's counters by name, the port's ICRC error
// count and the Flow Control Manager's (mlx5's names) among them.
func (d *Device) Counters() map[string]uint64 {
	m := d.queues[0].counters.Snapshot()
	for _, q := range d.queues[1:] {
		for name, v := range q.counters.Snapshot() {
			m[name] += v
		}
	}
	m[ib.ICRCErrors.String()] = d.PortStats().RxICRCErrors
	d.fc.Counters().Each(func(name string, v uint64) { m[name] = v })
	return m
}

// Port returns the device's port.
func (d *Device) Port() ibudp.Port { return d.port }

// QPs returns every QP of the device but QP1, which is the device's own
// (GSI), in QPN order (rdma res show qp).
func (d *Device) QPs() []*QP {
	all := d.qps.All()
	out := all[:0]
	for _, qp := range all {
		if qp.QPN != GSIQPN {
			out = append(out, qp)
		}
	}
	return out
}
