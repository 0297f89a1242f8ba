// Package mad models the management-datagram block of an RNIC's General
// Services Interface (GSI): the 256-byte MADs that QP1 sends and receives,
// and the Communication Manager's messages they carry (IBTA vol. 1,
// chapter 13.4 for the MAD header, chapter 12.6 for the CM messages).
//
// It mirrors the wire definitions Linux keeps in include/rdma/ib_mad.h
// (struct ib_mad_hdr), include/rdma/ibta_vol1_c12.h (the CM field table,
// tables 106 to 120 of the spec) and drivers/infiniband/core/cma.c
// (rdma_cm's service IDs and its cma_hdr private data); rxe itself has no
// MAD code: it only carries QP1's UD packets, as rnicd's engine does.
//
// The package has the same two faces as wire/bth:
//
//   - zero-copy views in the style of gVisor's tcpip/header: MAD is a view
//     of the whole 256-byte datagram, and REQ, MRA, REJ, REP, RTU, DREQ,
//     DREP, SIDRReq and SIDRRep are views of the 232 bytes of CM message
//     that follow the MAD header, so every offset in them is the offset in
//     the spec's tables. Constructors (ParseMAD, ParseREQ, ...) refuse short
//     input; after that every accessor is in bounds. Each message has a
//     Fields struct that its Encode writes and its Fields method reads;
//     reserved bits are written as zero, as Linux's CM writes them, so a
//     decoded message re-encodes to the same bytes. Nothing allocates.
//   - a gopacket layer (layers.go), the CM MAD that follows a RoCE UD SEND
//     ONLY to QP1, for tools, tests and capture files.
//
// Every MAD comes from the network: a view only promises that reading it
// is in bounds, not that its values make sense. The CM agent (rnic/cm)
// checks them.
package mad
