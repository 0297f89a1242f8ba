// Package rnic is the device, in three blocks:
//
//   - Device is the verbs facade a program calls (hostif, verbs' local
//     NIC, the CM agent): protection domains, memory regions, completion
//     queues, shared receive queues, queue pairs, PostSend, PostRecv,
//     multicast (objects.go, post.go, mcast.go), the host rings a daemon
//     hands over (hostrings.go) and the calls that order or wake the
//     engines (Fence, Wake, PollRx). It owns the MR and QP tables.
//   - The pipelines (pipeline.go) do the work behind the verbs: the WQE
//     fetch and its one validator (fetch.go), the run list and the
//     doorbell, and the engines, one queue each (queue.go) with its RX
//     packet handler, held ACKs (ackhold.go) and counters.
//   - Observer (observer.go, Device.Observer) is the statistics and
//     capture block: counters, QP status, engine and port counters, the
//     packet capture (tap.go). Nothing on the data path calls it.
//
// Without the polling engine, the one queue runs two pipelines, one
// goroutine each:
//
//   - the send pipeline takes doorbells and timer expiries and runs the WQE
//     engine (package wqe) of each QP that has work;
//   - the receive pipeline takes batches of packets from the port and runs
//     the RX packet handler (package rx) on them, then sends the ACKs it
//     coalesced over the batch.
//
// Both hand their packets to the port (package ibudp) in batches. Either
// may also run in an application's goroutine: a post whose send pipeline
// is idle runs the requester itself, and PollRx runs the receive pipeline
// for an application that busy-polls, so that a message needs no wake-up
// of the device's goroutines on its way. A device in the application's
// process (Config.CoalescePosts) lets small posts on a QP that awaits an
// ACK wait for that ACK or the next PollRx, so that they leave together
// as one run (coalesce.go).
//
// A daemon runs the polling engine instead (Config.PollIdle, engine.go):
// the NIC's doorbell and WQE fetch block and both pipelines in one loop
// on one thread, which polls the host's rings (HostQueue) and the port
// while there is work and sleeps when idle, the host making a system
// call to ring a doorbell only while it sleeps, as virtio's event index,
// vhost-user's polling back ends and Google Snap's engines do.
package rnic
