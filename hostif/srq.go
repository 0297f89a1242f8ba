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
}

func (c *conn) createSRQ(_ object, b abi.Body, _ []int) (abi.Body, []int, error) {
	r := b.(*abi.CreateSRQReq)
	pd, err := lookup[*pdObj](c, r.PD, kindPD)
	if err != nil {
		return nil, nil, err
	}
	if r.MaxWR < 1 || r.MaxWR > ib.MaxQPWR || r.MaxSGE < 1 || r.MaxSGE > ib.MaxSGE || r.Limit > r.MaxWR {
		return nil, nil, errf(abi.CodeInvalid, "create_srq: %d WRs x %d SGEs, limit %d", r.MaxWR, r.MaxSGE, r.Limit)
	}
	s, err := c.s.dev.CreateSRQ(pd.pd, int(r.MaxWR), int(r.MaxSGE))
	if err != nil {
		return nil, nil, errf(abi.CodeInvalid, "create_srq: %v", err)
	}
	if r.Limit > 0 {
		s.SetLimit(int(r.Limit))
	}
	slot := abi.RecvSlotBytes(int(r.MaxSGE))
	fd, mem, err := ringMem(abi.RingBytes(r.MaxWR, slot))
	if err != nil {
		return nil, nil, err
	}
	ring, _ := abi.NewRing(mem, r.MaxWR, slot)
	ring.WriteGeometry()
	pd.hold()
	so := &srqObj{owner: c, pd: pd, srq: s, maxWR: int(r.MaxWR), maxSGE: int(r.MaxSGE), mem: mem}
	h := c.add(so)
	c.watchSRQ(s, h)
	so.ring = c.s.dev.AttachSRQRing(s, ring, int(r.MaxSGE), uint32(h), &c.s.badWQEs)
	return &abi.RingReply{H: h, Caps: ib.QPCap{MaxRecvWR: int(r.MaxWR), MaxRecvSGE: int(r.MaxSGE)},
		Recv: abi.RingDesc{Size: uint32(len(mem)), Slots: r.MaxWR, SlotBytes: slot}}, []int{fd}, nil
}

func (*srqObj) kind() objKind { return kindSRQ }
func (o *srqObj) cost() Quota { return srqCost(uint64(len(o.mem))) }

func (o *srqObj) release(c *conn) error {
	o.srq.SetLimitHandler(nil)
	c.s.dev.DetachSRQRing(o.ring)
	unix.Munmap(o.mem)
	o.pd.drop()
	return nil
}
