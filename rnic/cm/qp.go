package cm

import (
	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/wire/mad"
)

// The QP attributes the CM applies, as Linux's ib_cm_init_qp_attr computes
// them (cm_init_qp_init_attr, cm_init_qp_rtr_attr, cm_init_qp_rts_attr)
// and rdma_cm applies them: INIT when the connection starts, RTR then RTS
// when the peer's values are known (the active side on REP, before its
// RTU; the passive side on Accept, before its REP).

// toInit moves the QP to INIT (from RESET or INIT) with the remote access
// the connection allows: WRITE always, READ and atomics only if it accepts
// any (responder resources above 0), as cm_init_qp_init_attr decides.
func (id *ID) toInit() error {
	access := ib.AccessRemoteWrite
	if id.respRes > 0 {
		access |= ib.AccessRemoteRead | ib.AccessRemoteAtomic
	}
	attr := ib.QPAttr{State: ib.QPSInit, PKeyIndex: 0, PortNum: 1, AccessFlags: access}
	return id.modifyQP(&attr, ib.AttrState|ib.AttrPKeyIndex|ib.AttrPort|ib.AttrAccessFlags)
}

// toRTS moves the QP from INIT through RTR to RTS with the agreed values.
func (id *ID) toRTS() error {
	rtr := ib.QPAttr{
		State:   ib.QPSRTR,
		PathMTU: ib.MTU(id.pathMTU),
		DestQPN: id.remoteQPN,
		RQPSN:   id.ownPSN, // see ID.ownPSN: the peer starts at the PSN we sent
		AH: ib.AH{DGID: id.dest.GID, FlowLabel: id.flowLabel, HopLimit: id.hopLimit,
			TrafficClass: id.trafficClass},
	}
	mask := ib.AttrState | ib.AttrAV | ib.AttrPathMTU | ib.AttrDestQPN | ib.AttrRQPSN
	if id.responds() { // READ and atomic responder resources, RNR timer
		rtr.MaxDestRdAtomic = id.respRes
		rtr.MinRNRTimer = 0 // as cm_init_qp_rtr_attr sets it: code 0, 655.36 ms (IBTA table 45)
		mask |= ib.AttrMaxDestRdAtomic | ib.AttrMinRNRTimer
	}
	if err := id.modifyQP(&rtr, mask); err != nil {
		return err
	}
	rts := ib.QPAttr{State: ib.QPSRTS, SQPSN: id.peerPSN}
	mask = ib.AttrState | ib.AttrSQPSN
	if id.transport != mad.TransportUC {
		rts.Timeout = id.ackTimeout
		mask |= ib.AttrTimeout
	}
	if id.requests() {
		rts.RetryCnt = id.retryCount
		rts.RNRRetry = id.rnrRetry
		rts.MaxRdAtomic = id.initDepth
		mask |= ib.AttrRetryCnt | ib.AttrRNRRetry | ib.AttrMaxQPRdAtomic
	}
	return id.modifyQP(&rts, mask)
}

// responds says whether the QP answers READs and atomics and sends RNR
// NAKs: RC, and XRC's target; requests whether it issues them and counts
// retries: RC, and XRC's initiator. These are the sets Linux's
// cm_init_qp_rtr_attr and cm_init_qp_rts_attr give each QP type.
func (id *ID) responds() bool {
	return id.transport == mad.TransportRC || id.transport == mad.TransportXRC && id.xrcTarget
}

func (id *ID) requests() bool {
	return id.transport == mad.TransportRC || id.transport == mad.TransportXRC && !id.xrcTarget
}

// toErr moves the QP to ERR: the connection is over (its WRs flush). An
// error is ignored: the application may have destroyed its QP already.
func (id *ID) toErr() {
	_ = id.modifyQP(&ib.QPAttr{State: ib.QPSErr}, ib.AttrState)
}
