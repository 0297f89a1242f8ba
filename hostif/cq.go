package hostif

import (
	"sync"

	"golang.org/x/sys/unix"

	"github.com/rnicd/rnicd/hostif/abi"
	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/rnic"
)

// cqObj is a CQ whose completions the engine writes into a ring in the
// client's memory (the CQ's sink).
type cqObj struct {
	s  *Server
	cq *rnic.CQ
	useCount
	ch     *chanObj // nil: no channel
	mem    []byte
	ring   *abi.Ring
	waitFD int // write end of the wake pipe whose read end the client waits on (wakePipe)

	mu   sync.Mutex // dead, prod; taken inside the CQ's own lock
	dead bool
	prod uint32
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
	o := &cqObj{s: c.s, cq: q, ch: ch, mem: mem, ring: ring, waitFD: wr}
	q.SetSink(o)
	if ch != nil {
		ch.hold()
	}
	h := c.add(o)
	return &abi.RingReply{H: h, Caps: ib.QPCap{MaxSendWR: int(r.CQE)},
		Send: abi.RingDesc{Size: uint32(len(mem)), Slots: r.CQE, SlotBytes: abi.CQESlotBytes}}, []int{fd, rd}, nil
}

// Complete writes one completion into the ring (qpmgr.CompletionSink);
// the CQ's lock is held. The engine has retired the completion's WQE
// already: its slot in the work queue's ring is free again.
func (o *cqObj) Complete(wc *ib.WC, solicited bool) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.dead {
		return nil
	}
	// The client's consumer index is hostile: any value only makes the
	// ring look fuller or emptier to the client itself.
	if o.prod-o.ring.Consumer() >= o.ring.Slots {
		o.ring.SetFlag(abi.FlagOverrun)
		o.s.cqOverruns.Add(1)
		return ib.ErrCQOverrun
	}
	abi.PutCQE(o.ring.Slot(o.prod), wc)
	o.prod++
	o.ring.SetProducer(o.prod)
	if a := o.ring.Armed(); a == abi.ArmAny || (a == abi.ArmSolicited && (solicited || wc.Status != ib.WCSuccess)) {
		if o.ring.Disarm(a) {
			o.ring.AddEvent()
			if o.ch != nil {
				signalFD(o.ch.fd)
			}
		}
	}
	if o.ring.TakeWaiter() {
		signalFD(o.waitFD)
	}
	return nil
}

func (*cqObj) kind() objKind { return kindCQ }
func (o *cqObj) cost() Quota { return cqCost(uint64(len(o.mem))) }

// release stops the sink before the ring's memory goes: the engine's CQ
// may still be completing into it.
func (o *cqObj) release(*conn) error {
	o.mu.Lock()
	o.dead = true
	o.mu.Unlock()
	unix.Munmap(o.mem)
	unix.Close(o.waitFD)
	if o.ch != nil {
		o.ch.drop()
	}
	return nil
}
