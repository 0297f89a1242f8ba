package cm

import "fmt"

// State is a connection's CM state (IBTA 12.9.6, figures 129 to 131;
// Linux enum ib_cm_state).
//
// The transitions, by the message or call that causes them (each handler
// has the same switch, with the spec's section):
//
//	active side                         passive side
//	IDLE --Connect, send REQ--> REQ_SENT          (REQ arrives) --> REQ_RCVD
//	REQ_SENT --MRA(REQ)--> MRA_REQ_RCVD            REQ_RCVD --dup REQ, send MRA--> MRA_REQ_SENT
//	REQ_SENT|MRA_REQ_RCVD --REP, RTR+RTS,          REQ_RCVD|MRA_REQ_SENT --Accept, RTR+RTS,
//	    send RTU--> ESTABLISHED                        send REP--> REP_SENT
//	REQ_SENT|MRA_REQ_RCVD --REJ--> IDLE            REP_SENT --MRA(REP)--> MRA_REP_RCVD
//	REQ_SENT|MRA_REQ_RCVD --retries out--> IDLE     REP_SENT|MRA_REP_RCVD --RTU--> ESTABLISHED
//	                                               REP_SENT|MRA_REP_RCVD --retries out--> IDLE
//	                                               REQ_RCVD|MRA_REQ_SENT --Reject, send REJ--> IDLE
//
//	either side
//	ESTABLISHED --Disconnect, send DREQ--> DREQ_SENT --DREP or retries out--> TIMEWAIT
//	ESTABLISHED|DREQ_SENT --DREQ, QP to ERR, send DREP--> TIMEWAIT
//	TIMEWAIT --timewait passes--> IDLE (the ID is freed)
//
//	SIDR (UD service resolution, 12.11)
//	IDLE --SIDRRequest, send SIDR_REQ--> SIDR_REQ_SENT --SIDR_REP or retries out--> IDLE
//	(SIDR_REQ arrives) --> SIDR_REQ_RCVD --SIDRReply, send SIDR_REP--> IDLE
//
// REP_RCVD and MRA_REP_SENT are the active side between a REP and its RTU
// in Linux, where the consumer moves its QP; here the CM moves the QP
// itself in the same step, so the active side passes REP_RCVD without
// stopping and never sends an MRA for a REP. DREQ_RCVD is likewise passed
// at once: the CM answers a DREQ with a DREP without waiting for the
// application (Linux's rdma_cm waits for rdma_disconnect), so that a peer's
// disconnect completes even if the application never looks.
type State uint8

const (
	StateIdle State = iota
	StateListen
	StateREQSent
	StateREQRcvd
	StateMRAREQSent
	StateMRAREQRcvd
	StateREPSent
	StateREPRcvd
	StateMRAREPSent
	StateMRAREPRcvd
	StateEstablished
	StateDREQSent
	StateDREQRcvd
	StateTimewait
	StateSIDRREQSent
	StateSIDRREQRcvd
)

var stateNames = [...]string{
	StateIdle:        "IDLE",
	StateListen:      "LISTEN",
	StateREQSent:     "REQ_SENT",
	StateREQRcvd:     "REQ_RCVD",
	StateMRAREQSent:  "MRA_REQ_SENT",
	StateMRAREQRcvd:  "MRA_REQ_RCVD",
	StateREPSent:     "REP_SENT",
	StateREPRcvd:     "REP_RCVD",
	StateMRAREPSent:  "MRA_REP_SENT",
	StateMRAREPRcvd:  "MRA_REP_RCVD",
	StateEstablished: "ESTABLISHED",
	StateDREQSent:    "DREQ_SENT",
	StateDREQRcvd:    "DREQ_RCVD",
	StateTimewait:    "TIMEWAIT",
	StateSIDRREQSent: "SIDR_REQ_SENT",
	StateSIDRREQRcvd: "SIDR_REQ_RCVD",
}

// String returns the state's name as Linux's ib_cm tracepoints print it
// without the IB_CM_ prefix.
func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}
