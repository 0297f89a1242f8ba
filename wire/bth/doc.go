// Package bth models the packet-format block of an RNIC: the InfiniBand
// transport headers that RoCEv2 carries inside UDP (destination port 4791).
//
// It owns the wire layout of every transport header (BTH, RETH, AETH,
// AtomicETH, AtomicAckETH, ImmDt, IETH, DETH and the RoCEv2 CNP), the opcode
// table that says which headers follow each opcode (IBTA vol. 1, 9.2 and
// table 38), the AETH syndrome encoding (9.7.5.1) and the invariant CRC
// (ICRC, RoCEv2 annex A17.3.3).
//
// The package has two faces over one set of definitions:
//
//   - zero-copy views (BTH, RETH, ...), byte slices with accessor methods in
//     the style of gVisor's tcpip/header, and Parse, which checks a whole
//     packet once and returns a Packet view; nothing here allocates on
//     success, so the NIC's data path uses these;
//   - gopacket layers (layers.go), registered on UDP port 4791, for tools,
//     tests and capture files.
//
// Packet.CheckICRCAnyID verifies an IPv4 packet whose ID the receiver
// cannot see (a UDP socket's view of rxe's traffic) by solving for the ID
// (anyid.go).
//
// A packet is "RoCE part" from the BTH to the end of the ICRC: the bytes of a
// UDP payload. Every length in it may lie; Parse checks them all before any
// accessor is used.
package bth
