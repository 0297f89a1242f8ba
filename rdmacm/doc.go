// Package rdmacm is the RDMA connection manager for Go applications,
// named after librdmacm (rdma_cm.h): an event channel, CM IDs that
// resolve an address and a route, listen, connect, accept, reject and
// disconnect, and the RDMA_CM_EVENT_* events. It connects verbs QPs
// through the CM agent of the rnicd that owns the address (the IB CM's
// REQ/REP/RTU/DREQ on QP1, rnic/cm), the way rdma_cm picks the RDMA
// device that owns the bound or source address; rdma_cm's cma_hdr goes
// in front of the REQ's private data (wire/mad). IDs of the UDP port
// space (CreateIDIn(PSUDP)) carry UD QPs: their connect is a service ID
// resolution (SIDR_REQ/SIDR_REP) that tells the client the server's QPN
// and Q_Key, as cma.c's cma_resolve_ib_udp and cma_sidr_rep_handler do.
//
// Mirrors: rdma-core librdmacm/cma.c over Linux drivers/infiniband/core
// ucma.c and cma.c.
package rdmacm
