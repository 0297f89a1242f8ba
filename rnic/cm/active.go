package cm

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/wire/mad"
)

// ConnectParam are the active side's values for a connection (Linux
// struct ib_cm_req_param, filled as rdma_cm fills it).
type ConnectParam struct {
	ServiceID uint64
	// QPN is the application's QP, RC or UC, in RESET or INIT.
	QPN uint32
	// Transport is mad.TransportRC (default), mad.TransportUC, or
	// mad.TransportXRC for an XRC initiator QP (XRC_SEND).
	Transport uint8
	// Dest is the peer port (its GID); LocalGID is ours, sent in the REQ.
	Dest     Dest
	LocalGID mad.GID
	// StartingPSN is the QP's first PSN (24 bits).
	StartingPSN uint32
	PathMTU     ib.MTU
	// ResponderResources: RDMA READs and atomics the peer may have
	// outstanding at us; InitiatorDepth: those we may have at the peer.
	ResponderResources uint8
	InitiatorDepth     uint8
	RetryCount         uint8 // 3 bits, 7 = forever
	RNRRetryCount      uint8 // 3 bits, 7 = forever
	FlowLabel          uint32
	HopLimit           uint8 // 0: 64
	TrafficClass       uint8
	// PrivateData goes in the REQ (at most mad.REQPrivateDataLen bytes;
	// rdma_cm puts its cma_hdr first).
	PrivateData []byte
	Context     any
}

// Connect starts a connection: moves the QP to INIT, sends a REQ and
// retries it (ib_send_cm_req). The result comes as an event: Established,
// Rejected, Unreachable or ConnectError.
func (c *CM) Connect(p ConnectParam) (*ID, error) {
	if len(p.PrivateData) > mad.REQPrivateDataLen {
		return nil, fmt.Errorf("cm: %d bytes of private data, a REQ holds %d", len(p.PrivateData), mad.REQPrivateDataLen)
	}
	if p.PathMTU.Bytes() == 0 || p.Transport > mad.TransportUC && p.Transport != mad.TransportXRC || p.RetryCount > 7 || p.RNRRetryCount > 7 {
		return nil, errors.New("cm: connect parameters out of range (path MTU, transport, retry counts)")
	}
	id, err := c.newID(StateIdle)
	if err != nil {
		return nil, err
	}
	id.context = p.Context
	id.dest, id.localGID = p.Dest, p.LocalGID
	id.serviceID = p.ServiceID
	id.transport = p.Transport
	id.qpn = p.QPN & 0xffffff
	id.ownPSN = p.StartingPSN & 0xffffff
	id.pathMTU = uint8(p.PathMTU)
	id.respRes, id.initDepth = p.ResponderResources, p.InitiatorDepth
	id.retryCount = p.RetryCount
	if p.Transport == mad.TransportXRC {
		// An initiator answers no READ: its REQ offers no responder
		// resources (cm_format_req leaves them, the retry counts and
		// SRQ zero for XRC_INI).
		id.respRes = 0
	}
	id.flowLabel, id.trafficClass = p.FlowLabel&0xfffff, p.TrafficClass
	id.hopLimit = p.HopLimit
	if id.hopLimit == 0 {
		id.hopLimit = 64
	}
	id.ackTimeout = c.cfg.PacketLifeTime + 1
	id.tid = c.ownTID(id)
	if err := id.toInit(); err != nil {
		c.free(id)
		return nil, err
	}

	f := mad.REQFields{
		LocalCommID: id.localID, ServiceID: p.ServiceID, LocalCAGUID: c.cfg.CAGUID,
		LocalQPN: id.qpn, ResponderResources: p.ResponderResources, InitiatorDepth: p.InitiatorDepth,
		RemoteCMResponseTimeout: c.cfg.CMResponseTimeout, TransportType: p.Transport,
		StartingPSN: id.ownPSN, LocalCMResponseTimeout: c.cfg.CMResponseTimeout,
		RetryCount: p.RetryCount, PKey: p.Dest.PKey, PathMTU: id.pathMTU,
		RNRRetryCount: p.RNRRetryCount, MaxCMRetries: c.cfg.MaxCMRetries,
		// RoCE has no LIDs: rxe and Linux's CM send the permissive LID.
		PrimaryLocalLID: 0xffff, PrimaryRemoteLID: 0xffff,
		PrimaryLocalGID: p.LocalGID, PrimaryRemoteGID: p.Dest.GID,
		PrimaryFlowLabel: id.flowLabel, PrimaryTrafficClass: id.trafficClass,
		PrimaryHopLimit: id.hopLimit, PrimaryLocalACKTimeout: id.ackTimeout,
	}
	if p.Transport == mad.TransportXRC {
		f.ExtendedTransport = mad.ExtendedTransportXRC
		f.ResponderResources, f.RetryCount, f.RNRRetryCount = 0, 0, 0
	}
	copy(f.PrivateData[:], p.PrivateData)
	mad.REQ(format(&id.msg, mad.AttrREQ, id.tid)).Encode(&f)
	id.state = StateREQSent
	// ib_send_cm_req: each try waits two packet lifetimes and the peer's
	// CM response time.
	id.cmTimeout = 2*ibTime(c.cfg.PacketLifeTime) + ibTime(c.cfg.CMResponseTimeout)
	id.cmRetries = int(c.cfg.MaxCMRetries)
	id.sendRetried(id.cmTimeout, id.cmRetries)
	return id, nil
}

// handleREP is IBTA 12.9.6.1 on the active side (Linux cm_rep_handler).
func (c *CM) handleREP(from Dest, tid uint64, rep mad.REP) {
	id := c.lookup(from, rep.RemoteCommID(), rep.LocalCommID(), true)
	if id == nil {
		c.drop()
		if c.ids[rep.RemoteCommID()] == nil {
			// A REP for no connection of ours: REJ "invalid comm ID" so
			// the peer stops retrying. One that names a connection
			// with the wrong peer comm ID or address gets nothing: the
			// connection is someone else's.
			c.issueREJ(from, tid, rep.LocalCommID(), rep.RemoteCommID(), mad.RejInvalidCommID, mad.MsgKindREP)
		}
		return
	}
	switch id.state {
	case StateREQSent, StateMRAREQRcvd:
		// The answer to our REQ.
	case StateEstablished, StateMRAREPSent:
		// A duplicate: our RTU (or MRA) was lost; send it again
		// (cm_dup_rep_handler).
		if id.remoteID == rep.LocalCommID() && id.lastLive {
			c.counters.Duplicates++
			id.sendLast()
			return
		}
		c.drop()
		return
	default:
		c.drop()
		return
	}
	id.cancel()
	id.state = StateREPRcvd
	id.traceRecv()
	id.remoteID = rep.LocalCommID()
	id.remoteCAGUID = rep.LocalCAGUID()
	id.remoteQPN = rep.LocalQPN()
	if id.transport == mad.TransportXRC {
		// An XRC target's QPN comes in the local EECN field
		// (cm_rep_get_qpn).
		id.remoteQPN = rep.LocalEECN()
	}
	id.peerPSN = rep.StartingPSN()
	// The peer's resources bound ours: we may issue as many READs as it
	// accepts, and accept as many as it issues (cm_rep_handler).
	id.initDepth = min(id.initDepth, rep.ResponderResources())
	id.respRes = min(id.respRes, rep.InitiatorDepth())
	id.rnrRetry = rep.RNRRetryCount()
	c.remote[remoteKey{id.remoteID, id.remoteCAGUID}] = id
	c.remoteQPs[remoteKey{id.remoteQPN, id.remoteCAGUID}] = id
	remote := Remote{GID: id.dest.GID, CAGUID: id.remoteCAGUID, ServiceID: id.serviceID,
		QPN: id.remoteQPN, QKey: rep.LocalQKey(), StartingPSN: id.peerPSN, PathMTU: id.pathMTU,
		ResponderResources: rep.ResponderResources(), InitiatorDepth: rep.InitiatorDepth(),
		RNRRetryCount: id.rnrRetry, TransportType: id.transport}

	if err := id.toRTS(); err != nil {
		// rdma_cm: the QP cannot take the REP's values; reject the
		// REP and report RDMA_CM_EVENT_CONNECT_ERROR.
		id.toErr()
		id.sendREJ(mad.RejConsumerDefined, mad.MsgKindREP, nil, nil)
		id.state = StateIdle
		c.event(Event{Type: EventConnectError, ID: id, Remote: remote, Err: err})
		c.free(id)
		return
	}
	// RTU echoes the REQ's transaction (IBTA 12.6.9), and is what a
	// duplicate REP gets again.
	f := mad.RTUFields{LocalCommID: id.localID, RemoteCommID: id.remoteID}
	mad.RTU(format(&id.last, mad.AttrRTU, id.tid)).Encode(&f)
	id.state = StateEstablished // before the send: the trace shows RTU sent -> ESTABLISHED
	id.sendLast()
	c.event(Event{Type: EventEstablished, ID: id, Remote: remote, PrivateData: clonePD(rep.PrivateData())})
}

// handleMRA is IBTA 12.6.6: the peer needs more time (Linux cm_mra_handler).
func (c *CM) handleMRA(from Dest, mra mad.MRA) {
	id := c.lookup(from, mra.RemoteCommID(), mra.LocalCommID(), mra.MessageMRAed() == mad.MsgKindREQ)
	if id == nil {
		c.drop()
		return
	}
	switch {
	case id.state == StateREQSent && mra.MessageMRAed() == mad.MsgKindREQ:
		id.state = StateMRAREQRcvd
		id.remoteID = mra.LocalCommID()
	case id.state == StateREPSent && mra.MessageMRAed() == mad.MsgKindREP && mra.LocalCommID() == id.remoteID:
		id.state = StateMRAREPRcvd
	default:
		// A second MRA, or one for a message we did not send.
		c.drop()
		return
	}
	// Wait the service time the MRA asks for plus a packet lifetime, once;
	// the retries left stay (cm_mra_handler's ib_modify_mad).
	id.deadline = c.cfg.Now().Add(ibTime(mra.ServiceTimeout()) + ibTime(id.ackTimeout))
}

// handleREJ is IBTA 12.6.7 (Linux cm_rej_handler).
func (c *CM) handleREJ(from Dest, rej mad.REJ) {
	// A REJ of our REQ may come from a node that never knew us, so its
	// "remote comm ID" (ours) is all it can name (cm_acquire_rejected_id).
	var id *ID
	switch {
	case rej.Reason() == mad.RejTimeout && rej.RemoteCommID() == 0 && rej.RejectInfoLength() >= 8:
		// The active side gave up before it learnt our comm ID; it names
		// itself by its comm ID and, in the ARI, its CA GUID.
		id = c.remote[remoteKey{rej.LocalCommID(), binary.BigEndian.Uint64(rej.ARI())}]
		if id != nil && id.dest.GID != from.GID {
			c.counters.WrongSource++
			id = nil
		}
	case rej.MessageRejected() == mad.MsgKindREQ:
		id = c.lookup(from, rej.RemoteCommID(), rej.LocalCommID(), true)
	default:
		id = c.lookup(from, rej.RemoteCommID(), rej.LocalCommID(), false)
	}
	if id == nil {
		c.drop()
		return
	}
	switch id.state {
	case StateREQSent, StateMRAREQRcvd, StateREPSent, StateMRAREPRcvd, StateREQRcvd, StateMRAREQSent:
	default:
		c.drop()
		return
	}
	id.cancel()
	id.toErr()
	e := Event{Type: EventRejected, ID: id, Err: &RejectError{Reason: rej.Reason()},
		PrivateData: clonePD(rej.PrivateData())}
	if rej.Reason() == mad.RejStaleConn {
		// IBTA 12.6.7: the peer still holds an old connection of this QP;
		// keep ours in TIMEWAIT so the QP is not reused at once.
		id.enterTimewait()
		c.event(e)
		return
	}
	id.state = StateIdle
	c.event(e)
	c.free(id)
}
