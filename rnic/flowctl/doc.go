// Package flowctl models the Flow Control Manager of an RNIC: the block
// that decides when each QP may send. rxe has no such block (it sends
// no CNPs and reacts to none; its only limit is RXE_MAX_UNACKED_PSNS in
// rxe_req.c), so this package mirrors NVIDIA's ConnectX instead: mlx5's
// congestion-control parameters and counters (Linux
// drivers/infiniband/hw/mlx5/cong.c) with their names and defaults.
//
// It owns three things, each asked by the requester (rnic/wqe) before a
// packet and told by the RX handler (rnic/rx) of what arrives:
//
//   - the window of unacknowledged PSNs of an RC QP (Manager.WindowOpen):
//     the requester's own flow control, which the peer never sees. It was
//     a field of the requester; it belongs here because it answers the
//     same question as the pacer, "may this QP send now?", and a second
//     algorithm (a window-based one) must be able to shape it;
//   - a pacer per QP (Pacer, Manager.Wait and Sent): the QP's current rate,
//     which a sender never exceeds. A QP that has seen no congestion is
//     unpaced: asking costs one branch and no clock read
//     (BenchmarkUnpaced);
//   - the congestion-control algorithm behind a small interface
//     (Algorithm, ReactionPoint), so that TIMELY or HPCC can sit beside
//     DCQCN without a change to the requester. DCQCN's reaction point
//     (dcqcn.go) and notification point (Manager.CEReceived: at most one
//     CNP per QP per np_min_time_between_cnps) are built, with every
//     mlx5 parameter settable by its name (Params).
//
// The ACK hold (rnic/ackhold.go and rx.Acker.Flush: a responder holding
// its ACK back to leave with the QP's next request) does not belong here
// but with the responder, in rnic/rx, timer included: it decides when an
// acknowledgement leaves, from the responder's state (the PSN and MSN to
// acknowledge, whether the QP is about to send), and every responder
// error path must flush it. Flow control decides when data may leave;
// it never holds ACKs or CNPs (an RNIC sends neither ECN-capable nor
// paced, since delaying them would slow the peer by the local rate), and
// a held ACK's only effect on it is the peer's window opening later,
// which is why the hold is bounded (rnic.Config.AckHold, 200 us).
//
// Times are nanoseconds of a Clock (monotonic; tests use a fake one),
// rates bits per second, alpha in 1024ths as the hardware's 10-bit
// fixed point.
package flowctl
