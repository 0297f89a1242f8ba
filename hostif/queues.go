package hostif

import (
	"fmt"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

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
	ring   *Ring
	waitFD int // write end of the wake pipe whose read end the client waits on (wakePipe)

	mu   sync.Mutex // dead, prod; taken inside the CQ's own lock
	dead bool
	prod uint32
}

func (c *conn) createCQ(_ object, b Body, _ []int) (Body, []int, error) {
	r := b.(*CreateCQReq)
	if r.CQE < 1 || r.CQE > rnic.MaxCQE {
		return nil, nil, errf(CodeInvalid, "create_cq: %d entries outside 1..%d", r.CQE, rnic.MaxCQE)
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
		return nil, nil, errf(CodeInvalid, "create_cq: %v", err)
	}
	fd, mem, err := ringMem(RingBytes(r.CQE, CQESlotBytes))
	if err != nil {
		return nil, nil, err
	}
	rd, wr, err := wakePipe()
	if err != nil {
		unix.Munmap(mem)
		unix.Close(fd)
		return nil, nil, err
	}
	ring, _ := NewRing(mem, r.CQE, CQESlotBytes)
	ring.writeGeometry()
	o := &cqObj{s: c.s, cq: q, ch: ch, mem: mem, ring: ring, waitFD: wr}
	q.SetSink(o)
	if ch != nil {
		ch.hold()
	}
	h := c.add(o)
	return &RingReply{H: h, Caps: ib.QPCap{MaxSendWR: int(r.CQE)},
		Send: RingDesc{Size: uint32(len(mem)), Slots: r.CQE, SlotBytes: CQESlotBytes}}, []int{fd, rd}, nil
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
		o.ring.setFlag(FlagOverrun)
		o.s.cqOverruns.Add(1)
		return ib.ErrCQOverrun
	}
	PutCQE(o.ring.slot(o.prod), wc)
	o.prod++
	o.ring.SetProducer(o.prod)
	if a := o.ring.Armed(); a == ArmAny || (a == ArmSolicited && (solicited || wc.Status != ib.WCSuccess)) {
		if o.ring.disarm(a) {
			o.ring.addEvent()
			if o.ch != nil {
				signalFD(o.ch.fd)
			}
		}
	}
	if o.ring.takeWaiter() {
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

// srqObj is a shared receive queue fed from a ring.
type srqObj struct {
	useCount
	owner  *conn
	seen   atomic.Uint32 // the ring's producer index at the last doorbell or poll
	pd     *pdObj
	srq    *rnic.SRQ
	maxSGE int
	mem    []byte
	feed   *recvFeed
}

func (c *conn) createSRQ(_ object, b Body, _ []int) (Body, []int, error) {
	r := b.(*CreateSRQReq)
	pd, err := lookup[*pdObj](c, r.PD, kindPD)
	if err != nil {
		return nil, nil, err
	}
	if r.MaxWR < 1 || r.MaxWR > ib.MaxQPWR || r.MaxSGE < 1 || r.MaxSGE > ib.MaxSGE || r.Limit > r.MaxWR {
		return nil, nil, errf(CodeInvalid, "create_srq: %d WRs x %d SGEs, limit %d", r.MaxWR, r.MaxSGE, r.Limit)
	}
	s, err := c.s.dev.CreateSRQ(pd.pd, int(r.MaxWR), int(r.MaxSGE))
	if err != nil {
		return nil, nil, errf(CodeInvalid, "create_srq: %v", err)
	}
	if r.Limit > 0 {
		s.SetLimit(int(r.Limit))
	}
	slot := RecvSlotBytes(int(r.MaxSGE))
	fd, mem, err := ringMem(RingBytes(r.MaxWR, slot))
	if err != nil {
		return nil, nil, err
	}
	ring, _ := NewRing(mem, r.MaxWR, slot)
	ring.writeGeometry()
	feed := newRecvFeed(ring, int(r.MaxSGE))
	s.SetSource(feed)
	pd.hold()
	so := &srqObj{owner: c, pd: pd, srq: s, maxSGE: int(r.MaxSGE), mem: mem, feed: feed}
	h := c.add(so)
	c.s.dev.Watch(so, uint32(h))
	return &RingReply{H: h, Caps: ib.QPCap{MaxRecvWR: int(r.MaxWR), MaxRecvSGE: int(r.MaxSGE)},
		Recv: RingDesc{Size: uint32(len(mem)), Slots: r.MaxWR, SlotBytes: slot}}, []int{fd}, nil
}

func (*srqObj) kind() objKind { return kindSRQ }
func (o *srqObj) cost() Quota { return srqCost(uint64(len(o.mem))) }

func (o *srqObj) release(c *conn) error {
	c.s.dev.Unwatch(o)
	unix.Munmap(o.mem)
	o.pd.drop()
	return nil
}

// qpObj is a client's QP with its two rings.
type qpObj struct {
	noUsers
	owner     *conn
	qp        *rnic.QP
	pd        *pdObj
	scq, rcq  *cqObj
	srq       *srqObj
	mem       []byte
	sq        *Ring
	rqFeed    *recvFeed     // nil with an SRQ
	sqFetched atomic.Uint32 // send WQEs fetched; written under the conn's handling
	sqDone    atomic.Uint32 // send WQEs the engine retired
	broken    atomic.Bool   // a garbage producer index: doorbells are refused
	// rqSeen is the receive ring's producer index at the last receive
	// doorbell or poll, for the polling engine to tell a new post.
	rqSeen atomic.Uint32
}

// Retire frees n slots of the send ring (qpmgr.SendSource): the engine
// is done with their WQEs, which it copied at fetch.
func (q *qpObj) Retire(n int) { q.sq.SetConsumer(q.sqDone.Add(uint32(n))) }

func (c *conn) createQP(_ object, b Body, _ []int) (Body, []int, error) {
	r := b.(*CreateQPReq)
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
			return nil, nil, errf(CodeInvalid, "create_qp: SRQ %d is of another PD", r.SRQ)
		}
	}
	ia := rnic.QPInitAttr{PD: pd.pd, Type: r.Type, SendCQ: scq.cq, RecvCQ: rcq.cq, Caps: r.Caps, SigAll: r.SigAll}
	if srq != nil {
		ia.SRQ = srq.srq
		ia.Caps.MaxRecvWR, ia.Caps.MaxRecvSGE = 0, 0
	}
	qp, err := c.s.dev.CreateQP(ia)
	if err != nil {
		return nil, nil, errf(CodeInvalid, "create_qp: %v", err)
	}
	caps := qp.Caps
	sqSlot := SendSlotBytes(caps.MaxSendSGE, caps.MaxInlineData)
	sqBytes := RingBytes(uint32(caps.MaxSendWR), sqSlot)
	total := sqBytes
	var rqSlot uint32
	if srq == nil {
		rqSlot = RecvSlotBytes(caps.MaxRecvSGE)
		total += RingBytes(uint32(caps.MaxRecvWR), rqSlot)
	}
	fd, mem, err := ringMem(total)
	if err != nil {
		c.s.dev.DestroyQP(qp)
		return nil, nil, err
	}
	q := &qpObj{owner: c, qp: qp, pd: pd, scq: scq, rcq: rcq, srq: srq, mem: mem}
	q.sq, _ = NewRing(mem[:sqBytes], uint32(caps.MaxSendWR), sqSlot)
	q.sq.writeGeometry()
	reply := &RingReply{QPN: qp.QPN, Caps: caps,
		Send: RingDesc{Offset: 0, Size: uint32(sqBytes), Slots: uint32(caps.MaxSendWR), SlotBytes: sqSlot}}
	if srq == nil {
		rq, _ := NewRing(mem[sqBytes:], uint32(caps.MaxRecvWR), rqSlot)
		rq.writeGeometry()
		q.rqFeed = newRecvFeed(rq, caps.MaxRecvSGE)
		qp.RQ.SetSource(q.rqFeed)
		reply.Recv = RingDesc{Offset: uint32(sqBytes), Size: uint32(total - sqBytes), Slots: uint32(caps.MaxRecvWR), SlotBytes: rqSlot}
	}
	pd.hold()
	scq.hold()
	rcq.hold()
	if srq != nil {
		srq.hold()
	}
	qp.SetSendSource(q)
	c.s.qps.Store(qp.QPN, q)
	reply.H = c.add(q)
	c.s.dev.Watch(q, qp.QPN)
	return reply, []int{fd}, nil
}

func (c *conn) modifyQP(o object, b Body, _ []int) (Body, []int, error) {
	r, q := b.(*ModifyQPReq), o.(*qpObj)
	if err := c.s.dev.ModifyQP(q.qp, &r.Attr, r.Mask); err != nil {
		return nil, nil, errf(CodeInvalid, "modify_qp: %v", err)
	}
	if r.Mask&ib.AttrState != 0 && r.Attr.State == ib.QPSReset {
		// RESET empties the queues without completions (nothing is
		// retired, nothing will be): the rings start again from 0, on
		// both sides.
		q.sqFetched.Store(0)
		q.sqDone.Store(0)
		q.broken.Store(false)
		q.sq.reset()
		if q.rqFeed != nil {
			q.qp.RQ.SetSource(nil)
			q.rqFeed.reset()
			q.rqSeen.Store(0)
			q.qp.RQ.SetSource(q.rqFeed)
		}
	}
	return &Empty{}, nil, nil
}

func (c *conn) queryQP(o object, _ Body, _ []int) (Body, []int, error) {
	q := o.(*qpObj)
	return &QPAttrReply{Attr: c.s.dev.QueryQP(q.qp)}, nil, nil
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
	q.qp.SetSendSource(nil)
	if q.rqFeed != nil {
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

// fetchAll fetches every QP's and SRQ's new WQEs, as if each had rung
// its doorbells; errors were already answered or counted by the fetch.
func (c *conn) fetchAll() {
	c.mu.Lock()
	objs := make([]object, 0, len(c.objs))
	for _, o := range c.objs {
		objs = append(objs, o)
	}
	c.mu.Unlock()
	for _, o := range objs {
		switch o := o.(type) {
		case *qpObj:
			if o.broken.Load() {
				continue
			}
			c.fetchSend(o)
			if o.rqFeed != nil {
				c.fetchRecv(o)
			}
		case *srqObj:
			c.fetchSRQ(o)
		}
	}
}

// doorbell fetches the WQEs between the daemon's fetch index and the
// ring's producer index, validates each and posts it to the engine. A
// WQE that fails validation completes with LOC_QP_OP_ERR and moves the
// QP to ERR, as a NIC does at WQE fetch; later ones are flushed.
func (c *conn) doorbell(target object, b Body, _ []int) (Body, []int, error) {
	r := b.(*DoorbellReq)
	// The client rang because the engine sleeps: it wakes to poll for
	// what this post will bring.
	defer c.s.dev.Wake()
	switch o := target.(type) {
	case *qpObj:
		if o.broken.Load() {
			return nil, nil, errf(CodeInvalid, "doorbell: QP %#x had a garbage producer index; modify it to RESET", o.qp.QPN)
		}
		if r.Queue == DoorbellSend {
			o.sq.clearBell()
			return nil, nil, c.fetchSend(o)
		}
		if o.rqFeed == nil {
			return nil, nil, errf(CodeInvalid, "doorbell: QP %#x uses an SRQ", o.qp.QPN)
		}
		o.rqSeen.Store(o.rqFeed.ring.Producer())
		return nil, nil, c.fetchRecv(o)
	case *srqObj:
		if r.Queue != DoorbellRecv {
			return nil, nil, errf(CodeInvalid, "doorbell: an SRQ has no send queue")
		}
		o.seen.Store(o.feed.ring.Producer())
		return nil, nil, c.fetchSRQ(o)
	}
	return nil, nil, errf(CodeNoHandle, "doorbell: handle %d names a %v", r.H, target.kind())
}

// newWQEs returns how many WQEs the producer index says were added, or an
// error if it claims more than the ring has room for. done, the count of
// retired WQEs, is read after the producer index: a completion may retire
// a slot, and the client fill it, between the two reads, and the slot
// counts as free only if done is at least the consumer index the client
// saw.
func newWQEs(ring *Ring, fetched uint32, done func() uint32) (uint32, error) {
	prod := ring.Producer()
	d := done()
	return countWQEs(prod, fetched, d, ring.Slots)
}

func countWQEs(prod, fetched, done, slots uint32) (uint32, error) {
	n := prod - fetched
	if n > slots-(fetched-done) {
		return 0, fmt.Errorf("producer index %d is %d WQEs past the fetch index %d, with %d of %d slots in use",
			prod, n, fetched, fetched-done, slots)
	}
	return n, nil
}

// fetchSend rings the device's send doorbell of q: the device fetches
// from q (its qpmgr.SendSource) and fails what does not decode or
// validate.
func (c *conn) fetchSend(q *qpObj) error {
	failed, err := c.s.dev.FetchSend(q.qp)
	c.s.badWQEs.Add(uint64(failed))
	if err != nil {
		return errf(CodeInvalid, "doorbell: %v", err)
	}
	return nil
}

// Fetch decodes the WQEs the client wrote since the last fetch
// (qpmgr.SendSource). A producer index past what the ring can hold breaks
// the ring: doorbells are refused until the QP is reset.
func (q *qpObj) Fetch() ([]ib.SendWR, []error, error) {
	fetched := q.sqFetched.Load()
	n, err := newWQEs(q.sq, fetched, q.sqDone.Load)
	if err != nil {
		q.broken.Store(true)
		return nil, nil, err
	}
	wrs := make([]ib.SendWR, 0, n)
	bad := make([]error, 0, n) // per WR: why it does not decode
	for i := range n {
		wr, err := DecodeSendWQE(q.sq.slot(fetched + i))
		wrs = append(wrs, wr)
		bad = append(bad, err)
	}
	q.sqFetched.Store(fetched + n)
	return wrs, bad, nil
}

// failQP moves a QP to ERR for a fault of its rings.
func (c *conn) failQP(q *qpObj) {
	c.s.badWQEs.Add(1)
	c.s.dev.EnterError(q.qp)
}

// recvFeed is a receive ring seen from the NIC, the source of an engine
// receive queue (qpmgr.RecvSource): the queue fetches WQEs from it when it
// runs empty and at each doorbell, so a message that arrives before the
// doorbell is handled still finds the receive the client posted, and
// retires them to it as they complete.
type recvFeed struct {
	ring    *Ring
	maxSGE  int
	fetched uint32
	done    atomic.Uint32 // receive WQEs completed

	mu     sync.Mutex // bad, broken: read by the doorbell's goroutine
	bad    []badWQE
	broken error // a garbage producer index
}

// badWQE is a receive WQE that failed validation at fetch.
type badWQE struct {
	wrid uint64
	err  error
}

func newRecvFeed(ring *Ring, maxSGE int) *recvFeed { return &recvFeed{ring: ring, maxSGE: maxSGE} }

// Retire frees n slots of the ring.
func (f *recvFeed) Retire(n int) { f.ring.SetConsumer(f.done.Add(uint32(n))) }

// Fetch decodes up to room new WQEs; the receive queue's lock is held. A
// malformed one is retired (its slot counted done) and left for the
// doorbell to report.
func (f *recvFeed) Fetch(room int) []ib.RecvWR {
	n, err := newWQEs(f.ring, f.fetched, f.done.Load)
	if err != nil {
		f.mu.Lock()
		f.broken = err
		f.mu.Unlock()
		return nil
	}
	var out []ib.RecvWR
	for n > 0 && len(out) < room {
		wr, err := DecodeRecvWQE(f.ring.slot(f.fetched), f.maxSGE)
		f.fetched++
		n--
		if err != nil {
			f.mu.Lock()
			f.bad = append(f.bad, badWQE{wr.WRID, err})
			f.mu.Unlock()
			f.Retire(1)
			continue
		}
		out = append(out, wr)
	}
	return out
}

// reset starts the ring again from 0 (modify to RESET).
func (f *recvFeed) reset() {
	f.fetched = 0
	f.done.Store(0)
	f.ring.reset()
	f.mu.Lock()
	f.bad, f.broken = nil, nil
	f.mu.Unlock()
}

// faults returns, and forgets, what Fetch refused since the last call.
func (f *recvFeed) faults() ([]badWQE, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	bad, broken := f.bad, f.broken
	f.bad = nil
	return bad, broken
}

func (c *conn) fetchRecv(q *qpObj) error {
	qp := q.qp
	c.s.dev.RefillRecv(qp)
	bad, broken := q.rqFeed.faults()
	if broken != nil {
		q.broken.Store(true)
		c.failQP(q)
		return errf(CodeInvalid, "doorbell: QP %#x receive queue: %v", qp.QPN, broken)
	}
	for _, b := range bad {
		c.s.badWQEs.Add(1)
		c.s.dev.FailRecv(qp, b.wrid)
	}
	if len(bad) > 0 {
		return errf(CodeInvalid, "doorbell: QP %#x receive WQE wr_id %d: %v", qp.QPN, bad[0].wrid, bad[0].err)
	}
	return nil
}

// fetchSRQ pulls an SRQ's new receive WQEs. A malformed one has no QP to
// fail: it is dropped, counted, and its slot retired.
func (c *conn) fetchSRQ(s *srqObj) error {
	s.srq.Refill()
	bad, broken := s.feed.faults()
	if broken != nil {
		c.s.badWQEs.Add(1)
		return errf(CodeInvalid, "doorbell: SRQ: %v", broken)
	}
	if len(bad) > 0 {
		c.s.badWQEs.Add(uint64(len(bad)))
		return errf(CodeInvalid, "doorbell: SRQ receive WQE wr_id %d: %v", bad[0].wrid, bad[0].err)
	}
	return nil
}

// ringMem makes a memfd of n bytes and maps it; the client gets the fd.
// The memfd is sealed at its size before the client sees it: a client
// that could ftruncate it would make the daemon's next access to the
// ring (a doorbell's fetch, a completion) a SIGBUS that kills rnicd and
// every client with it.
func ringMem(n uint64) (int, []byte, error) {
	fd, err := unix.MemfdCreate("rnicd-ring", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return -1, nil, errf(CodeFailed, "memfd_create: %v", err)
	}
	if err := unix.Ftruncate(fd, int64(n)); err != nil {
		unix.Close(fd)
		return -1, nil, errf(CodeFailed, "ring of %d bytes: %v", n, err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err != nil {
		unix.Close(fd)
		return -1, nil, errf(CodeFailed, "seal ring memfd: %v", err)
	}
	mem, err := unix.Mmap(fd, 0, int(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return -1, nil, errf(CodeFailed, "mmap ring of %d bytes: %v", n, err)
	}
	return fd, mem, nil
}
