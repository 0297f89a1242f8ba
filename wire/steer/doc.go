// Package steer is the receive-side steering block of a multi-queue NIC:
// as an RNIC's flow steering (RSS, or mlx5's steering tables) hands each
// packet to the receive queue of the engine that owns its QP, a Group
// makes the kernel hand each datagram of a port's UDP 4791 to the socket
// of its destination QPN's queue (QueueOf). The queues' sockets form a
// SO_REUSEPORT group and an eBPF program of type SK_REUSEPORT chooses
// among them (Linux's net/core/sock_reuseport.c runs it; rxe has one
// queue and no such block).
//
// It owns the program, its socket map and the rule of which QPN goes to
// which queue; it does not own the sockets, which the port (wire/ibudp)
// opens and hands it, nor the engines that read them (rnic).
package steer

// MaxQueues is the most queues a steered port has: the program keys on
// the low byte of the QPN.
const MaxQueues = 256

// QueueOf is the queue of qpn on a port of queues queues: its low byte
// modulo queues, which the steering program computes. QPNs handed out in
// sequence go round the queues.
func QueueOf(qpn uint32, queues int) int {
	if queues <= 1 {
		return 0
	}
	return int(qpn&0xff) % queues
}
