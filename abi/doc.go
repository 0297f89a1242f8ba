// Package abi is the ABI of rnicd: the contract between the device and
// its clients (verbs and rdmacm in Go, clib's libibverbs and librdmacm in
// C through clib/src/rnic.h). It is to rnicd what rxe's uapi header
// rdma_user_rxe.h is to rxe, included by both the kernel driver and the
// rdma-core provider: what crosses between the two, and nothing of either
// side's workings.
//
// It holds the control protocol (proto.go: the message header, the
// request kinds, reply codes and their errnos, CM event codes; the
// per-kind bodies in messages.go and cmmsg.go, with their encoders and
// decoders) and the queues in shared memory (ring.go: the ring header's
// words, the send, receive and CQE slot layouts and their codecs, the
// wake pipe's count). Values are part of the protocol: append, never
// renumber.
//
// clib/src/rnic.h repeats it for C; TestCHeaderABI compiles the header
// and fails on any constant, offset or size that differs from this
// package's, slot offsets as the codecs here write them.
//
// Where it stands. Both sides import it: the client writes WQEs and
// reads CQEs with its codecs, and the device (rnic/qpmgr) reads the WQE
// slots and writes the CQE slots itself once the daemon's host interface
// (hostif) has handed the rings over, as rxe's driver includes
// rdma_user_rxe.h and a NIC reads and writes its queues by DMA in the
// format its driver shares. So it is a package of its own at the top of
// the tree, not part of hostif: under hostif/ the tree would say the NIC
// imports its host side. It imports nothing of the project but ib, the
// leaf vocabulary (which imports nothing), because its slot codecs write
// ib's WR and WC types (SendWR, RecvWR, WC, SGE) and so keep every WQE and
// CQE codec in this one place; and nothing outside the standard library,
// so a client that links the contract links nothing of the device.
// ib/imports_test.go holds both, and that nothing under rnic/ imports the
// host side (hostif, monitor, verbs, rdmacm, cmd, internal/rnictest).
//
// The slot codecs, and who calls each in Go (clib calls the C side's):
//
//	EncodeSendWQE  client: verbs.QP.PostSend (verbs/qp.go); C: post_send
//	DecodeSendWQE  device: qpmgr.SendRing.Fetch (rnic/qpmgr/sendring.go)
//	PutSendCQE     device: qpmgr.CQ.PushSend (rnic/qpmgr/cq.go)
//	EncodeRecvWQE  client: verbs' postRecv, for QP.PostRecv and SRQ.PostRecv (verbs/srq.go); C: post_recv
//	DecodeRecvWQE  device: qpmgr.RecvRing.Fetch (rnic/qpmgr/recvring.go)
//	PutRecvCQE     device: qpmgr.CQ.PushRecv (rnic/qpmgr/cq.go)
//	PutCQE         tests: the whole CQE, the layout's reference
//	GetCQE         client: verbs' CQ.poll, for CQ.Poll (verbs/cq.go); C: poll_cq
//
// A send's wr_id changes form three times before the application polls:
// written into the WQE slot (EncodeSendWQE), decoded from it into the
// device's record, qpmgr.SendWQE (DecodeSendWQE), written from that
// record into the CQE slot (PutSendCQE); the poll then reads the CQE slot
// into the application's WC (GetCQE), and that read is the poll itself.
// A receive's takes the same three: EncodeRecvWQE, DecodeRecvWQE into
// the device's ib.RecvWR, PutRecvCQE from it. verbs' package doc walks
// both call by call.
package abi
