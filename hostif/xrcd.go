package hostif

import (
	"golang.org/x/sys/unix"

	"github.com/rnicd/rnicd/abi"
	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/rnic"
)

// XRC's objects (IBTA annex A14). A domain is its client's alone: the
// handles that name it are the client's, and the one thing the wire can
// name, an XRC SRQ's number, reaches only the SRQs of the target QP's
// domain (rnic/rx/xrc.go), so no client's traffic lands in another's.
// Processes share a domain by opening it through one file
// (openXRCDFile), as with the kernel's.

// xrcdObj is an XRC domain.
type xrcdObj struct {
	useCount
	xrcd *rnic.XRCD
}

func (*xrcdObj) kind() objKind { return kindXRCD }
func (*xrcdObj) cost() Quota   { return costXRCD }
func (o *xrcdObj) release(c *conn) error {
	c.s.dev.CloseXRCD(o.xrcd)
	return nil
}

var costXRCD = Quota{ResXRCDs: 1}

func (c *conn) openXRCD(object, abi.Body, []int) (abi.Body, []int, error) {
	return &abi.Handle{H: c.add(&xrcdObj{xrcd: c.s.dev.OpenXRCD()})}, nil, nil
}

// openXRCDFile opens the domain shared through the file the client
// sent, keyed by its device and inode as the kernel keys it: the
// client holds the file open, which is the kernel's whole check too.
// Clients of this daemon that open the same file share the domain: a
// target QP of one may deliver into an XRC SRQ of another, as XRC is
// meant to let processes do.
func (c *conn) openXRCDFile(_ object, b abi.Body, fds []int) (abi.Body, []int, error) {
	r := b.(*abi.OpenXRCDFileReq)
	// Held open, as the kernel's fdget has it: not an O_PATH descriptor,
	// which anyone may open of a file they cannot read (another user's
	// mode 0600 domain file) and which the kernel refuses.
	if fl, err := unix.FcntlInt(uintptr(fds[0]), unix.F_GETFL, 0); err != nil || fl&unix.O_PATH != 0 {
		return nil, nil, errf(abi.CodeInvalid, "open_xrcd: the domain's file must be open, not an O_PATH descriptor (EBADF from the kernel)")
	}
	var st unix.Stat_t
	if err := unix.Fstat(fds[0], &st); err != nil {
		return nil, nil, errf(abi.CodeInvalid, "open_xrcd: fstat of the domain's file: %v", err)
	}
	x, err := c.s.dev.OpenXRCDFile(rnic.XRCDFile{Dev: st.Dev, Ino: st.Ino}, r.OFlags&unix.O_CREAT != 0, r.OFlags&unix.O_EXCL != 0)
	if err != nil {
		return nil, nil, errf(abi.CodeInvalid, "%v", err)
	}
	return &abi.Handle{H: c.add(&xrcdObj{xrcd: x})}, nil, nil
}

// createXRCSRQ makes an XRC SRQ: an SRQ (srqObj, fed and destroyed as
// any) that the device also knows by number in its domain.
func (c *conn) createXRCSRQ(_ object, b abi.Body, _ []int) (abi.Body, []int, error) {
	r := b.(*abi.CreateXRCSRQReq)
	pd, err := lookup[*pdObj](c, r.PD, kindPD)
	if err != nil {
		return nil, nil, err
	}
	x, err := lookup[*xrcdObj](c, r.XRCD, kindXRCD)
	if err != nil {
		return nil, nil, err
	}
	cq, err := lookup[*cqObj](c, r.CQ, kindCQ)
	if err != nil {
		return nil, nil, err
	}
	sizes := &abi.CreateSRQReq{PD: r.PD, MaxWR: r.MaxWR, MaxSGE: r.MaxSGE, Limit: r.Limit}
	if err := checkSRQ("create_srq_ex", sizes); err != nil {
		return nil, nil, err
	}
	s, err := c.s.dev.CreateXRCSRQ(pd.pd, x.xrcd, cq.cq, int(r.MaxWR), int(r.MaxSGE))
	if err != nil {
		return nil, nil, errf(abi.CodeInvalid, "create_srq_ex: %v", err)
	}
	// The SRQ holds its domain and CQ (releaseXRC lets them go) as any
	// SRQ its PD (attachSRQ).
	x.hold()
	cq.hold()
	return c.attachSRQ(&srqObj{owner: c, pd: pd, srq: s.Queue, xrc: s, xrcd: x, cq: cq}, sizes)
}

// releaseXRC takes an XRC SRQ out of the device before its ring goes.
func (o *srqObj) releaseXRC(c *conn) {
	if o.xrc == nil {
		return
	}
	c.s.dev.DestroyXRCSRQ(o.xrc)
	o.xrcd.drop()
	o.cq.drop()
}

// createXRCQP makes an XRC QP: an initiator with its send ring, or a
// target with no ring of its own (its rings' memory holds their
// headers only).
func (c *conn) createXRCQP(_ object, b abi.Body, _ []int) (abi.Body, []int, error) {
	r := b.(*abi.CreateXRCQPReq)
	q := &qpObj{owner: c}
	var (
		pd  rnic.PD
		scq *rnic.CQ
		x   *rnic.XRCD
		err error
	)
	switch r.Type {
	case ib.QPTypeXRCSend:
		if q.pd, err = lookup[*pdObj](c, r.PD, kindPD); err != nil {
			return nil, nil, err
		}
		if q.scq, err = lookup[*cqObj](c, r.SendCQ, kindCQ); err != nil {
			return nil, nil, err
		}
		pd, scq = q.pd.pd, q.scq.cq
	case ib.QPTypeXRCRecv:
		if q.xrcd, err = lookup[*xrcdObj](c, r.XRCD, kindXRCD); err != nil {
			return nil, nil, err
		}
		x = q.xrcd.xrcd
	default:
		return nil, nil, errf(abi.CodeInvalid, "create_qp_ex: QP type %v is not XRC's", r.Type)
	}
	qp, err := c.s.dev.CreateXRCQP(r.Type, pd, scq, x, r.Caps, r.SigAll)
	if err != nil {
		return nil, nil, errf(abi.CodeInvalid, "create_qp_ex: %v", err)
	}
	caps := qp.Caps
	sqSlot := abi.SendSlotBytes(caps.MaxSendSGE, caps.MaxInlineData)
	sqBytes := abi.RingBytes(uint32(caps.MaxSendWR), sqSlot)
	fd, mem, err := ringMem(sqBytes)
	if err != nil {
		c.s.dev.DestroyQP(qp)
		return nil, nil, err
	}
	q.qp, q.mem = qp, mem
	sq, _ := abi.NewRing(mem, uint32(caps.MaxSendWR), sqSlot)
	sq.WriteGeometry()
	if q.xrcd != nil {
		q.xrcd.hold()
	} else {
		q.pd.hold()
		q.scq.hold()
	}
	q.rings = c.s.dev.AttachQPRings(qp, sq, nil, 0, &c.s.badWQEs)
	c.s.qps.Store(qp.QPN, q)
	h := c.add(q)
	c.watchQP(qp, h)
	return &abi.RingReply{H: h, QPN: qp.QPN, Caps: caps,
		Send: abi.RingDesc{Size: uint32(sqBytes), Slots: uint32(caps.MaxSendWR), SlotBytes: sqSlot}}, []int{fd}, nil
}

func createXRCSRQCost(b abi.Body) Quota {
	r := b.(*abi.CreateXRCSRQReq)
	return createSRQCost(&abi.CreateSRQReq{MaxWR: r.MaxWR, MaxSGE: r.MaxSGE})
}

func createXRCQPCost(b abi.Body) Quota {
	c := b.(*abi.CreateXRCQPReq).Caps
	return qpCost(abi.RingBytes(clamp(c.MaxSendWR, ib.MaxQPWR), abi.SendSlotBytes(int(clamp(c.MaxSendSGE, ib.MaxSGE)), int(clamp(c.MaxInlineData, ib.MaxInlineData)))))
}
