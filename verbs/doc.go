// Package verbs is the application's side of rnicd, modeled on libibverbs:
// open a device, allocate a PD, register memory, create CQs and QPs, post
// work requests and poll completions.
//
// A Context reaches a NIC in one of two ways. Open connects to a running
// rnicd by device name over its control socket (the daemon path: memory and
// queues shared with the daemon). OpenLocal starts a NIC inside the calling
// process, for tests and the demo. Both give the same objects and the same
// semantics.
//
// Everything an application needs is here under libibverbs' names: work
// requests (SendWR, RecvWR, SGE), completions (WC with its WCStatus and
// WCOpcode), QP types, states and attributes, access flags and errors
// (ErrQPState, *WRError, *RequestError). No other package of rnicd is
// needed to write one. The WR, WC and attribute types and the verbs'
// errors are the NIC's own (package ib, whose go doc shows their fields,
// e.g. go doc ib.SendWR): an application and the NIC speak one
// vocabulary, and errors.Is(err, ErrQPState) holds whichever side refused.
//
// # A wr_id's way
//
// Counted here: a conversion is a change of form of what holds the
// wr_id (a Go value of one type becomes bytes of a slot, or bytes
// become a value). Copying a value of the same type is not one, and is
// named where it happens. A send WR's wr_id goes through three
// conversions from PostSend until the application polls (steps 1 to 3
// below), plus the poll's own read of the CQE slot into the
// application's WC (step 4), which no design can spare while the CQE
// ring is bytes a C program reads too. Call by call, file by file:
//
//  1. verbs.QP.PostSend (verbs/qp.go) writes the application's SendWR
//     into the send ring's slot with abi.EncodeSendWQE (abi/ring.go):
//     conversion 1, ib.SendWR to slot bytes. The slot layout is the ABI
//     clib's post_send writes too. PostSend then stores the producer
//     index and, only if the engine sleeps, sends the doorbell.
//  2. The device fetches. rnic's pipelines.fetchSend (rnic/fetch.go) calls
//     its QP's send source, qpmgr.SendRing.Fetch
//     (rnic/qpmgr/sendring.go), which decodes the slot with
//     abi.DecodeSendWQE straight into the WR field of the device's
//     record, qpmgr.SendWQE: conversion 2, slot bytes to ib.SendWR,
//     the copy of shared memory that a NIC makes by DMA.
//     pipelines.postWQEs then has checkSend (rnic/fetch.go) validate
//     that record in place, and qpmgr.QP.PostSend (rnic/qpmgr/qp.go)
//     places it in the QP's send queue (a copy of the same SendWQE, not
//     a conversion), where the requester and completer read it.
//  3. When the WR is done (the completer's ACK, rx.Completer.completeSend
//     in rnic/rx/completer.go; the requester's, wqe.Engine.completeSend in
//     rnic/wqe/requester.go; or a flush, qpmgr.QP.Flush),
//     qpmgr.QP.CompleteSend and completeSend (rnic/qpmgr/qp.go) retire
//     its ring slot (SendRing.Retire: the ring's consumer index, no
//     wr_id) and, if it is signaled or failed, call qpmgr.CQ.PushSend
//     (rnic/qpmgr/cq.go) with the record's fields, which writes the CQE
//     slot with abi.PutSendCQE: conversion 3, SendWQE to slot bytes, with
//     no ib.WC made between. cqeRing.publish (rnic/qpmgr/cqring.go)
//     moves the CQ's producer index, takes the arm and writes the wake
//     pipes (abi.Wake).
//  4. The poll: verbs.CQ.Poll (verbs/cq.go), through CQ.poll, reads the
//     CQE slot into the caller's []WC with abi.GetCQE. This read is the
//     poll itself; clib's poll_cq is the same read in C.
//
// No call climbs back up from the device to the host interface on that
// way: the QP's rings and the CQ's ring were handed over at create_qp
// and create_cq (rnic.Device.AttachQPRings, qpmgr.CQ.AttachRing), so
// fetching, retiring, writing the CQE, arming and waking are the
// device's own calls, with no callback into hostif and no completion
// sink there. What starts step 2 calls down too: after a doorbell
// message, hostif's conn.doorbell (hostif/queues.go) calls
// rnic.QPRings.SendDoorbell (rnic/hostrings.go), which calls
// pipelines.fetchSend; while the polling engine is awake (no doorbell),
// the engine (engine.pollHosts, rnic/engine.go) polls the same QPRings
// itself (QPRings.Poll, then pipelines.fetchSend).
//
// A receive WR's wr_id takes the same three: verbs' postRecv
// (verbs/srq.go, for QP.PostRecv and SRQ.PostRecv) writes the slot with
// abi.EncodeRecvWQE (conversion 1); the device's receive queue fetches
// it itself when it runs empty or at a doorbell (qpmgr.RecvQueue.Pop or
// Refill in rnic/qpmgr/rq.go, qpmgr.RecvRing.Fetch in
// rnic/qpmgr/recvring.go), decoding it with abi.DecodeRecvWQE into the
// device's record, an ib.RecvWR (conversion 2), which the responder
// holds while the message arrives (qpmgr.RespState.WQE; a UD datagram's
// is popped for it alone); the responder (rnic/rx/responder.go) then
// completes that record with what it learned of the message
// (qpmgr.RecvCompletion: byte_len, imm, src_qp, status), and
// qpmgr.QP.CompleteRecv hands both to qpmgr.CQ.PushRecv, which writes the
// CQE slot with abi.PutRecvCQE from the record's wr_id (conversion 3, no
// ib.WC made between); CQ.Poll reads it (abi.GetCQE), the poll itself.
//
// Memory that the NIC reads or writes must come from Context.Alloc, which
// returns memory the NIC can share; RegMR registers a slice of it. As in
// libibverbs, the address of a buffer in an SGE, and the address a peer
// uses with an rkey, is the buffer's virtual address in this process
// (Addr), unless the MR is zero-based.
package verbs
