package cm

import (
	"encoding/binary"
	"fmt"

	"github.com/rnicd/rnicd/wire/mad"
)

// Disconnect sends a DREQ and retries it (ib_send_cm_dreq). The QP goes to
// ERR when the DREP comes, or when the retries run out; either way the
// Disconnected event follows, then TIMEWAIT and TimewaitExit.
func (id *ID) Disconnect(privateData []byte) error {
	if id.state != StateEstablished {
		return fmt.Errorf("cm: Disconnect in state %v", id.state)
	}
	if len(privateData) > mad.DREQPrivateDataLen {
		return fmt.Errorf("cm: %d bytes of private data, a DREQ holds %d", len(privateData), mad.DREQPrivateDataLen)
	}
	id.sendDREQ(privateData)
	return nil
}

func (id *ID) sendDREQ(privateData []byte) {
	// A DREQ starts a new transaction (cm_form_tid).
	id.tid = id.cm.ownTID(id)
	f := mad.DREQFields{LocalCommID: id.localID, RemoteCommID: id.remoteID, RemoteQPN: id.remoteQPN}
	copy(f.PrivateData[:], privateData)
	mad.DREQ(format(&id.msg, mad.AttrDREQ, id.tid)).Encode(&f)
	id.state = StateDREQSent
	id.sendRetried(id.cmTimeout, id.cmRetries)
}

// handleDREQ is IBTA 12.9.6.3 (Linux cm_dreq_handler).
func (c *CM) handleDREQ(from Dest, tid uint64, dreq mad.DREQ) {
	id := c.lookup(from, dreq.RemoteCommID(), dreq.LocalCommID(), false)
	if id == nil {
		// Nothing to disconnect, or not this sender's to: answer anyway
		// so the peer stops asking, as cm_dreq_handler does
		// (cm_issue_drep). The DREP goes to the sender and names only
		// the comm IDs it sent: no connection changes.
		c.drop()
		f := mad.DREPFields{LocalCommID: dreq.RemoteCommID(), RemoteCommID: dreq.LocalCommID()}
		mad.DREP(format(&c.buf, mad.AttrDREP, tid)).Encode(&f)
		c.send(nil, from, c.buf[:])
		return
	}
	if dreq.RemoteQPN() != id.qpn {
		c.drop() // names another QP: not for this connection
		return
	}
	switch id.state {
	case StateREPSent, StateMRAREPRcvd, StateEstablished, StateDREQSent:
		// REP_SENT: the RTU was lost but the peer is done already; DREQ_SENT:
		// both sides disconnect at once. Either way, answer and go down.
	case StateTimewait:
		// Our DREP was lost: the peer asks again (cm_dreq_handler).
		c.counters.Duplicates++
		id.sendDREP(tid)
		return
	default:
		c.drop()
		return
	}
	id.cancel()
	id.toErr()
	id.state = StateDREQRcvd
	id.traceRecv()
	// TIMEWAIT before the DREP goes, so that the trace shows DREP sent
	// DREQ_RCVD -> TIMEWAIT.
	id.enterTimewait()
	id.sendDREP(tid)
	c.event(Event{Type: EventDisconnected, ID: id, PrivateData: clonePD(dreq.PrivateData())})
}

// sendDREP answers the DREQ of transaction tid. The CM answers at once,
// where Linux's rdma_cm waits for the application's rdma_disconnect: a
// peer's disconnect then completes even if the application never looks.
func (id *ID) sendDREP(tid uint64) {
	f := mad.DREPFields{LocalCommID: id.localID, RemoteCommID: id.remoteID}
	mad.DREP(format(&id.last, mad.AttrDREP, tid)).Encode(&f)
	id.sendLast()
}

// handleDREP ends our DREQ's transaction (Linux cm_drep_handler).
func (c *CM) handleDREP(from Dest, drep mad.DREP) {
	id := c.lookup(from, drep.RemoteCommID(), drep.LocalCommID(), false)
	if id == nil || id.state != StateDREQSent {
		c.drop()
		return
	}
	id.cancel()
	id.enterTimewait()
	id.traceRecv()
	c.event(Event{Type: EventDisconnected, ID: id, PrivateData: clonePD(drep.PrivateData())})
}

// Destroy ends the connection from the application's side, whatever its
// state, as Linux's cm_destroy_id does: an attempt under way is rejected,
// an established connection is disconnected. From here on the ID sends no
// events and never touches the QP again (it moves the QP to ERR first if
// it was connected); it lives on only as long as a DREQ or TIMEWAIT needs.
func (id *ID) Destroy() {
	if id.freed || id.destroyed {
		return
	}
	c := id.cm
	switch id.state {
	case StateREQSent, StateMRAREQRcvd:
		// The peer may hold our REQ: REJ "timeout" with our CA GUID as
		// the additional information, as cm_destroy_id sends.
		id.cancel()
		var guid [8]byte
		binary.BigEndian.PutUint64(guid[:], c.cfg.CAGUID)
		id.sendREJ(mad.RejTimeout, mad.MsgKindREQ, guid[:], nil)
		id.toErr()
	case StateREQRcvd, StateMRAREQSent:
		id.sendREJ(mad.RejConsumerDefined, mad.MsgKindREQ, nil, nil)
	case StateREPSent, StateMRAREPRcvd:
		id.cancel()
		id.sendREJ(mad.RejConsumerDefined, mad.MsgKindREP, nil, nil)
		id.toErr()
	case StateEstablished:
		id.toErr()
		id.destroyed = true
		id.sendDREQ(nil)
		return
	case StateDREQSent, StateTimewait:
		id.destroyed = true
		return // finish the DREQ or the TIMEWAIT
	case StateSIDRREQRcvd:
		_ = id.sidrReply(mad.SIDRReject, 0, 0, nil)
	}
	id.destroyed = true
	id.state = StateIdle
	c.free(id)
}
