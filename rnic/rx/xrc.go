package rx

import (
	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/rnic/qpmgr"
	"github.com/rnicd/rnicd/wire/bth"
)

// xrcTarget picks the SRQ an XRC request names for qp, an XRC target
// (qpmgr/xrc.go), before RC's responder takes the request: the XRCETH's
// SRQ number must name an XRC SRQ of the target's XRC domain, and the
// packets of one message must all name the SRQ its first did. Otherwise
// the request is invalid (IBTA A14.4.2): in sequence it is NAKed as an
// invalid request and the target goes to ERR, as RC does with any
// request it cannot carry out (Responder.fatal); out of sequence it is
// dropped. Either way it is counted (DropBadXRCSRQ). It reports whether
// the request goes on to the RC responder. The QP lock is held.
func (r *Responder) xrcTarget(qp *qpmgr.QP, p bth.Packet, tx qpmgr.TX) bool {
	srq := r.XRCSRQs.Lookup(p.XRCETH().SRQN())
	rs := &qp.Resp
	ok := srq != nil && srq.Domain == qp.XRCD
	if ok && (rs.HaveWQE || rs.InMsg != 0) && srq != rs.XRC {
		ok = false // a message goes to one SRQ
	}
	if ok {
		qp.SetXRCTarget(srq)
		return true
	}
	r.Counters.Inc(ib.DropBadXRCSRQ)
	psn := p.BTH().PSN()
	if bth.PSNDiff(psn, rs.EPSN) == 0 {
		r.fatal(qp, tx, bth.NAKInvalidRequest, psn, ib.WCRemInvReqErr)
	}
	return false
}
