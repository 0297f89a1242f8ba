// Package rnic is the device: the verbs interface of the NIC (protection
// domains, memory regions, completion queues, shared receive queues,
// queue pairs, PostSend, PostRecv) and the two pipelines that run its
// engines, one goroutine each:
//
//   - the send pipeline takes doorbells and timer expiries and runs the WQE
//     engine (package wqe) of each QP that has work;
//   - the receive pipeline takes batches of packets from the port and runs
//     the RX packet handler (package rx) on them, then sends the ACKs it
//     coalesced over the batch.
//
// Both hand their packets to the port (package ibudp) in batches.
package rnic
