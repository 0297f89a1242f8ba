package hostif

import (
	"errors"

	"golang.org/x/sys/unix"

	"github.com/rnicd/rnicd/abi"
	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/rnic"
)

// qpObj is a client's QP with its two rings.
type qpObj struct {
	noUsers
	owner    *conn
	qp       *rnic.QP
	pd       *pdObj
	scq, rcq *cqObj
	srq      *srqObj
	xrcd     *xrcdObj // an XRC target's, which has no PD nor CQs (xrcd.go)
	mem      []byte
	rings    *rnic.QPRings // the device's: it polls, fetches and retires
	// groups are the multicast GIDs the QP is attached to, each charged
	// to the client (ResMcast); under the conn's handling.
	groups map[[16]byte]bool
}

func (c *conn) createQP(_ object, b abi.Body, _ []int) (abi.Body, []int, error) {
	r := b.(*abi.CreateQPReq)
	pd, err := lookup[*pdObj](c, r.PD, kindPD)
	if err != nil {
		return nil, nil, err
	}
	scq, err := lookup[*cqObj](c, r.SendCQ, kindCQ)
	if err != nil {
		return nil, nil, err
	}
	rcq, err := lookup[*cqObj](c, r.RecvCQ, kindCQ)
	if err != nil {
		return nil, nil, err
	}
	var srq *srqObj
	if r.SRQ != 0 {
		if srq, err = lookup[*srqObj](c, r.SRQ, kindSRQ); err != nil {
			return nil, nil, err
		}
		if srq.pd != pd {
			return nil, nil, errf(abi.CodeInvalid, "create_qp: SRQ %d is of another PD", r.SRQ)
		}
		if srq.xrc != nil {
			return nil, nil, errf(abi.CodeInvalid, "create_qp: SRQ %d is an XRC SRQ: only XRC targets reach it", r.SRQ)
		}
	}
	ia := rnic.QPInitAttr{PD: pd.pd, Type: r.Type, SendCQ: scq.cq, RecvCQ: rcq.cq, Caps: r.Caps, SigAll: r.SigAll}
	if srq != nil {
		ia.SRQ = srq.srq
		ia.Caps.MaxRecvWR, ia.Caps.MaxRecvSGE = 0, 0
	}
	qp, err := c.s.dev.CreateQP(ia)
	if err != nil {
		return nil, nil, errf(abi.CodeInvalid, "create_qp: %v", err)
	}
	caps := qp.Caps
	sqSlot := abi.SendSlotBytes(caps.MaxSendSGE, caps.MaxInlineData)
	sqBytes := abi.RingBytes(uint32(caps.MaxSendWR), sqSlot)
	total := sqBytes
	var rqSlot uint32
	if srq == nil {
		rqSlot = abi.RecvSlotBytes(caps.MaxRecvSGE)
		total += abi.RingBytes(uint32(caps.MaxRecvWR), rqSlot)
	}
	fd, mem, err := ringMem(total)
	if err != nil {
		c.s.dev.DestroyQP(qp)
		return nil, nil, err
	}
	q := &qpObj{owner: c, qp: qp, pd: pd, scq: scq, rcq: rcq, srq: srq, mem: mem}
	sq, _ := abi.NewRing(mem[:sqBytes], uint32(caps.MaxSendWR), sqSlot)
	sq.WriteGeometry()
	var rq *abi.Ring
	reply := &abi.RingReply{QPN: qp.QPN, Caps: caps,
		Send: abi.RingDesc{Offset: 0, Size: uint32(sqBytes), Slots: uint32(caps.MaxSendWR), SlotBytes: sqSlot}}
	if srq == nil {
		rq, _ = abi.NewRing(mem[sqBytes:], uint32(caps.MaxRecvWR), rqSlot)
		rq.WriteGeometry()
		reply.Recv = abi.RingDesc{Offset: uint32(sqBytes), Size: uint32(total - sqBytes), Slots: uint32(caps.MaxRecvWR), SlotBytes: rqSlot}
	}
	pd.hold()
	scq.hold()
	rcq.hold()
	if srq != nil {
		srq.hold()
	}
	// The rings are the device's from here on, as a NIC's QP context
	// holds its queues' addresses: it polls, fetches, decodes and
	// retires without calling back into the host interface.
	q.rings = c.s.dev.AttachQPRings(qp, sq, rq, caps.MaxRecvSGE, &c.s.badWQEs)
	c.s.qps.Store(qp.QPN, q)
	reply.H = c.add(q)
	c.watchQP(qp, reply.H)
	return reply, []int{fd}, nil
}

func (c *conn) modifyQP(o object, b abi.Body, _ []int) (abi.Body, []int, error) {
	r, q := b.(*abi.ModifyQPReq), o.(*qpObj)
	// Through the rings: a modify to RESET resets them too, with no
	// fetch of the polling engine's in between.
	if err := q.rings.Modify(&r.Attr, r.Mask); err != nil {
		return nil, nil, errf(abi.CodeInvalid, "modify_qp: %v", err)
	}
	return &abi.Empty{}, nil, nil
}

func (c *conn) queryQP(o object, _ abi.Body, _ []int) (abi.Body, []int, error) {
	q := o.(*qpObj)
	return &abi.QPAttrReply{Attr: c.s.dev.QueryQP(q.qp)}, nil, nil
}

// attachMcast attaches the QP to a multicast group (ibv_attach_mcast):
// over a limit is ENOMEM, as rxe answers; anything else wrong EINVAL.
// Each attachment is charged to the client (ResMcast), so that no
// client takes all of the device's groups.
func (c *conn) attachMcast(o object, b abi.Body, _ []int) (abi.Body, []int, error) {
	r, q := b.(*abi.McastReq), o.(*qpObj)
	if err := c.s.dev.CheckAttachMcast(q.qp, r.GID); err != nil {
		return nil, nil, errf(abi.CodeInvalid, "attach_mcast: %v", err)
	}
	charged := !q.groups[r.GID]
	if charged {
		if err := c.s.acct.charge(abi.KindAttachMcast.String(), c.pid, mcastCost); err != nil {
			return nil, nil, c.overLimit(err)
		}
	}
	if err := c.s.dev.AttachMcast(q.qp, r.GID); err != nil {
		if charged {
			c.s.acct.refund(c.pid, mcastCost)
		}
		code := abi.CodeInvalid
		if errors.Is(err, rnic.ErrMcastLimit) {
			code = abi.CodeLimit
		}
		return nil, nil, errf(code, "attach_mcast: %v", err)
	}
	if q.groups == nil {
		q.groups = map[[16]byte]bool{}
	}
	q.groups[r.GID] = true
	return &abi.Empty{}, nil, nil
}

// detachMcast detaches the QP from a group (ibv_detach_mcast).
func (c *conn) detachMcast(o object, b abi.Body, _ []int) (abi.Body, []int, error) {
	r, q := b.(*abi.McastReq), o.(*qpObj)
	if err := c.s.dev.DetachMcast(q.qp, r.GID); err != nil {
		return nil, nil, errf(abi.CodeInvalid, "detach_mcast: %v", err)
	}
	if q.groups[r.GID] {
		delete(q.groups, r.GID)
		c.s.acct.refund(c.pid, mcastCost)
	}
	return &abi.Empty{}, nil, nil
}

func (*qpObj) kind() objKind { return kindQP }
func (q *qpObj) cost() Quota {
	c := qpCost(uint64(len(q.mem)))
	c[ResMcast] = uint64(len(q.groups)) // a destroyed QP leaves its groups (rnic.Device.DestroyQP)
	return c
}

// release destroys the QP; its outstanding WQEs complete no more
// (ibv_destroy_qp).
func (q *qpObj) release(c *conn) error {
	q.qp.SetEventHandler(nil)
	q.rings.StopPolling()
	// What the client posted to an RTS QP and the engine has not
	// fetched yet goes to the device, whose destroy sends it
	// (rnic.Device.DestroyQP): a client whose doorbell the polling engine
	// spared has rung none.
	if !q.rings.Broken() && c.s.dev.QueryQP(q.qp).State == ib.QPSRTS {
		q.rings.SendDoorbell()
	}
	c.s.dev.DestroyQP(q.qp)
	c.s.qps.Delete(q.qp.QPN)
	// Nothing retires into the rings once their memory is gone.
	c.s.dev.DetachQPRings(q.rings)
	c.s.dev.Fence()
	unix.Munmap(q.mem)
	switch {
	case q.xrcd != nil:
		q.xrcd.drop()
	case q.rcq == nil: // an XRC initiator
		q.pd.drop()
		q.scq.drop()
	default:
		q.pd.drop()
		q.scq.drop()
		q.rcq.drop()
	}
	if q.srq != nil {
		q.srq.drop()
	}
	return nil
}

// flushQP moves the QP of a client that died to ERR, so that its WQEs
// are flushed before it is destroyed.
func (c *conn) flushQP(q *qpObj) {
	// A client that exits without destroying its QPs may have polled a
	// completion whose ACK the receive batch has yet to send, and ERR
	// would stop it: let the batch end first (Fence waits for it).
	c.s.dev.Fence()
	c.s.dev.EnterError(q.qp)
}
