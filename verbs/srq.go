package verbs

import (
	"fmt"

	"golang.org/x/sys/unix"

	"sync"

	"github.com/rnicd/rnicd/abi"
)

// SRQInitAttr is what CreateSRQ needs (ibv_srq_init_attr).
type SRQInitAttr struct {
	MaxWR  int
	MaxSGE int
	Limit  int
}

// SRQ is a shared receive queue (ibv_srq).
type SRQ struct {
	pd     *PD
	h      uint32
	maxSGE int
	mem    []byte

	mu   sync.Mutex
	ring *abi.Ring
	prod uint32
}

// CreateSRQ creates a shared receive queue (ibv_create_srq).
func (pd *PD) CreateSRQ(a SRQInitAttr) (*SRQ, error) {
	var r abi.RingReply
	req := &abi.CreateSRQReq{PD: pd.h, MaxWR: uint32(a.MaxWR), MaxSGE: uint32(a.MaxSGE), Limit: uint32(a.Limit)}
	if a.MaxWR < 0 || a.MaxSGE < 0 || a.Limit < 0 {
		return nil, fmt.Errorf("verbs: create SRQ: negative size in %+v", a)
	}
	fds, err := pd.ctx.call(abi.KindCreateSRQ, req, nil, &r)
	if err != nil {
		return nil, err
	}
	mem, ring, err := mapRing(fds, r.Recv)
	if err != nil {
		pd.ctx.destroy(abi.KindDestroySRQ, r.H)
		return nil, err
	}
	s := &SRQ{pd: pd, h: r.H, maxSGE: r.Caps.MaxRecvSGE, mem: mem, ring: ring}
	pd.ctx.track(r.H, s)
	return s, nil
}

// PostRecv posts receive WRs to the SRQ (ibv_post_srq_recv): it writes
// them into the SRQ's ring and rings the doorbell.
func (s *SRQ) PostRecv(wrs []RecvWR) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ring == nil {
		return ErrClosed
	}
	err := postRecv(s.ring, &s.prod, s.maxSGE, wrs)
	if !s.ring.EngineAsleep() {
		return err // the engine polls the ring
	}
	if err2 := s.pd.ctx.doorbell(s.h, abi.DoorbellRecv); err == nil {
		err = err2
	}
	return err
}

// postRecv writes receive WRs into a ring and moves its producer index.
func postRecv(ring *abi.Ring, prod *uint32, maxSGE int, wrs []RecvWR) error {
	var bad error
	for i := range wrs {
		var err error
		switch {
		case *prod-ring.Consumer() >= ring.Slots:
			err = ErrQueueFull
		case len(wrs[i].SGL) > maxSGE:
			err = fmt.Errorf("verbs: %d SGEs, queue allows %d", len(wrs[i].SGL), maxSGE)
		default:
			err = abi.EncodeRecvWQE(ring.Slot(*prod), &wrs[i])
		}
		if err != nil {
			bad = &WRError{Index: i, WRID: wrs[i].WRID, Err: err}
			break
		}
		*prod++
	}
	ring.SetProducer(*prod)
	return bad
}

// Destroy destroys the SRQ (ibv_destroy_srq).
func (s *SRQ) Destroy() error {
	if err := s.pd.ctx.destroy(abi.KindDestroySRQ, s.h); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	unix.Munmap(s.mem)
	s.ring, s.mem = nil, nil
	return nil
}
