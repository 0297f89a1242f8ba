// Package abi is the host interface's ABI: the contract between the
// daemon (hostif, its server) and its clients (verbs and rdmacm in Go,
// clib's libibverbs and librdmacm in C). It is to rnicd what rxe's uapi
// header rdma_user_rxe.h is to rxe, shared by the kernel driver and the
// rdma-core provider: what crosses between the two, and nothing of
// either side's workings.
//
// It holds the control protocol (proto.go: the message header, the
// request kinds, reply codes and their errnos, CM event codes; the
// per-kind bodies in messages.go and cmmsg.go, with their encoders and
// decoders) and the queues in shared memory (ring.go: the ring header's
// words, the send, receive and CQE slot layouts and their codecs). Values
// are part of the protocol: append, never renumber.
//
// clib/src/rnic.h repeats it for C; TestCHeaderABI compiles the header
// and fails on any constant, offset or size that differs from this
// package's, slot offsets as the codecs here write them.
//
// It imports nothing of the project but ib, whose SendWR, RecvWR, WC and
// SGE the slot codecs write (ib/imports_test.go holds that), so a client
// depends on the contract and not on the daemon.
package abi
