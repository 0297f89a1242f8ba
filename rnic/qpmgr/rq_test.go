package qpmgr

import (
	"testing"

	"github.com/rnicd/rnicd/ib"
)

// lockCheckSource is a RecvSource that checks its queue's lock is held
// whenever it is called.
type lockCheckSource struct {
	t       *testing.T
	q       *RecvQueue
	retired int
}

func (s *lockCheckSource) held(what string) {
	if s.q.mu.TryLock() {
		s.q.mu.Unlock()
		s.t.Errorf("%s ran without the queue's lock", what)
	}
}

func (s *lockCheckSource) Fetch(room int) []ib.RecvWR {
	s.held("Fetch")
	return []ib.RecvWR{{WRID: 1}}
}

func (s *lockCheckSource) Retire(n int) {
	s.held("Retire")
	s.retired += n
}

// The queue calls its source only with its lock held, Retire too: an
// XRC SRQ's WQE may be retired by another client's target QP (its
// flush, or a fatal NAK of a message under way) while the SRQ's owner
// destroys it, and the owner unmaps the ring once SetSource(nil)
// returns, so a Retire still writing the ring's consumer index then
// faulted the daemon.
func TestRecvQueueRetireUnderLock(t *testing.T) {
	q := NewRecvQueue(4, 1)
	src := &lockCheckSource{t: t, q: q}
	q.SetSource(src)
	if _, ok := q.Pop(); !ok {
		t.Fatal("no WQE fetched")
	}
	q.retire()
	if src.retired != 1 {
		t.Fatalf("%d retired, want 1", src.retired)
	}
	q.SetSource(nil)
	q.retire()
	if src.retired != 1 {
		t.Fatalf("%d retired after the source went, want 1", src.retired)
	}
}
