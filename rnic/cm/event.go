package cm

import (
	"errors"
	"fmt"

	"github.com/rnicd/rnicd/wire/mad"
)

// EventType is what happened to a connection, named after librdmacm's enum
// rdma_cm_event_type (the rdma_cm layer in Linux's cma.c turns the CM's
// events into these one for one).
type EventType uint8

const (
	// EventConnectRequest: a REQ (or SIDR_REQ) matched a listener; the
	// application answers with Accept or Reject (RDMA_CM_EVENT_CONNECT_REQUEST).
	EventConnectRequest EventType = iota + 1
	// EventEstablished: the QP is in RTS and the exchange is complete; on
	// the active side of a SIDR, the peer's UD QPN and Q_Key are known
	// (RDMA_CM_EVENT_ESTABLISHED).
	EventEstablished
	// EventRejected: the peer sent a REJ (Err is a *RejectError) or a
	// SIDR_REP with a status other than success (RDMA_CM_EVENT_REJECTED).
	EventRejected
	// EventUnreachable: every retry of a REQ, REP or SIDR_REQ went
	// unanswered (Err is ErrTimeout; RDMA_CM_EVENT_UNREACHABLE).
	EventUnreachable
	// EventConnectError: the QP could not be moved to the agreed state;
	// the CM rejected the connection (RDMA_CM_EVENT_CONNECT_ERROR).
	EventConnectError
	// EventDisconnected: a DREQ or DREP arrived, or our DREQ's retries ran
	// out (Err is ErrTimeout then); the QP is in ERR
	// (RDMA_CM_EVENT_DISCONNECTED).
	EventDisconnected
	// EventTimewaitExit: the connection left TIMEWAIT; its QP may be reused
	// and the ID is gone (RDMA_CM_EVENT_TIMEWAIT_EXIT).
	EventTimewaitExit
)

var eventNames = [...]string{
	EventConnectRequest: "RDMA_CM_EVENT_CONNECT_REQUEST",
	EventEstablished:    "RDMA_CM_EVENT_ESTABLISHED",
	EventRejected:       "RDMA_CM_EVENT_REJECTED",
	EventUnreachable:    "RDMA_CM_EVENT_UNREACHABLE",
	EventConnectError:   "RDMA_CM_EVENT_CONNECT_ERROR",
	EventDisconnected:   "RDMA_CM_EVENT_DISCONNECTED",
	EventTimewaitExit:   "RDMA_CM_EVENT_TIMEWAIT_EXIT",
}

// String returns the librdmacm name, as rdma_event_str does.
func (t EventType) String() string {
	if int(t) < len(eventNames) && eventNames[t] != "" {
		return eventNames[t]
	}
	return fmt.Sprintf("EventType(%d)", uint8(t))
}

// Event is one event of a connection, delivered to Config.Event.
type Event struct {
	Type EventType
	ID   *ID
	// Listener is the listener a ConnectRequest matched.
	Listener *Listener
	// Remote are the peer's values from its REQ (ConnectRequest) or REP
	// (Established on the active side).
	Remote Remote
	// PrivateData is a copy of the message's private data (REQ, REP, REJ,
	// DREQ, DREP, SIDR_REQ, SIDR_REP), all of it, as rdma_cm passes it on.
	PrivateData []byte
	// Err says why, for Rejected, Unreachable, ConnectError and a
	// Disconnected caused by a timeout.
	Err error
}

// Remote are the values the peer sent about its side of the connection.
type Remote struct {
	GID                mad.GID
	CAGUID             uint64
	ServiceID          uint64
	QPN                uint32
	QKey               uint32 // SIDR: the UD QP's Q_Key
	StartingPSN        uint32
	PathMTU            uint8 // IBTA MTU code, as ib.MTU
	ResponderResources uint8
	InitiatorDepth     uint8
	RetryCount         uint8
	RNRRetryCount      uint8
	TransportType      uint8 // mad.TransportRC or mad.TransportUC
}

// ErrTimeout is the Err of events caused by a message whose retries ran out.
var ErrTimeout = errors.New("cm: no answer from the peer (timed out)")

// RejectError is the Err of a Rejected event: the reason the peer gave.
type RejectError struct {
	Reason mad.RejReason
	// SIDRStatus is set instead of Reason for a SIDR_REP.
	SIDRStatus mad.SIDRStatus
	SIDR       bool
}

func (e *RejectError) Error() string {
	if e.SIDR {
		if e.SIDRStatus == mad.SIDRUnsupported {
			return "cm: connection refused (SIDR_REP status 1: no listener on the service ID)"
		}
		return fmt.Sprintf("cm: rejected (SIDR_REP status %d)", e.SIDRStatus)
	}
	switch e.Reason {
	case mad.RejInvalidServiceID:
		// rdma_cm's rdma_reject_msg and librdmacm report it as ECONNREFUSED.
		return "cm: connection refused (REJ reason 8: no listener on the service ID)"
	case mad.RejConsumerDefined:
		return "cm: rejected by the peer application (REJ reason 28)"
	case mad.RejStaleConn:
		return "cm: rejected as a stale connection (REJ reason 10)"
	case mad.RejTimeout:
		return "cm: rejected: the peer timed out (REJ reason 4)"
	}
	return fmt.Sprintf("cm: rejected (REJ reason %d)", e.Reason)
}

// Refused reports whether the reject means nobody listens on the service
// ID: the "connection refused" of a TCP connect.
func (e *RejectError) Refused() bool {
	return !e.SIDR && e.Reason == mad.RejInvalidServiceID || e.SIDR && e.SIDRStatus == mad.SIDRUnsupported
}
