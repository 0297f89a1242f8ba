package hostif

import (
	"golang.org/x/sys/unix"

	"github.com/rnicd/rnicd/abi"
	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/rnic"
)

// cqObj is a CQ whose completions the engine writes into a ring in the
// client's memory: the ring is the device's (CQ.AttachRing), which writes
// each CQE, arms and wakes itself, as a NIC writes CQEs by DMA.
type cqObj struct {
	cq *rnic.CQ
	useCount
	ch     *chanObj // nil: no channel
	mem    []byte
	ring   *abi.Ring
	waitFD int // write end of the wake pipe whose read end the client waits on (wakePipe)
}

func (c *conn) createCQ(_ object, b abi.Body, _ []int) (abi.Body, []int, error) {
	r := b.(*abi.CreateCQReq)
	if r.CQE < 1 || r.CQE > rnic.MaxCQE {
		return nil, nil, errf(abi.CodeInvalid, "create_cq: %d entries outside 1..%d", r.CQE, rnic.MaxCQE)
	}
	var ch *chanObj
	if r.Channel != 0 {
		var err error
		if ch, err = lookup[*chanObj](c, r.Channel, kindChannel); err != nil {
			return nil, nil, err
		}
	}
	q, err := c.s.dev.CreateCQ(int(r.CQE))
	if err != nil {
		return nil, nil, errf(abi.CodeInvalid, "create_cq: %v", err)
	}
	fd, mem, err := ringMem(abi.RingBytes(r.CQE, abi.CQESlotBytes))
	if err != nil {
		return nil, nil, err
	}
	rd, wr, err := wakePipe()
	if err != nil {
		unix.Munmap(mem)
		unix.Close(fd)
		return nil, nil, err
	}
	ring, _ := abi.NewRing(mem, r.CQE, abi.CQESlotBytes)
	ring.WriteGeometry()
	o := &cqObj{cq: q, ch: ch, mem: mem, ring: ring, waitFD: wr}
	chFD := -1
	if ch != nil {
		ch.hold()
		chFD = ch.fd
	}
	q.AttachRing(ring, wr, chFD, &c.s.cqOverruns)
	h := c.add(o)
	c.watchCQ(q, h)
	return &abi.RingReply{H: h, Caps: ib.QPCap{MaxSendWR: int(r.CQE)},
		Send: abi.RingDesc{Size: uint32(len(mem)), Slots: r.CQE, SlotBytes: abi.CQESlotBytes}}, []int{fd, rd}, nil
}

func (*cqObj) kind() objKind { return kindCQ }
func (o *cqObj) cost() Quota { return cqCost(uint64(len(o.mem))) }

// release takes the ring from the device before the ring's memory and
// the wake pipes go: the engine's CQ may still be completing into it.
func (o *cqObj) release(*conn) error {
	o.cq.DetachRing()
	unix.Munmap(o.mem)
	unix.Close(o.waitFD)
	if o.ch != nil {
		o.ch.drop()
	}
	return nil
}
