package qpmgr

import (
	"sync"

	"github.com/rnicd/rnicd/abi"
	"github.com/rnicd/rnicd/ib"
)

// A completion that does not fit in its CQ is lost and Push returns
// ib.ErrCQOverrun: the application sized the CQ too small; like a real CQ
// overrun it is an error the device reports.

// CQ is a completion queue (ibv_cq): a ring of work completions the engines
// write and the application polls. It is safe for concurrent use.
type CQ struct {
	mu      sync.Mutex
	ring    []ib.WC
	head, n int
	armed   bool // ReqNotify called and no event since
	solOnly bool

	// ready gets a token whenever a completion is pushed, so a poller can
	// wait instead of spinning.
	ready chan struct{}
	// event gets a token when an armed CQ gets a completion that matches
	// its notification request (ibv_get_cq_event).
	event chan struct{}
	// cqe, when set, is the ring in host memory every completion goes
	// to instead of ring; detached: the CQ's host ring is gone.
	cqe      *cqeRing
	detached bool
	onErr    func() // SetErrorHandler
}

// NewCQ returns a CQ with room for n completions.
func NewCQ(n int) *CQ {
	if n < 1 {
		n = 1
	}
	return &CQ{ring: make([]ib.WC, n), ready: make(chan struct{}, 1), event: make(chan struct{}, 1)}
}

// Cap is the number of completions the CQ holds.
func (c *CQ) Cap() int { return len(c.ring) }

// hostSlot returns the host ring's slot for the next completion, nil
// after DetachRing (the completion is dropped) or with ib.ErrCQOverrun;
// the lock is held.
func (c *CQ) hostSlot() ([]byte, error) {
	if c.detached {
		return nil, nil
	}
	slot, err := c.cqe.next()
	if err != nil && !c.cqe.errTold && c.onErr != nil {
		c.cqe.errTold = true
		c.onErr()
	}
	return slot, err
}

// PushSend completes a send WQE: the completion of wr_id wrid with
// status st, opcode op, flags, byteLen bytes, on QP qpn. Into the host's ring it is written straight
// from these fields (abi.PutSendCQE), with no WC between; the CQ's own
// ring holds WCs.
func (c *CQ) PushSend(wrid uint64, st ib.WCStatus, op ib.WCOpcode, flags ib.WCFlags, byteLen, qpn uint32) error {
	c.mu.Lock()
	if c.cqe != nil || c.detached {
		slot, err := c.hostSlot()
		if slot != nil {
			abi.PutSendCQE(slot, wrid, st, op, flags, byteLen, qpn)
			c.cqe.publish(false, st)
		}
		c.mu.Unlock()
		return err
	}
	return c.pushLocked(ib.WC{WRID: wrid, Status: st, Opcode: op, WCFlags: flags, ByteLen: byteLen, QPNum: qpn}, false)
}

// RecvCompletion is what the responder learned of a received message
// when it completes a receive WQE: every field of the receive CQE but the
// wr_id, which the CQ writes straight from the WQE (PushRecv), and the
// QPN, which is the QP's.
type RecvCompletion struct {
	Status  ib.WCStatus
	Opcode  ib.WCOpcode
	Flags   ib.WCFlags
	ByteLen uint32
	Imm     uint32 // the immediate data, or the rkey a SEND with invalidate invalidated
	SrcQP   uint32 // UD: the sender's QPN
	// Solicited marks a message whose sender set the solicited event
	// bit, for a CQ armed for solicited completions only.
	Solicited bool
}

// PushRecv completes a receive WQE: the completion of wr_id wrid on QP
// qpn, c the rest. Into the host's ring it is written straight from
// these (abi.PutRecvCQE), with no WC between; the CQ's own ring holds
// WCs.
func (c *CQ) PushRecv(wrid uint64, qpn uint32, rc *RecvCompletion) error {
	c.mu.Lock()
	if c.cqe != nil || c.detached {
		slot, err := c.hostSlot()
		if slot != nil {
			abi.PutRecvCQE(slot, wrid, rc.Status, rc.Opcode, rc.Flags, rc.ByteLen, rc.Imm, qpn, rc.SrcQP)
			c.cqe.publish(rc.Solicited, rc.Status)
		}
		c.mu.Unlock()
		return err
	}
	return c.pushLocked(ib.WC{WRID: wrid, Status: rc.Status, Opcode: rc.Opcode, WCFlags: rc.Flags,
		ByteLen: rc.ByteLen, Imm: rc.Imm, QPNum: qpn, SrcQP: rc.SrcQP}, rc.Solicited)
}

// pushLocked appends wc to the CQ's own ring and unlocks.
func (c *CQ) pushLocked(wc ib.WC, solicited bool) error {
	if c.n == len(c.ring) {
		c.mu.Unlock()
		return ib.ErrCQOverrun
	}
	c.ring[(c.head+c.n)%len(c.ring)] = wc
	c.n++
	fire := c.armed && (!c.solOnly || solicited || wc.Status != ib.WCSuccess)
	if fire {
		c.armed = false
	}
	c.mu.Unlock()
	signal(c.ready)
	if fire {
		signal(c.event)
	}
	return nil
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// Poll moves up to len(wcs) completions, oldest first, into wcs and
// returns how many (ibv_poll_cq).
func (c *CQ) Poll(wcs []ib.WC) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := 0
	for k < len(wcs) && c.n > 0 {
		wcs[k] = c.ring[c.head]
		c.head = (c.head + 1) % len(c.ring)
		c.n--
		k++
	}
	return k
}

// Len is the number of completions waiting.
func (c *CQ) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// Ready returns a channel that receives a token after completions are
// pushed. A token may be stale: poll after receiving it.
func (c *CQ) Ready() <-chan struct{} { return c.ready }

// ReqNotify arms the CQ (ibv_req_notify_cq): the next completion, or with
// solicitedOnly the next solicited or error completion, sends one token on
// Events.
func (c *CQ) ReqNotify(solicitedOnly bool) {
	c.mu.Lock()
	c.armed, c.solOnly = true, solicitedOnly
	c.mu.Unlock()
}

// Events returns the channel of completion events (ibv_get_cq_event).
func (c *CQ) Events() <-chan struct{} { return c.event }
