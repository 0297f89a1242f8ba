// Package lend is the memory a daemon shares with each client it lends a
// socket of its port (hostif.KindLendPort, verbs.OpenDirect): the page
// through which a NIC that runs in the client's process is still part of
// the daemon's NIC, as a real NIC's second function shares its management
// block with the first. The daemon creates it (a memfd, Create) and hands
// it out with the socket; the borrower maps it (Map).
//
// Three things cross it, none with a request per event:
//
//   - daemon to borrower, flag words: the daemon's trace has a reader, its
//     capture is on, and the fault injector's impairments (a generation
//     word and the two directions' Faults under a sequence lock). The
//     borrower's trace probe reads the trace word, one atomic load, as a
//     daemon's probe reads its tracer's flag.
//   - borrower to daemon, on the daemon's request: the borrower's counters,
//     QP table and injector counters. The daemon bumps a request word and
//     wakes the borrower's publisher (a futex on the shared word); the
//     publisher writes a snapshot under a sequence lock and answers, so
//     `rnic res` and `rnic stat` see it as they see the daemon's own.
//   - borrower to daemon, a bounded ring of trace events and packet
//     copies, written only while the trace or capture word is set, drained
//     by the daemon into its tracer and its pcap. A full ring drops and
//     counts (the lost word).
//
// The borrower's side is hostile to the daemon: every count, length and
// name it writes is checked before use (Fuzz tests cover the decoders),
// and a borrower that does not answer a request within a bound is shown
// as last published.
//
// rxe has no counterpart: its data path is in the kernel, which owns
// every QP. This mirrors what mlx5 shares between a PF and the VFs it
// lends to guests: counters and state readable by the PF's tools.
package lend
