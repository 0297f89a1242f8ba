// Package cm models the Communication Manager agent of an RNIC: the block
// that sits on the General Services QP (QP1) and turns the CM's MADs (REQ,
// MRA, REJ, REP, RTU, DREQ, DREP, SIDR_REQ, SIDR_REP; IBTA vol. 1, chapter
// 12) into connected QPs. It mirrors Linux's drivers/infiniband/core/cm.c:
// the same states (enum ib_cm_state, IBTA 12.9.6 figures 129 to 131), the
// same timers (a message is resent every response timeout, up to the
// REQ's Max CM Retries, then the connection fails), the same answers to
// duplicates, and the same transaction IDs and communication IDs on the
// wire. rxe has no CM: in Linux the kernel's CM drives rxe's QP1 through
// the MAD layer, which is what this package does for rnicd's engine.
//
// A CM is a plain value with its dependencies injected (Config): a clock,
// a function that sends a 256-byte MAD to a peer's QP1, a QPModifier that
// moves the application's QP through INIT, RTR and RTS with the values the
// exchange agreed (the CM creates no QP: the application owns its QP, as
// with rdma_cm), and an event sink that receives rdma_cm-style events
// (RDMA_CM_EVENT_CONNECT_REQUEST, ..._ESTABLISHED, ..._DISCONNECTED...).
// It has no goroutine and no lock: its owner (the daemon's agent) calls
// HandleMAD for each MAD QP1 receives, the connection calls (Connect,
// Accept, Reject, Disconnect, Destroy) for the applications, and Expire
// when NextDeadline has passed; all from one goroutine, never from inside
// the event sink.
//
// rdma_cm's conventions (service IDs from IP ports, the cma_hdr at the
// front of a REQ's private data) are wire/mad's; this package carries
// private data as the application gives it.
package cm
