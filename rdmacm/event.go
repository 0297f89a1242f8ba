package rdmacm

import (
	"fmt"
	"net/netip"

	"github.com/rnicd/rnicd/abi"
	"github.com/rnicd/rnicd/verbs"
)

// EventType is enum rdma_cm_event_type, with librdmacm's values.
type EventType int

const (
	EventAddrResolved EventType = iota
	EventAddrError
	EventRouteResolved
	EventRouteError
	EventConnectRequest
	EventConnectResponse
	EventConnectError
	EventUnreachable
	EventRejected
	EventEstablished
	EventDisconnected
	EventDeviceRemoval
	EventMulticastJoin
	EventMulticastError
	EventAddrChange
	EventTimewaitExit
)

var eventNames = [...]string{
	"RDMA_CM_EVENT_ADDR_RESOLVED", "RDMA_CM_EVENT_ADDR_ERROR", "RDMA_CM_EVENT_ROUTE_RESOLVED",
	"RDMA_CM_EVENT_ROUTE_ERROR", "RDMA_CM_EVENT_CONNECT_REQUEST", "RDMA_CM_EVENT_CONNECT_RESPONSE",
	"RDMA_CM_EVENT_CONNECT_ERROR", "RDMA_CM_EVENT_UNREACHABLE", "RDMA_CM_EVENT_REJECTED",
	"RDMA_CM_EVENT_ESTABLISHED", "RDMA_CM_EVENT_DISCONNECTED", "RDMA_CM_EVENT_DEVICE_REMOVAL",
	"RDMA_CM_EVENT_MULTICAST_JOIN", "RDMA_CM_EVENT_MULTICAST_ERROR", "RDMA_CM_EVENT_ADDR_CHANGE",
	"RDMA_CM_EVENT_TIMEWAIT_EXIT",
}

// String is rdma_event_str.
func (t EventType) String() string {
	if t >= 0 && int(t) < len(eventNames) {
		return eventNames[t]
	}
	return fmt.Sprintf("UNKNOWN EVENT (%d)", int(t))
}

// fromCM maps the daemon's CM events (the host interface's codes) to
// rdma_cm's, one for one as cma.c's cma_ib_handler does.
var fromCM = map[uint8]EventType{
	abi.CMEventConnectRequest: EventConnectRequest,
	abi.CMEventEstablished:    EventEstablished,
	abi.CMEventRejected:       EventRejected,
	abi.CMEventUnreachable:    EventUnreachable,
	abi.CMEventConnectError:   EventConnectError,
	abi.CMEventDisconnected:   EventDisconnected,
	abi.CMEventTimewaitExit:   EventTimewaitExit,
}

// ConnParam is struct rdma_conn_param.
type ConnParam struct {
	// PrivateData: at most 56 bytes in Connect (the REQ's 92 less the
	// cma_hdr), 196 in Accept.
	PrivateData        []byte
	ResponderResources uint8
	InitiatorDepth     uint8
	RetryCount         uint8 // 3 bits, 7 = forever
	RNRRetryCount      uint8 // 3 bits, 7 = forever
}

// Event is struct rdma_cm_event.
type Event struct {
	Event EventType
	// ID is the CM ID the event is about; for CONNECT_REQUEST a new one,
	// and ListenID the listener it came to.
	ID, ListenID *ID
	// Status says why, for REJECTED, UNREACHABLE, CONNECT_ERROR; a
	// REJECTED for REJ reason 8 (nobody listens) wraps
	// syscall.ECONNREFUSED, "connection refused".
	Status error
	// RejectReason is the REJ reason of a REJECTED event.
	RejectReason uint16
	// Param are the peer's values: from the REQ on CONNECT_REQUEST (its
	// private data without the cma_hdr), from the REP on ESTABLISHED.
	Param ConnParam
	// Remote is the peer's address and port (CONNECT_REQUEST: from the
	// cma_hdr).
	Remote netip.AddrPort
	// UD is set instead of Param's meaning for IDs of the UDP port space
	// (the union's param.ud): on CONNECT_REQUEST the client's private
	// data, on ESTABLISHED the server's QP, Q_Key and address handle.
	UD *UDParam
}

// UDParam is struct rdma_ud_param: where the datagrams of a UD "connection"
// go. AH is the address handle to send with (ibv_create_ah from ah_attr),
// QPN and QKey the remote QP and Q_Key to name in each UD send WR.
type UDParam struct {
	PrivateData []byte
	AH          verbs.AH
	QPN         uint32
	QKey        uint32
}
