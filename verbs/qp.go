package verbs

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"sync"

	"github.com/rnicd/rnicd/abi"
)

// QPInitAttr is what CreateQP needs (ibv_qp_init_attr).
type QPInitAttr struct {
	Type   QPType
	SendCQ *CQ
	RecvCQ *CQ
	SRQ    *SRQ
	Cap    QPCap
	SigAll bool
}

// QP is a queue pair (ibv_qp).
type QP struct {
	pd  *PD
	h   uint32
	QPN uint32
	Cap QPCap // the queue sizes the QP got
	typ QPType
	mem []byte

	mu     sync.Mutex
	sq, rq *abi.Ring // rq nil with an SRQ
	sqProd uint32
	rqProd uint32
	state  QPState // as the last Modify left it
}

// CreateQP creates a QP in RESET (ibv_create_qp).
func (pd *PD) CreateQP(a QPInitAttr) (*QP, error) {
	if a.SendCQ == nil || a.RecvCQ == nil {
		return nil, errors.New("verbs: create QP: needs a send CQ and a receive CQ")
	}
	c := a.Cap
	if c.MaxSendWR < 0 || c.MaxRecvWR < 0 || c.MaxSendSGE < 0 || c.MaxRecvSGE < 0 || c.MaxInlineData < 0 {
		return nil, fmt.Errorf("verbs: create QP: negative caps %+v", c)
	}
	req := &abi.CreateQPReq{PD: pd.h, SendCQ: a.SendCQ.h, RecvCQ: a.RecvCQ.h, Type: a.Type, SigAll: a.SigAll, Caps: a.Cap}
	if a.SRQ != nil {
		req.SRQ = a.SRQ.h
	}
	var r abi.RingReply
	fds, err := pd.ctx.call(abi.KindCreateQP, req, nil, &r)
	if err != nil {
		return nil, err
	}
	mem, sq, err := mapRing(fds, r.Send)
	if err != nil {
		pd.ctx.destroy(abi.KindDestroyQP, r.H)
		return nil, err
	}
	qp := &QP{pd: pd, h: r.H, QPN: r.QPN, Cap: r.Caps, typ: a.Type, mem: mem, sq: sq, state: QPSReset}
	pd.ctx.track(r.H, qp)
	if r.Recv.Size != 0 {
		qp.rq, err = abi.NewRing(mem[r.Recv.Offset:uint64(r.Recv.Offset)+uint64(r.Recv.Size)], r.Recv.Slots, r.Recv.SlotBytes)
		if err != nil {
			qp.Destroy()
			return nil, err
		}
	}
	return qp, nil
}

// Modify changes the QP's state and attributes (ibv_modify_qp).
func (qp *QP) Modify(attr *QPAttr, mask AttrMask) error {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if _, err := qp.pd.ctx.call(abi.KindModifyQP, &abi.ModifyQPReq{H: qp.h, Mask: mask, Attr: *attr}, nil, &abi.Empty{}); err != nil {
		return err
	}
	if mask&AttrState != 0 {
		qp.state = attr.State
		if attr.State == QPSReset {
			qp.sqProd, qp.rqProd = 0, 0 // the NIC reset the rings too
		}
	}
	return nil
}

// Query returns the QP's attributes (ibv_query_qp).
func (qp *QP) Query() (QPAttr, error) {
	var r abi.QPAttrReply
	if _, err := qp.pd.ctx.call(abi.KindQueryQP, &abi.Handle{H: qp.h}, nil, &r); err != nil {
		return QPAttr{}, err
	}
	return r.Attr, nil
}

// PostSend posts send WRs (ibv_post_send): it writes them into the send
// ring and rings the doorbell. A WR that does not fit (the queue is full,
// too many SGEs, too much inline data) is refused with a *WRError
// and the ones after it are not posted; errors the NIC finds when it
// fetches a WQE come back as error completions.
func (qp *QP) PostSend(wrs []SendWR) error {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if qp.sq == nil {
		return ErrClosed
	}
	switch qp.state {
	case QPSRTS, QPSSQD, QPSErr:
	default:
		return fmt.Errorf("verbs: post send in %v: %w", qp.state, ErrQPState)
	}
	var bad error
	for i := range wrs {
		wr := &wrs[i]
		var err error
		switch {
		case qp.sqProd-qp.sq.Consumer() >= qp.sq.Slots:
			err = ErrQueueFull
		case wr.Flags&SendInline != 0 && len(wr.InlineData) > qp.Cap.MaxInlineData:
			err = fmt.Errorf("verbs: %d bytes inline, QP allows %d", len(wr.InlineData), qp.Cap.MaxInlineData)
		case wr.Flags&SendInline == 0 && len(wr.SGL) > qp.Cap.MaxSendSGE:
			err = fmt.Errorf("verbs: %d SGEs, QP allows %d", len(wr.SGL), qp.Cap.MaxSendSGE)
		default:
			err = abi.EncodeSendWQE(qp.sq.Slot(qp.sqProd), wr)
		}
		if err != nil {
			bad = &WRError{Index: i, WRID: wr.WRID, Err: err}
			break
		}
		qp.sqProd++
	}
	qp.sq.SetProducer(qp.sqProd)
	// The daemon's engine, awake, polls the producer index: no system
	// call. Asleep, it needs the doorbell, unless one is on its way
	// already, whose fetch takes these too.
	if !qp.sq.EngineAsleep() || !qp.sq.RingBell() {
		return bad
	}
	if err := qp.pd.ctx.doorbell(qp.h, abi.DoorbellSend); err != nil && bad == nil {
		bad = err
	}
	return bad
}

// PostRecv posts receive WRs (ibv_post_recv) into the receive ring and
// rings the doorbell.
func (qp *QP) PostRecv(wrs []RecvWR) error {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if qp.sq == nil {
		return ErrClosed
	}
	if qp.rq == nil {
		return errors.New("verbs: QP uses an SRQ; post to the SRQ")
	}
	if qp.state == QPSReset {
		return fmt.Errorf("verbs: post recv in RESET: %w", ErrQPState)
	}
	err := postRecv(qp.rq, &qp.rqProd, qp.Cap.MaxRecvSGE, wrs)
	if !qp.rq.EngineAsleep() {
		return err // the engine polls the ring
	}
	if err2 := qp.pd.ctx.doorbell(qp.h, abi.DoorbellRecv); err == nil {
		err = err2
	}
	return err
}

// Destroy destroys the QP (ibv_destroy_qp).
func (qp *QP) Destroy() error {
	if err := qp.pd.ctx.destroy(abi.KindDestroyQP, qp.h); err != nil {
		return err
	}
	qp.mu.Lock()
	defer qp.mu.Unlock()
	unix.Munmap(qp.mem)
	qp.sq, qp.rq, qp.mem = nil, nil, nil
	return nil
}

// AttachMcast attaches the UD QP to the multicast group of gid
// (ibv_attach_mcast): for RoCEv2 the group's IP address as a GID,
// IPv4-mapped for IPv4 (rdma_cm's MGID). The QP then receives the
// group's datagrams whose Q_Key is its own; a UD SEND to an AH whose DGID
// is gid, remote QPN 0xFFFFFF, reaches every QP attached to the group.
func (qp *QP) AttachMcast(gid GID) error {
	_, err := qp.pd.ctx.call(abi.KindAttachMcast, &abi.McastReq{H: qp.h, GID: gid}, nil, &abi.Empty{})
	return err
}

// DetachMcast detaches the QP from the group of gid (ibv_detach_mcast).
func (qp *QP) DetachMcast(gid GID) error {
	_, err := qp.pd.ctx.call(abi.KindDetachMcast, &abi.McastReq{H: qp.h, GID: gid}, nil, &abi.Empty{})
	return err
}
