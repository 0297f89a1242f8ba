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
// depends on the contract and not on the daemon. The device imports it
// too, as rxe's driver includes rdma_user_rxe.h: it reads and writes the
// rings itself once the daemon's host interface has handed them over.
//
// The slot codecs, and who calls each (in Go; clib calls the C side's):
//
//	EncodeSendWQE  client: verbs QP.PostSend (C: clib post_send)
//	DecodeSendWQE  device: qpmgr.SendRing.Fetch, into the engine's SendWQE
//	PutSendCQE     device: qpmgr.CQ.PushSend, from that SendWQE
//	EncodeRecvWQE  client: verbs QP.PostRecv, SRQ.PostRecv (C: post_recv)
//	DecodeRecvWQE  device: qpmgr.RecvRing.Fetch, into the receive queue
//	PutCQE         device: qpmgr.CQ.Push, from a receive's WC
//	GetCQE         client: verbs CQ.Poll (C: clib poll_cq)
//
// so a send's wr_id is written into a WQE slot, decoded into the engine's
// record, written from it into a CQE slot and read into the application's
// WC, and no other function changes its form (verbs' package doc walks it
// call by call).
package abi
