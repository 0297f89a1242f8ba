package ib

import "fmt"

// EventType is an asynchronous event's type (IBTA 11.6.3), numbered as
// libibverbs' enum ibv_event_type, so that the daemon's events reach a C
// program's ibv_async_event as they are.
type EventType uint8

// The events rnicd raises. Affiliated ones name a QP, CQ or SRQ; the port
// events name the port; DEVICE_FATAL is the daemon's hang-up, which no
// message carries.
const (
	EventCQErr            EventType = 0  // IBV_EVENT_CQ_ERR: a completion found its CQ full
	EventQPFatal          EventType = 1  // IBV_EVENT_QP_FATAL: local work queue catastrophic error
	EventQPReqErr         EventType = 2  // IBV_EVENT_QP_REQ_ERR: invalid request local work queue error
	EventQPAccessErr      EventType = 3  // IBV_EVENT_QP_ACCESS_ERR: local access violation work queue error
	EventCommEst          EventType = 4  // IBV_EVENT_COMM_EST: first packet received in RTR
	EventDeviceFatal      EventType = 8  // IBV_EVENT_DEVICE_FATAL
	EventPortActive       EventType = 9  // IBV_EVENT_PORT_ACTIVE
	EventPortErr          EventType = 10 // IBV_EVENT_PORT_ERR
	EventSRQLimitReached  EventType = 15 // IBV_EVENT_SRQ_LIMIT_REACHED
	EventQPLastWQEReached EventType = 16 // IBV_EVENT_QP_LAST_WQE_REACHED
)

var eventNames = map[EventType]string{
	EventCQErr: "CQ_ERR", EventQPFatal: "QP_FATAL", EventQPReqErr: "QP_REQ_ERR", EventQPAccessErr: "QP_ACCESS_ERR",
	EventCommEst: "COMM_EST", EventDeviceFatal: "DEVICE_FATAL", EventPortActive: "PORT_ACTIVE",
	EventPortErr: "PORT_ERR", EventSRQLimitReached: "SRQ_LIMIT_REACHED", EventQPLastWQEReached: "QP_LAST_WQE_REACHED",
}

// String is the event's libibverbs name without its IBV_EVENT_ prefix.
func (e EventType) String() string {
	if n, ok := eventNames[e]; ok {
		return n
	}
	return fmt.Sprintf("Event(%d)", uint8(e))
}

// QPEvent says whether e is affiliated with a QP (ibv_ack_async_event
// counts it on the QP).
func (e EventType) QPEvent() bool {
	switch e {
	case EventQPFatal, EventQPReqErr, EventQPAccessErr, EventCommEst, EventQPLastWQEReached:
		return true
	}
	return false
}
