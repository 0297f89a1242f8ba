package hostif

import (
	"sync/atomic"

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
	mem      []byte
	sq       *abi.Ring
	sqRing   *rnic.SendRing // the device's view of sq: it fetches and retires
	rqRing   *rnic.RecvRing // the device's view of the receive ring; nil with an SRQ
	broken   atomic.Bool    // a garbage receive producer index: doorbells are refused
	// rqSeen is the receive ring's producer index at the last receive
	// doorbell or poll, for the polling engine to tell a new post.
	rqSeen atomic.Uint32
}

// isBroken reports whether a ring of the QP had a garbage producer index:
// doorbells are refused until the QP is reset.
func (q *qpObj) isBroken() bool { return q.broken.Load() || q.sqRing.Broken() }

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
	q.sq, _ = abi.NewRing(mem[:sqBytes], uint32(caps.MaxSendWR), sqSlot)
	q.sq.WriteGeometry()
	reply := &abi.RingReply{QPN: qp.QPN, Caps: caps,
		Send: abi.RingDesc{Offset: 0, Size: uint32(sqBytes), Slots: uint32(caps.MaxSendWR), SlotBytes: sqSlot}}
	if srq == nil {
		rq, _ := abi.NewRing(mem[sqBytes:], uint32(caps.MaxRecvWR), rqSlot)
		rq.WriteGeometry()
		q.rqRing = qp.RQ.AttachRing(rq, caps.MaxRecvSGE)
		reply.Recv = abi.RingDesc{Offset: uint32(sqBytes), Size: uint32(total - sqBytes), Slots: uint32(caps.MaxRecvWR), SlotBytes: rqSlot}
	}
	pd.hold()
	scq.hold()
	rcq.hold()
	if srq != nil {
		srq.hold()
	}
	// The send ring is the device's from here on, as a NIC's QP context
	// holds its send queue's address: it fetches, decodes and retires
	// without calling back into the host interface.
	q.sqRing = qp.AttachSendRing(q.sq)
	c.s.qps.Store(qp.QPN, q)
	reply.H = c.add(q)
	c.s.dev.Watch(q, qp.QPN)
	return reply, []int{fd}, nil
}

func (c *conn) modifyQP(o object, b abi.Body, _ []int) (abi.Body, []int, error) {
	r, q := b.(*abi.ModifyQPReq), o.(*qpObj)
	if err := c.s.dev.ModifyQP(q.qp, &r.Attr, r.Mask); err != nil {
		return nil, nil, errf(abi.CodeInvalid, "modify_qp: %v", err)
	}
	if r.Mask&ib.AttrState != 0 && r.Attr.State == ib.QPSReset {
		// RESET empties the queues without completions (nothing is
		// retired, nothing will be): the rings start again from 0, on
		// both sides.
		q.sqRing.Reset()
		q.broken.Store(false)
		if q.rqRing != nil {
			q.qp.RQ.SetSource(nil)
			q.rqRing.Reset()
			q.rqSeen.Store(0)
			q.qp.RQ.SetSource(q.rqRing)
		}
	}
	return &abi.Empty{}, nil, nil
}

func (c *conn) queryQP(o object, _ abi.Body, _ []int) (abi.Body, []int, error) {
	q := o.(*qpObj)
	return &abi.QPAttrReply{Attr: c.s.dev.QueryQP(q.qp)}, nil, nil
}

func (*qpObj) kind() objKind { return kindQP }
func (q *qpObj) cost() Quota { return qpCost(uint64(len(q.mem))) }

// release destroys the QP; its outstanding WQEs complete no more
// (ibv_destroy_qp).
func (q *qpObj) release(c *conn) error {
	c.s.dev.Unwatch(q)
	c.s.dev.DestroyQP(q.qp)
	c.s.qps.Delete(q.qp.QPN)
	// Nothing retires into the rings once their memory is gone.
	q.qp.AttachSendRing(nil)
	if q.rqRing != nil {
		q.qp.RQ.SetSource(nil)
	}
	c.s.dev.Fence()
	unix.Munmap(q.mem)
	q.pd.drop()
	q.scq.drop()
	q.rcq.drop()
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

// fetchSend rings the device's send doorbell of q: the device fetches
// from the send ring it was handed (rnic.SendRing) and fails what does
// not decode or validate.
func (c *conn) fetchSend(q *qpObj) error {
	failed, err := c.s.dev.FetchSend(q.qp)
	c.s.badWQEs.Add(uint64(failed))
	if err != nil {
		return errf(abi.CodeInvalid, "doorbell: %v", err)
	}
	return nil
}

// failQP moves a QP to ERR for a fault of its rings.
func (c *conn) failQP(q *qpObj) {
	c.s.badWQEs.Add(1)
	c.s.dev.EnterError(q.qp)
}

func (c *conn) fetchRecv(q *qpObj) error {
	qp := q.qp
	c.s.dev.RefillRecv(qp)
	bad, broken := q.rqRing.Faults()
	if broken != nil {
		q.broken.Store(true)
		c.failQP(q)
		return errf(abi.CodeInvalid, "doorbell: QP %#x receive queue: %v", qp.QPN, broken)
	}
	for _, b := range bad {
		c.s.badWQEs.Add(1)
		c.s.dev.FailRecv(qp, b.WRID)
	}
	if len(bad) > 0 {
		return errf(abi.CodeInvalid, "doorbell: QP %#x receive WQE wr_id %d: %v", qp.QPN, bad[0].WRID, bad[0].Err)
	}
	return nil
}
