package hostif

import (
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/rnicd/rnicd/hostif/abi"
	"github.com/rnicd/rnicd/ib"
)

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
			if o.isBroken() {
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
func (c *conn) doorbell(target object, b abi.Body, _ []int) (abi.Body, []int, error) {
	r := b.(*abi.DoorbellReq)
	// The client rang because the engine sleeps: it wakes to poll for
	// what this post will bring.
	defer c.s.dev.Wake()
	switch o := target.(type) {
	case *qpObj:
		if o.isBroken() {
			return nil, nil, errf(abi.CodeInvalid, "doorbell: QP %#x had a garbage producer index; modify it to RESET", o.qp.QPN)
		}
		if r.Queue == abi.DoorbellSend {
			o.sq.ClearBell()
			return nil, nil, c.fetchSend(o)
		}
		if o.rqFeed == nil {
			return nil, nil, errf(abi.CodeInvalid, "doorbell: QP %#x uses an SRQ", o.qp.QPN)
		}
		o.rqSeen.Store(o.rqFeed.ring.Producer())
		return nil, nil, c.fetchRecv(o)
	case *srqObj:
		if r.Queue != abi.DoorbellRecv {
			return nil, nil, errf(abi.CodeInvalid, "doorbell: an SRQ has no send queue")
		}
		o.seen.Store(o.feed.ring.Producer())
		return nil, nil, c.fetchSRQ(o)
	}
	return nil, nil, errf(abi.CodeNoHandle, "doorbell: handle %d names a %v", r.H, target.kind())
}

// recvFeed is a receive ring seen from the NIC, the source of an engine
// receive queue (qpmgr.RecvSource): the queue fetches WQEs from it when it
// runs empty and at each doorbell, so a message that arrives before the
// doorbell is handled still finds the receive the client posted, and
// retires them to it as they complete.
type recvFeed struct {
	ring    *abi.Ring
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

func newRecvFeed(ring *abi.Ring, maxSGE int) *recvFeed { return &recvFeed{ring: ring, maxSGE: maxSGE} }

// Retire frees n slots of the ring.
func (f *recvFeed) Retire(n int) { f.ring.SetConsumer(f.done.Add(uint32(n))) }

// Fetch decodes up to room new WQEs; the receive queue's lock is held. A
// malformed one is retired (its slot counted done) and left for the
// doorbell to report.
func (f *recvFeed) Fetch(room int) []ib.RecvWR {
	n, err := f.ring.NewWQEs(f.fetched, f.done.Load)
	if err != nil {
		f.mu.Lock()
		f.broken = err
		f.mu.Unlock()
		return nil
	}
	var out []ib.RecvWR
	for n > 0 && len(out) < room {
		wr, err := abi.DecodeRecvWQE(f.ring.Slot(f.fetched), f.maxSGE)
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
	f.ring.Reset()
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

// ringMem makes a memfd of n bytes and maps it; the client gets the fd.
// The memfd is sealed at its size before the client sees it: a client
// that could ftruncate it would make the daemon's next access to the
// ring (a doorbell's fetch, a completion) a SIGBUS that kills rnicd and
// every client with it.
func ringMem(n uint64) (int, []byte, error) {
	fd, err := unix.MemfdCreate("rnicd-ring", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return -1, nil, errf(abi.CodeFailed, "memfd_create: %v", err)
	}
	if err := unix.Ftruncate(fd, int64(n)); err != nil {
		unix.Close(fd)
		return -1, nil, errf(abi.CodeFailed, "ring of %d bytes: %v", n, err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err != nil {
		unix.Close(fd)
		return -1, nil, errf(abi.CodeFailed, "seal ring memfd: %v", err)
	}
	mem, err := unix.Mmap(fd, 0, int(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return -1, nil, errf(abi.CodeFailed, "mmap ring of %d bytes: %v", n, err)
	}
	return fd, mem, nil
}
