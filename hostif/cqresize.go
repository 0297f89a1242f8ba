package hostif

import (
	"golang.org/x/sys/unix"

	"github.com/rnicd/rnicd/abi"
	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/rnic"
)

// resizeCQ gives a CQ a new ring of r.CQE entries (ibv_resize_cq): the
// device moves the waiting completions into it under the CQ's lock
// (CQ.ResizeRing) while engines may be completing into the CQ, and the
// reply hands the client the new ring's memfd, sealed as create_cq's.
// The wake pipes stay. The ring's bytes are charged as create_cq charges
// them: a larger ring is charged the difference before anything is
// allocated, a smaller one refunds it once it is in place.
func (c *conn) resizeCQ(t object, b abi.Body, _ []int) (abi.Body, []int, error) {
	r := b.(*abi.ResizeCQReq)
	o := t.(*cqObj)
	if r.CQE < 1 || r.CQE > rnic.MaxCQE {
		return nil, nil, errf(abi.CodeInvalid, "resize_cq: %d entries outside 1..%d", r.CQE, rnic.MaxCQE)
	}
	oldBytes, newBytes := uint64(len(o.mem)), abi.RingBytes(r.CQE, abi.CQESlotBytes)
	var grow, shrink Quota
	if newBytes > oldBytes {
		grow[ResRingBytes] = newBytes - oldBytes
	} else {
		shrink[ResRingBytes] = oldBytes - newBytes
	}
	if err := c.s.acct.charge("resize_cq", c.pid, grow); err != nil {
		return nil, nil, c.overLimit(err)
	}
	fd, mem, err := ringMem(newBytes)
	if err != nil {
		c.s.acct.refund(c.pid, grow)
		return nil, nil, err
	}
	ring, _ := abi.NewRing(mem, r.CQE, abi.CQESlotBytes)
	ring.WriteGeometry()
	if _, err := o.cq.ResizeRing(ring); err != nil {
		unix.Munmap(mem)
		unix.Close(fd)
		c.s.acct.refund(c.pid, grow)
		return nil, nil, errf(abi.CodeInvalid, "resize_cq of CQ %d to %d entries: %v", r.H, r.CQE, err)
	}
	unix.Munmap(o.mem)
	o.mem, o.ring = mem, ring
	c.s.acct.refund(c.pid, shrink)
	return &abi.RingReply{H: r.H, Caps: ib.QPCap{MaxSendWR: int(r.CQE)},
		Send: abi.RingDesc{Size: uint32(len(mem)), Slots: r.CQE, SlotBytes: abi.CQESlotBytes}}, []int{fd}, nil
}
