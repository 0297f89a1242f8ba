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
// From PostSend to the application's Poll a send WR's wr_id is written
// and read 5 times, each where the representation really changes:
//
//  1. QP.PostSend encodes the SendWR into its send ring's slot
//     (abi.EncodeSendWQE): the slot is the ABI the C library writes too.
//  2. The daemon's engine, at the doorbell or polling the ring, fetches it
//     (Device.FetchSend calls the host interface's qpObj.Fetch through
//     qpmgr.SendSource, which decodes it, abi.DecodeSendWQE) and checks
//     it (Device.checkSend, the one validator), which wraps the same
//     ib.SendWR in the engine's qpmgr.SendWQE: a copy, not a conversion.
//  3. When the WR is done (the completer's ACK, a flush), qpmgr.QP's
//     completeSend retires its ring slot (SendSource.Retire) and makes the
//     completion, an ib.WC whose WRID is the WQE's.
//  4. The CQ hands it to the completion ring (qpmgr.CompletionSink, the
//     host interface's cqObj.Complete), which writes the CQE (abi.PutCQE).
//  5. CQ.Poll decodes the CQE into the caller's []WC (abi.GetCQE).
//
// That is 5 conversions, not the 3 aimed at (before the types were one, a
// copy on each side, a SendWR to the NIC's and the NIC's WC to the
// application's, made 7): the ring codecs, two each way, are the ABI's
// and stay while the rings are bytes a C program shares. The way still
// climbs back up three times, where the engine
// (rnic, qpmgr) calls the host interface above it through interfaces it
// defines (SendSource.Fetch, Retire, CompletionSink.Complete), so that
// the device imports nothing of the host side: reading the calls down
// from PostSend, that is where the trail goes through an interface.
//
// Memory that the NIC reads or writes must come from Context.Alloc, which
// returns memory the NIC can share; RegMR registers a slice of it. As in
// libibverbs, the address of a buffer in an SGE, and the address a peer
// uses with an rkey, is the buffer's virtual address in this process
// (Addr), unless the MR is zero-based.
package verbs
