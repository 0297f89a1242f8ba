// Package dma models the DMA engine of an RNIC: the block that sits between
// the transport engines (the requester in rnic/wqe, the responder and
// completer in rnic/rx) and host memory.
//
// It owns the memory region table: every MR registered with the device, its
// protection domain, its access flags and the memory behind it. Every byte the
// NIC reads from or writes to registered memory goes through a Table, which
// checks, in order, the key (lkey or rkey, including its 8-bit key part, so a
// stale key from a deregistered MR fails), the PD, the invalidation state (for
// remote access), the access flags and the bounds. The rule the package
// enforces is the one a real RNIC's memory translation and protection table
// enforces: no write outside a registered region, ever, whatever a packet
// says. All address arithmetic is done so that it cannot overflow, and the
// whole range of a scatter is checked before the first byte is written.
//
// The two data paths:
//
//   - local access through a scatter/gather list (ibv_sge) named by lkeys:
//     CheckSGL when a work request is posted, Gather when the requester reads
//     a payload, Scatter when the responder writes a SEND into a receive WQE or
//     the completer writes a READ response into the requester's buffers;
//   - remote access named by an rkey and a virtual address from a RETH or
//     AtomicETH: Remote for RDMA WRITE and READ, AtomicCompareSwap and
//     AtomicFetchAdd for atomics.
//
// Gather, Scatter and Remote are on the per-packet hot path and allocate
// nothing on success.
package dma
