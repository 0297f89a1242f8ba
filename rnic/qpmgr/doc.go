// Package qpmgr is the QP manager of the NIC: it owns the queue pairs, their
// state machine (RESET, INIT, RTR, RTS, SQD, SQE, ERR; IBTA 10.3.1), their
// attributes and PSN state, the send and receive queues of work requests,
// the completion queues, the retransmission and RNR timers, and the
// device's counters.
//
// The names it works with (work requests, completions, QP types, states
// and attributes, MTUs, counter names) are the NIC's shared vocabulary in
// package ib; qpmgr holds the state behind them and the rules that need it
// (the ModifyQP transition table, IBTA 11.2.4.2).
//
// The engines work on a QP with its lock held: the WQE engine (package
// wqe) from the send pipeline, the responder and completer (package rx)
// from the receive pipeline, and the verbs from the application's
// goroutine. Everything a QP holds is guarded by QP.Lock unless its comment
// says otherwise.
package qpmgr
