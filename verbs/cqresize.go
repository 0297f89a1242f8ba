package verbs

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/rnicd/rnicd/abi"
	"github.com/rnicd/rnicd/rnic"
)

// Resize makes the CQ hold cqe entries (ibv_resize_cq). It fails, and
// the CQ stays as it was, when more completions wait in it than cqe. The
// daemon moves the waiting completions into a new ring keeping their
// indices; the CQ's polls, its arm and its channel's GetCQEvent wait
// under the CQ's lock (and its channel's) until the view is swapped, as
// rxe's provider holds its CQ lock over the resize.
func (cq *CQ) Resize(cqe int) error {
	if cqe < 1 || cqe > rnic.MaxCQE {
		return fmt.Errorf("verbs: CQ size %d outside 1..%d", cqe, rnic.MaxCQE)
	}
	if cq.ch != nil {
		cq.ch.mu.Lock()
		defer cq.ch.mu.Unlock()
	}
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.ring == nil {
		return ErrClosed
	}
	var r abi.RingReply
	fds, err := cq.ctx.call(abi.KindResizeCQ, &abi.ResizeCQReq{H: cq.h, CQE: uint32(cqe)}, nil, &r)
	if err != nil {
		return err
	}
	mem, ring, err := mapRing(fds, r.Send)
	if err != nil {
		return fmt.Errorf("verbs: resize_cq: %w", err)
	}
	if ring.Slots != uint32(cqe) {
		unix.Munmap(mem)
		return fmt.Errorf("verbs: resize_cq: the daemon's ring has %d slots, not %d", ring.Slots, cqe)
	}
	unix.Munmap(cq.mem)
	cq.mem, cq.ring = mem, ring
	return nil
}

// Cap is the number of completions the CQ holds (ibv_cq's cqe).
func (cq *CQ) Cap() int {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.ring == nil {
		return 0
	}
	return int(cq.ring.Slots)
}
