// Package ib is the vocabulary of the NIC: the names every block of rnicd
// and every application share, as IBTA vol. 1 chapters 10 and 11 (verbs)
// and libibverbs' verbs.h define them: work requests and completions with
// their opcodes and statuses, QP types, states and attributes, address
// handles, memory access flags, path MTUs and the device's limits.
//
// It owns no state and models no hardware block: it is the register layout
// the blocks agree on (rxe's equivalent is rdma-core's include/rdma/ib_user_verbs.h
// with rxe_opcode.h). The numeric values are libibverbs' own, so a value can
// cross the control socket or a ring slot unchanged. The rules that belong
// to the names themselves live here too, once: which WR opcodes a QP type
// supports, and which completion opcode a WR's completion carries.
//
// Package verbs gives an application these types under the same names
// (type aliases, not copies: verbs.SendWR is ib.SendWR), with the verbs'
// errors (ErrQPState, ErrQueueFull, ErrCQOverrun, WRError), so a WR goes
// from the application into its ring slot, and a completion out of its
// slot into the application's slice, with no conversion; the field docs
// are here, once.
//
// ib imports nothing of the project, so every package, from wire up to
// verbs, may import it.
package ib
