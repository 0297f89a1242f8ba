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
// From PostSend to the application's Poll a send WR's wr_id changes form
// three times, once per hop between the three parties that hold it (the
// application, the device, the application again), each by one of the
// ABI's slot codecs, and never passes through a copy of another type:
//
//  1. QP.PostSend writes the SendWR into its send ring's slot
//     (abi.EncodeSendWQE): the slot is the ABI the C library writes too.
//  2. At the doorbell (the host interface's conn.doorbell, or the polling
//     engine) the device fetches from the ring it was handed at
//     create_qp: rnic.Device.FetchSend calls qpmgr.SendRing.Fetch, which
//     decodes the slot straight into the engine's record, qpmgr.SendWQE
//     (abi.DecodeSendWQE). Device.checkSend validates that record in
//     place and qpmgr.QP.PostSend queues it.
//  3. When the WR is done (the completer's ACK, a flush),
//     qpmgr.QP.completeSend retires its slot (SendRing.Retire, the ring's
//     consumer index) and writes the CQE from the same record
//     (qpmgr.CQ.PushSend, abi.PutSendCQE) into the CQ's ring, which CQ.Poll
//     reads into the caller's []WC (abi.GetCQE): the CQE slot is the one
//     form between the device's record and the application's WC.
//
// Counted codec call by codec call that is four (EncodeSendWQE,
// DecodeSendWQE, PutSendCQE, GetCQE): two slots, each written by one side
// and read by the other, the least while the rings are bytes a C program
// shares. No call climbs back up: the device owns the QP's and the CQ's
// rings once the host interface has handed them over (as a NIC's queue
// contexts hold their queues' addresses), so it fetches, retires, writes
// the CQE, takes the CQ's arm and writes its wake pipes itself, and the
// completion carries the wr_id down to the ring the application polls.
// Before, the device called the host interface back for each (a fetch,
// a retire, a CompletionSink), and the wr_id was copied twice more, into
// a SendWQE at validation and into an ib.WC at completion.
//
// The polling engine still asks the host interface which rings moved
// (rnic.HostQueue.Poll, hostif's qpObj.Poll, which rings the doorbell):
// no wr_id travels in that call, the fetch it leads to is step 2's.
//
// A receive WR's wr_id goes the same way with one form more, as its
// completion has fields the WQE lacks (byte_len, imm, src_qp):
// QP.PostRecv (abi.EncodeRecvWQE), the device's qpmgr.RecvRing.Fetch
// (abi.DecodeRecvWQE) into the receive queue's ib.RecvWR, the
// responder's ib.WC (qpmgr.QP.CompleteRecv), written by qpmgr.CQ.Push
// (abi.PutCQE), CQ.Poll (abi.GetCQE).
//
// Memory that the NIC reads or writes must come from Context.Alloc, which
// returns memory the NIC can share; RegMR registers a slice of it. As in
// libibverbs, the address of a buffer in an SGE, and the address a peer
// uses with an rkey, is the buffer's virtual address in this process
// (Addr), unless the MR is zero-based.
package verbs
