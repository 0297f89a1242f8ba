package qpmgr

import (
	"errors"
	"sync"

	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/rnic/dma"
	"github.com/rnicd/rnicd/wire/bth"
)

// XRC (IBTA annex A14) is RC with the receive side cut loose from the
// QP: an XRC send QP (initiator) is an RC requester whose every request
// names, in its XRCETH, an XRC SRQ at the target; an XRC receive QP
// (target) is an RC responder with no receive queue of its own, whose
// messages land in the SRQ each names, provided that SRQ is in the
// target's XRC domain, and complete on that SRQ's CQ. Both are RC QPs
// here (QP.Type is ib.QPTypeRC, QP.XRC says which end), so that PSNs,
// ACKs, NAKs, retries and the replay of READs and atomics are RC's own
// code.

// XRCDomain is an XRC domain (ibv_xrcd): the set of XRC SRQs a target
// QP may deliver to.
type XRCDomain struct{ _ byte } // not zero-sized: each has its own address

// XRCSRQ is an XRC SRQ: a receive queue with the CQ, PD and domain its
// messages use, found by its number.
type XRCSRQ struct {
	Num    uint32
	Domain *XRCDomain
	PD     dma.PD
	CQ     *CQ
	Queue  *RecvQueue
}

// XRCSRQTable is the device's XRC SRQs by number (the XRCETH's SRQ
// number; ibv_get_srq_num).
type XRCSRQTable struct {
	mu   sync.RWMutex
	m    map[uint32]*XRCSRQ
	next uint32
}

// ErrNoSRQN says every 24-bit SRQ number is taken.
var ErrNoSRQN = errors.New("qpmgr: no XRC SRQ number left")

// Add numbers s and enters it.
func (t *XRCSRQTable) Add(s *XRCSRQ) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[uint32]*XRCSRQ{}
	}
	if len(t.m) >= bth.SRQNMask {
		return ErrNoSRQN
	}
	for {
		t.next = (t.next + 1) & bth.SRQNMask
		if _, used := t.m[t.next]; t.next != 0 && !used {
			break
		}
	}
	s.Num = t.next
	t.m[s.Num] = s
	return nil
}

// Remove takes s out: no request finds it from then on.
func (t *XRCSRQTable) Remove(s *XRCSRQ) {
	t.mu.Lock()
	if t.m[s.Num] == s {
		delete(t.m, s.Num)
	}
	t.mu.Unlock()
}

// Lookup returns the SRQ numbered num, nil if there is none.
func (t *XRCSRQTable) Lookup(num uint32) *XRCSRQ {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.m[num]
}

// VerbsType is the QP's type as libibverbs names it: XRC_SEND and
// XRC_RECV for the XRC QPs, which are RC QPs inside.
func (qp *QP) VerbsType() ib.QPType {
	if qp.XRC != 0 {
		return qp.XRC
	}
	return qp.Type
}

// SetXRCTarget makes s the SRQ of the request the XRC target qp serves:
// its receive WQEs come from s, its completions go to s's CQ, and its
// memory is checked against s's PD (IBTA A14.4.2: an XRC target QP has no
// PD; the SRQ's is used). Call with the lock held, from the responder.
func (qp *QP) SetXRCTarget(s *XRCSRQ) {
	qp.Resp.XRC = s
	qp.PD, qp.RecvCQ = s.PD, s.CQ
}

// xrcRule changes RC's attribute sets of a transition where XRC's
// differ (IBTA A14.5.2, as Linux's ib_modify_qp_is_ok has them): an
// initiator, which never responds, needs no responder resources nor RNR
// timer for RTR; a target, which never requests, needs no retry counts
// nor initiator depth for RTS.
func xrcRule(t ib.QPType, cur, next ib.QPState, req, opt ib.AttrMask) (ib.AttrMask, ib.AttrMask) {
	switch {
	case t == ib.QPTypeXRCSend && cur == ib.QPSInit && next == ib.QPSRTR:
		moved := ib.AttrMaxDestRdAtomic | ib.AttrMinRNRTimer
		return req &^ moved, opt | moved
	case t == ib.QPTypeXRCRecv && cur == ib.QPSRTR && next == ib.QPSRTS:
		moved := ib.AttrRetryCnt | ib.AttrRNRRetry | ib.AttrMaxQPRdAtomic
		return req &^ moved, opt | moved
	}
	return req, opt
}
