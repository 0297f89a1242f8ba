package hostif

import (
	"golang.org/x/sys/unix"

	"github.com/rnicd/rnicd/abi"
	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/rnic"
)

// srqObj is a shared receive queue fed from a ring.
type srqObj struct {
	useCount
	owner  *conn
	pd     *pdObj
	srq    *rnic.SRQ
	maxWR  int
	maxSGE int
	mem    []byte
	ring   *rnic.SRQRing // the device's: it polls and fetches
	// An XRC SRQ's number, domain and CQ (xrcd.go); xrc nil for others.
	xrc  *rnic.XRCSRQ
	xrcd *xrcdObj
	cq   *cqObj
}

func (c *conn) createSRQ(_ object, b abi.Body, _ []int) (abi.Body, []int, error) {
	r := b.(*abi.CreateSRQReq)
	pd, err := lookup[*pdObj](c, r.PD, kindPD)
	if err != nil {
		return nil, nil, err
	}
	if err := checkSRQ("create_srq", r); err != nil {
		return nil, nil, err
	}
	s, err := c.s.dev.CreateSRQ(pd.pd, int(r.MaxWR), int(r.MaxSGE))
	if err != nil {
		return nil, nil, errf(abi.CodeInvalid, "create_srq: %v", err)
	}
	return c.attachSRQ(&srqObj{owner: c, pd: pd, srq: s}, r)
}

// checkSRQ checks an SRQ's sizes against the device's.
func checkSRQ(what string, r *abi.CreateSRQReq) error {
	if r.MaxWR < 1 || r.MaxWR > ib.MaxQPWR || r.MaxSGE < 1 || r.MaxSGE > ib.MaxSGE || r.Limit > r.MaxWR {
		return errf(abi.CodeInvalid, "%s: %d WRs x %d SGEs, limit %d", what, r.MaxWR, r.MaxSGE, r.Limit)
	}
	return nil
}

// attachSRQ gives so, whose SRQ the device made to r's sizes, its ring
// and a handle.
func (c *conn) attachSRQ(so *srqObj, r *abi.CreateSRQReq) (abi.Body, []int, error) {
	if r.Limit > 0 {
		so.srq.SetLimit(int(r.Limit))
	}
	slot := abi.RecvSlotBytes(int(r.MaxSGE))
	fd, mem, err := ringMem(abi.RingBytes(r.MaxWR, slot))
	if err != nil {
		so.releaseXRC(c)
		return nil, nil, err
	}
	ring, _ := abi.NewRing(mem, r.MaxWR, slot)
	ring.WriteGeometry()
	so.pd.hold()
	so.maxWR, so.maxSGE, so.mem = int(r.MaxWR), int(r.MaxSGE), mem
	h := c.add(so)
	c.watchSRQ(so.srq, h)
	so.ring = c.s.dev.AttachSRQRing(so.srq, ring, int(r.MaxSGE), uint32(h), &c.s.badWQEs)
	reply := &abi.RingReply{H: h, Caps: ib.QPCap{MaxRecvWR: int(r.MaxWR), MaxRecvSGE: int(r.MaxSGE)},
		Recv: abi.RingDesc{Size: uint32(len(mem)), Slots: r.MaxWR, SlotBytes: slot}}
	if so.xrc != nil {
		reply.QPN = so.xrc.Num
	}
	return reply, []int{fd}, nil
}

func (*srqObj) kind() objKind { return kindSRQ }
func (o *srqObj) cost() Quota { return srqCost(uint64(len(o.mem))) }

func (o *srqObj) release(c *conn) error {
	o.srq.SetLimitHandler(nil)
	o.releaseXRC(c)
	c.s.dev.DetachSRQRing(o.ring)
	unix.Munmap(o.mem)
	o.pd.drop()
	return nil
}
