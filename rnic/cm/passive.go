package cm

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/wire/mad"
)

// handleREQ is IBTA 12.9.6.2 on the passive side (Linux cm_req_handler).
func (c *CM) handleREQ(from Dest, tid uint64, req mad.REQ) {
	if dup := c.remote[remoteKey{req.LocalCommID(), req.LocalCAGUID()}]; dup != nil {
		if from.GID != dup.dest.GID {
			// The peer's REQ again, from another host: what it would
			// make us resend goes to the peer, but it is not the peer's.
			c.counters.WrongSource++
			c.drop()
			c.logDrop("sent from another address than the connection's peer", from, "comm_id", dup.localID, "peer", dup.dest.GID.Addr())
			return
		}
		c.dupREQ(dup, tid)
		return
	}
	if old := c.remoteQPs[remoteKey{req.LocalQPN(), req.LocalCAGUID()}]; old != nil {
		if from.GID != old.dest.GID {
			// The QPN and CA GUID are the peer's, the address is not:
			// anyone who saw one packet of the connection (or derived
			// the CA GUID from the peer's MAC, as rxe does) could send
			// this. The peer's own REQ comes from its own address, so
			// this one cannot be what IBTA 12.9.8.3.1 is about: drop it.
			c.counters.StaleDropped++
			c.drop()
			c.logDrop("stale-connection REQ from another address than the QP's", from,
				"qpn", req.LocalQPN(), "peer", old.dest.GID.Addr())
			return
		}
		// The peer's QP already has a connection here, under another
		// comm ID: the old one is stale (IBTA 12.9.8.3.1). Refuse the
		// REQ and disconnect the old one, as cm_req_handler does; the
		// peer retries once the old connection has left TIMEWAIT.
		c.counters.StaleConns++
		c.issueREJ(from, tid, req.LocalCommID(), 0, mad.RejStaleConn, mad.MsgKindREQ)
		if old.state == StateEstablished {
			old.toErr()
			old.sendDREQ(nil)
		}
		return
	}
	l := c.listeners[req.ServiceID()]
	switch {
	case l == nil:
		// Nobody listens: REJ "invalid service ID", which rdma_cm reports
		// as connection refused. The REQ has no remote comm ID for us to
		// echo: the REJ names only the sender's.
		c.issueREJ(from, tid, req.LocalCommID(), 0, mad.RejInvalidServiceID, mad.MsgKindREQ)
		return
	case !c.pathGIDsMatch(from, req):
		// The REQ's path is not the one its packet took: Linux's
		// cm_req_handler rejects a primary path it cannot resolve from
		// the port it came in on with "invalid GID", our GID as the
		// additional information. Answering it would send the REP, and
		// the QP's packets, to a GID that did not ask.
		gid := c.cfg.PortGID
		c.issueREJInfo(from, tid, req.LocalCommID(), 0, mad.RejInvalidGID, mad.MsgKindREQ, gid[:])
		return
	case req.TransportType() > mad.TransportUC && !isXRC(req):
		c.issueREJ(from, tid, req.LocalCommID(), 0, mad.RejInvalidTransportType, mad.MsgKindREQ)
		return
	case ib.MTU(req.PathMTU()).Bytes() == 0:
		c.issueREJ(from, tid, req.LocalCommID(), 0, mad.RejInvalidMTU, mad.MsgKindREQ)
		return
	}
	if c.pending >= c.cfg.MaxPending {
		c.counters.PendingDropped++
		c.logDrop("REQs nobody answered yet at the most (REJ no resources)", from, "pending", c.pending)
		c.issueREJ(from, tid, req.LocalCommID(), 0, mad.RejNoResources, mad.MsgKindREQ)
		return
	}
	id, err := c.newID(StateREQRcvd)
	if err != nil {
		c.counters.PendingDropped++
		c.logDrop("connections at the most (REJ no resources)", from, "ids", len(c.ids))
		c.issueREJ(from, tid, req.LocalCommID(), 0, mad.RejNoResources, mad.MsgKindREQ)
		return
	}
	id.setPending(true)
	// Until the application answers, the ID lives as long as the active
	// side waits for the answer: each of its tries waits two packet
	// lifetimes and our response time (ib_send_cm_req's timeout_ms), and
	// it tries its max CM retries and once more. Past that no REP can
	// reach it; a REQ that came from no CM at all (a flood) is gone by
	// then too.
	id.pendingUntil = c.cfg.Now().Add(min(c.cfg.MaxPendingTime,
		time.Duration(req.MaxCMRetries()+1)*(2*ibTime(c.cfg.PacketLifeTime)+ibTime(req.RemoteCMResponseTimeout()))))
	id.msgLive, id.retries, id.deadline = true, 0, id.pendingUntil
	id.listener, id.context = l, l.context
	id.tid = tid
	id.dest = from
	id.localGID = req.PrimaryRemoteGID()
	id.remoteID, id.remoteCAGUID = req.LocalCommID(), req.LocalCAGUID()
	id.serviceID = req.ServiceID()
	id.transport = req.TransportType()
	id.xrcTarget = id.transport == mad.TransportXRC
	id.remoteQPN = req.LocalQPN()
	id.peerPSN = req.StartingPSN()
	id.pathMTU = req.PathMTU()
	// What the peer issues we must accept, and the other way round
	// (cm_req_handler: initiator_depth = REQ responder resources).
	id.respRes, id.initDepth = req.InitiatorDepth(), req.ResponderResources()
	id.retryCount, id.rnrRetry = req.RetryCount(), req.RNRRetryCount()
	id.ackTimeout = req.PrimaryLocalACKTimeout()
	if id.ackTimeout == 0 {
		id.ackTimeout = c.cfg.PacketLifeTime + 1
	}
	id.flowLabel, id.hopLimit, id.trafficClass = req.PrimaryFlowLabel(), req.PrimaryHopLimit(), req.PrimaryTrafficClass()
	// Our REP waits as long as the active side says it takes to answer,
	// and is resent as often as it says (cm_req_handler).
	id.cmTimeout = ibTime(req.LocalCMResponseTimeout())
	id.cmRetries = int(req.MaxCMRetries())
	c.remote[remoteKey{id.remoteID, id.remoteCAGUID}] = id
	c.remoteQPs[remoteKey{id.remoteQPN, id.remoteCAGUID}] = id
	id.traceRecv()
	c.event(Event{Type: EventConnectRequest, ID: id, Listener: l, PrivateData: clonePD(req.PrivateData()),
		Remote: Remote{GID: from.GID, CAGUID: id.remoteCAGUID, ServiceID: id.serviceID, QPN: id.remoteQPN,
			StartingPSN: id.peerPSN, PathMTU: id.pathMTU, ResponderResources: req.ResponderResources(),
			InitiatorDepth: req.InitiatorDepth(), RetryCount: id.retryCount, RNRRetryCount: id.rnrRetry,
			TransportType: id.transport}})
	if id.refused {
		// The application cannot take it (a full backlog): forget the
		// REQ without a REJ, so that the peer's next try is a new REQ
		// (cm_destroy_id's -ENOMEM case, cm_reset_to_idle, which
		// ucma's backlog check causes).
		c.counters.ListenDrops++
		c.logDrop("the listener's backlog is full", from, "service_id", fmt.Sprintf("%#x", id.serviceID))
		id.state = StateIdle
		c.free(id)
	}
}

// Refuse, called from the ConnectRequest event of id, drops the REQ with
// no answer: the peer will try again (what a full rdma_listen backlog
// does). It does nothing elsewhere.
func (id *ID) Refuse() {
	if id.pending && (id.state == StateREQRcvd || id.state == StateSIDRREQRcvd) {
		id.refused = true
	}
}

// pendingTimedOut ends a REQ the application never answered: REJ
// "timeout" with our CA GUID (IBTA 12.6.7's additional information for
// it), and the Unreachable event with ErrTimeout, which rdma_cm reports
// for a connection whose CM timed out.
func (id *ID) pendingTimedOut() {
	if id.state == StateSIDRREQRcvd {
		_ = id.sidrReply(mad.SIDRReject, 0, 0, nil)
		id.cm.event(Event{Type: EventUnreachable, ID: id, Err: ErrTimeout})
		return
	}
	var guid [8]byte
	binary.BigEndian.PutUint64(guid[:], id.cm.cfg.CAGUID)
	id.sendREJ(mad.RejTimeout, mad.MsgKindREQ, guid[:], nil)
	id.state = StateIdle
	id.cm.event(Event{Type: EventUnreachable, ID: id, Err: ErrTimeout})
	id.cm.free(id)
}

// isXRC says whether req asks for an XRC connection: transport service
// type 3 with extended transport type 1, as Linux's cm_req_get_qp_type
// reads an XRC target's REQ. Type 3 with anything else is RD, which no
// one builds on RoCE: REJ invalid transport type.
func isXRC(req mad.REQ) bool {
	return req.TransportType() == mad.TransportXRC && req.ExtendedTransport() == mad.ExtendedTransportXRC
}

// pathGIDsMatch checks a REQ's primary path against its packet: the
// path's local GID must be the sender's (the packet's source), and its
// remote GID ours (the packet's destination, the port's GID).
func (c *CM) pathGIDsMatch(from Dest, req mad.REQ) bool {
	if req.PrimaryLocalGID() != from.GID {
		return false
	}
	var zero mad.GID
	return c.cfg.PortGID == zero || req.PrimaryRemoteGID() == c.cfg.PortGID
}

// dupREQ answers a REQ for a connection we already have: the active side
// did not hear our answer (IBTA 12.9.6.2; Linux cm_dup_req_handler).
func (c *CM) dupREQ(id *ID, tid uint64) {
	c.counters.Duplicates++
	switch id.state {
	case StateREQRcvd:
		// The application has not answered yet: an MRA tells the active
		// side to wait our response time instead of giving up (12.6.6).
		f := mad.MRAFields{LocalCommID: id.localID, RemoteCommID: id.remoteID,
			MessageMRAed: mad.MsgKindREQ, ServiceTimeout: c.cfg.CMResponseTimeout}
		mad.MRA(format(&id.last, mad.AttrMRA, id.tid)).Encode(&f)
		id.state = StateMRAREQSent
		id.sendLast()
		// The MRA makes the active side wait our response time more
		// (cm_mra_handler): so does the pending REQ, within its bound.
		if t := c.cfg.Now().Add(ibTime(c.cfg.CMResponseTimeout) + ibTime(id.ackTimeout)); t.After(id.deadline) {
			id.deadline = t
			if id.deadline.After(id.pendingUntil) {
				id.deadline = id.pendingUntil
			}
		}
	case StateMRAREQSent:
		id.sendLast() // the MRA again
	case StateREPSent, StateMRAREPRcvd:
		// Our REP was lost: send it again now rather than at its timer.
		c.send(id, id.dest, id.msg[:])
	case StateTimewait:
		// An old connection's REQ (12.9.8.4): stale. The REJ echoes the
		// REQ's transaction, not our DREQ's.
		c.issueREJ(id.dest, tid, id.remoteID, id.localID, mad.RejStaleConn, mad.MsgKindREQ)
	default:
		c.drop()
	}
}

// AcceptParam are the passive side's answer to a ConnectRequest (struct
// ib_cm_rep_param as rdma_accept fills it).
type AcceptParam struct {
	// QPN is the application's QP (RESET or INIT), or for a SIDR_REQ the
	// UD QP the requester should send to.
	QPN         uint32
	QKey        uint32 // SIDR only: the UD QP's Q_Key
	StartingPSN uint32
	// ResponderResources and InitiatorDepth are cut to what the REQ
	// offered, as librdmacm's rdma_accept does.
	ResponderResources uint8
	InitiatorDepth     uint8
	RNRRetryCount      uint8 // what the active side's QP should use, 3 bits
	PrivateData        []byte
}

// targetACKDelay is the REP's target ACK delay code, what rxe's Linux CM
// sends (the golden captures' REPs say 15).
const targetACKDelay = 15

// Accept answers a ConnectRequest: moves the QP to INIT, RTR and RTS with
// the REQ's values and sends a REP, resent until the RTU comes (the
// Established event) or its retries run out (Unreachable). For a SIDR_REQ
// it sends a SIDR_REP with QPN and QKey.
func (id *ID) Accept(p AcceptParam) error {
	if id.state == StateSIDRREQRcvd {
		return id.sidrReply(mad.SIDRSuccess, p.QPN, p.QKey, p.PrivateData)
	}
	if id.state != StateREQRcvd && id.state != StateMRAREQSent {
		return fmt.Errorf("cm: Accept in state %v", id.state)
	}
	if len(p.PrivateData) > mad.REPPrivateDataLen {
		return fmt.Errorf("cm: %d bytes of private data, a REP holds %d", len(p.PrivateData), mad.REPPrivateDataLen)
	}
	c := id.cm
	id.setPending(false)
	id.qpn = p.QPN & 0xffffff
	id.ownPSN = p.StartingPSN & 0xffffff
	id.respRes = min(p.ResponderResources, id.respRes)
	id.initDepth = min(p.InitiatorDepth, id.initDepth)
	err := id.toInit()
	if err == nil {
		err = id.toRTS()
	}
	if err != nil {
		// rdma_accept's error path: QP to ERR, REJ "consumer defined".
		id.toErr()
		id.sendREJ(mad.RejConsumerDefined, mad.MsgKindREQ, nil, nil)
		id.state = StateIdle
		c.free(id)
		return err
	}
	f := mad.REPFields{LocalCommID: id.localID, RemoteCommID: id.remoteID, LocalQPN: id.qpn,
		StartingPSN: id.ownPSN, ResponderResources: id.respRes, InitiatorDepth: id.initDepth,
		TargetACKDelay: targetACKDelay, RNRRetryCount: p.RNRRetryCount & 7, LocalCAGUID: c.cfg.CAGUID}
	if id.xrcTarget {
		// cm_format_rep for XRC_TGT: the QPN in the local EECN field,
		// SRQ set, no initiator depth (a target issues nothing).
		f.LocalQPN, f.LocalEECN, f.InitiatorDepth, f.SRQ = 0, id.qpn, 0, true
	}
	copy(f.PrivateData[:], p.PrivateData)
	mad.REP(format(&id.msg, mad.AttrREP, id.tid)).Encode(&f)
	id.state = StateREPSent
	id.sendRetried(id.cmTimeout, id.cmRetries)
	return nil
}

// Reject refuses a ConnectRequest with a REJ (or a SIDR_REP of status
// "rejected") and ends the ID (ib_send_cm_rej; rdma_reject uses reason
// mad.RejConsumerDefined).
func (id *ID) Reject(reason mad.RejReason, privateData []byte) error {
	switch id.state {
	case StateSIDRREQRcvd:
		return id.sidrReply(mad.SIDRReject, 0, 0, privateData)
	case StateREQRcvd, StateMRAREQSent:
	default:
		return fmt.Errorf("cm: Reject in state %v", id.state)
	}
	if len(privateData) > mad.REJPrivateDataLen {
		return fmt.Errorf("cm: %d bytes of private data, a REJ holds %d", len(privateData), mad.REJPrivateDataLen)
	}
	id.sendREJ(reason, mad.MsgKindREQ, nil, privateData)
	id.state = StateIdle
	id.cm.free(id)
	return nil
}

// handleRTU is IBTA 12.9.6.2's last step (Linux cm_rtu_handler).
func (c *CM) handleRTU(from Dest, rtu mad.RTU) {
	id := c.lookup(from, rtu.RemoteCommID(), rtu.LocalCommID(), false)
	if id == nil || id.state != StateREPSent && id.state != StateMRAREPRcvd {
		c.drop() // late or duplicate: the connection is already up
		return
	}
	id.cancel()
	id.state = StateEstablished
	id.traceRecv()
	c.event(Event{Type: EventEstablished, ID: id, PrivateData: clonePD(rtu.PrivateData())})
}
