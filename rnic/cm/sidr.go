package cm

import (
	"fmt"
	"time"

	"github.com/rnicd/rnicd/wire/mad"
)

// Service ID resolution (IBTA 12.11): a UD client asks which QP and Q_Key
// serve a service ID; no connection forms and no QP is moved.

// SIDRParam are a SIDR_REQ's values (struct ib_cm_sidr_req_param).
type SIDRParam struct {
	ServiceID   uint64
	Dest        Dest
	PrivateData []byte // at most mad.SIDRReqPrivateDataLen; rdma_cm puts its cma_hdr first
	Context     any
}

// SIDRRequest sends a SIDR_REQ and retries it. The answer comes as
// Established (Remote.QPN and Remote.QKey set), Rejected or Unreachable;
// the ID ends with it.
func (c *CM) SIDRRequest(p SIDRParam) (*ID, error) {
	if len(p.PrivateData) > mad.SIDRReqPrivateDataLen {
		return nil, fmt.Errorf("cm: %d bytes of private data, a SIDR_REQ holds %d", len(p.PrivateData), mad.SIDRReqPrivateDataLen)
	}
	id, err := c.newID(StateSIDRREQSent)
	if err != nil {
		return nil, err
	}
	id.context, id.dest, id.serviceID = p.Context, p.Dest, p.ServiceID
	id.tid = c.ownTID(id)
	f := mad.SIDRReqFields{RequestID: id.localID, PKey: p.Dest.PKey, ServiceID: p.ServiceID}
	copy(f.PrivateData[:], p.PrivateData)
	mad.SIDRReq(format(&id.msg, mad.AttrSIDRReq, id.tid)).Encode(&f)
	// rdma_cm's SIDR timer: its CM response time per try (cma_resolve_ib_udp).
	id.cmTimeout, id.cmRetries = ibTime(c.cfg.CMResponseTimeout), int(c.cfg.MaxCMRetries)
	id.sendRetried(id.cmTimeout, id.cmRetries)
	return id, nil
}

// handleSIDRRep ends a SIDR_REQ's transaction (Linux cm_sidr_rep_handler).
func (c *CM) handleSIDRRep(from Dest, rep mad.SIDRRep) {
	id := c.lookup(from, rep.RequestID(), 0, false)
	if id == nil || id.state != StateSIDRREQSent {
		c.drop()
		return
	}
	id.cancel()
	id.state = StateIdle
	e := Event{Type: EventEstablished, ID: id, PrivateData: clonePD(rep.PrivateData()),
		Remote: Remote{GID: id.dest.GID, ServiceID: rep.ServiceID(), QPN: rep.QPN(), QKey: rep.QKey()}}
	if rep.Status() != mad.SIDRSuccess {
		e.Type, e.Remote = EventRejected, Remote{GID: id.dest.GID}
		e.Err = &RejectError{SIDR: true, SIDRStatus: rep.Status()}
	}
	c.event(e)
	c.free(id)
}

// handleSIDRReq is the passive side of 12.11 (Linux cm_sidr_req_handler).
func (c *CM) handleSIDRReq(from Dest, tid uint64, req mad.SIDRReq) {
	key := sidrKey{req.RequestID(), from.GID}
	if c.sidrRcvd[key] != nil {
		c.counters.Duplicates++ // still being answered: the answer will go
		return
	}
	l := c.listeners[req.ServiceID()]
	var id *ID
	var err error
	if l != nil && c.pending >= c.cfg.MaxPending {
		err = fmt.Errorf("cm: %d REQs pending, the most this CM holds", c.pending)
	} else if l != nil {
		id, err = c.newID(StateSIDRREQRcvd)
	}
	if l != nil && err != nil {
		c.counters.PendingDropped++
	}
	if l == nil || err != nil {
		status := mad.SIDRUnsupported
		if l != nil {
			status = mad.SIDRReject
		}
		f := mad.SIDRRepFields{RequestID: req.RequestID(), Status: status, ServiceID: req.ServiceID()}
		mad.SIDRRep(format(&c.buf, mad.AttrSIDRRep, tid)).Encode(&f)
		c.send(nil, from, c.buf[:])
		return
	}
	id.listener, id.context = l, l.context
	id.tid, id.dest, id.serviceID = tid, from, req.ServiceID()
	id.remoteID = req.RequestID()
	c.sidrRcvd[key] = id
	// Held, unanswered, as long as the requester retries (rdma_cm's SIDR
	// timer: our response time per try), as a REQ is (handleREQ).
	id.setPending(true)
	id.pendingUntil = c.cfg.Now().Add(min(c.cfg.MaxPendingTime,
		time.Duration(c.cfg.MaxCMRetries+1)*ibTime(c.cfg.CMResponseTimeout)))
	id.msgLive, id.retries, id.deadline = true, 0, id.pendingUntil
	c.event(Event{Type: EventConnectRequest, ID: id, Listener: l, PrivateData: clonePD(req.PrivateData()),
		Remote: Remote{GID: from.GID, ServiceID: id.serviceID}})
	if id.refused {
		c.counters.ListenDrops++
		c.logDrop("the listener's backlog is full", from, "service_id", fmt.Sprintf("%#x", id.serviceID))
		id.state = StateIdle
		c.free(id)
	}
}

// sidrReply answers a SIDR_REQ and ends the ID.
func (id *ID) sidrReply(status mad.SIDRStatus, qpn, qkey uint32, privateData []byte) error {
	if len(privateData) > mad.SIDRRepPrivateDataLen {
		return fmt.Errorf("cm: %d bytes of private data, a SIDR_REP holds %d", len(privateData), mad.SIDRRepPrivateDataLen)
	}
	c := id.cm
	f := mad.SIDRRepFields{RequestID: id.remoteID, Status: status, QPN: qpn, ServiceID: id.serviceID, QKey: qkey}
	copy(f.PrivateData[:], privateData)
	mad.SIDRRep(format(&c.buf, mad.AttrSIDRRep, id.tid)).Encode(&f)
	c.send(id, id.dest, c.buf[:])
	id.state = StateIdle
	c.free(id)
	return nil
}
