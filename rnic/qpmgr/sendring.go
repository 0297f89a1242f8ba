package qpmgr

import (
	"fmt"
	"sync/atomic"

	"github.com/rnicd/rnicd/abi"
)

// SendRing is a QP's send queue in memory the host shares with the NIC,
// read by the NIC itself as a NIC reads its WQEs by DMA: the host
// interface maps the ring and hands it over (QP.AttachSendRing), and from
// then on the device fetches, decodes and retires without calling back
// up. Its slots are the ABI's (abi.EncodeSendWQE writes them, in Go and
// in C); a WQE is decoded straight into the engine's record (SendWQE),
// so a wr_id goes from the slot to the WQE that completes it in one
// conversion.
type SendRing struct {
	ring    *abi.Ring
	fetched atomic.Uint32 // WQEs fetched; written by one fetch at a time
	done    atomic.Uint32 // WQEs retired
	broken  atomic.Bool   // a garbage producer index: nothing more is fetched
}

// AttachSendRing makes r the QP's send source (nil: none, nothing is
// retired into a ring any more) and returns the device's view of it.
func (qp *QP) AttachSendRing(r *abi.Ring) *SendRing {
	if r == nil {
		qp.SetSendSource(nil)
		return nil
	}
	s := &SendRing{ring: r}
	qp.SetSendSource(s)
	return s
}

// Ring returns the ring, for the host interface's header words (the
// doorbell's bell, the engine's asleep word).
func (s *SendRing) Ring() *abi.Ring { return s.ring }

// Broken reports whether a fetch found a garbage producer index: the
// ring stays refused until Reset.
func (s *SendRing) Broken() bool { return s.broken.Load() }

// Pending reports whether the producer index moved since the last fetch.
func (s *SendRing) Pending() bool { return !s.Broken() && s.ring.Producer() != s.fetched.Load() }

// Reset starts the ring again from 0 (a QP modified to RESET: nothing is
// retired, nothing will be).
func (s *SendRing) Reset() {
	s.fetched.Store(0)
	s.done.Store(0)
	s.broken.Store(false)
	s.ring.Reset()
}

// Retire frees n slots (SendSource).
func (s *SendRing) Retire(n int) { s.ring.SetConsumer(s.done.Add(uint32(n))) }

// Fetch decodes the WQEs the host wrote since the last fetch into the
// engine's records (SendSource). A producer index past what the ring can
// hold breaks the ring.
func (s *SendRing) Fetch() ([]SendWQE, []error, error) {
	fetched := s.fetched.Load()
	n, err := s.ring.NewWQEs(fetched, s.done.Load)
	if err != nil {
		s.broken.Store(true)
		return nil, nil, fmt.Errorf("qpmgr: send ring: %w", err)
	}
	wqes := make([]SendWQE, n)
	bad := make([]error, n) // per WQE: why it does not decode
	for i := range wqes {
		wqes[i].WR, bad[i] = abi.DecodeSendWQE(s.ring.Slot(fetched + uint32(i)))
	}
	s.fetched.Store(fetched + n)
	return wqes, bad, nil
}
