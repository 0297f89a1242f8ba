// Package netif holds the facts of the network interface an RNIC's port
// runs on, read from netlink: the block of a NIC that knows its own link
// (name, index, MAC, MTU) and the port attributes derived from it, the
// active IB MTU and the GID table.
//
//   - InterfaceOf and InterfaceByName find the interface that holds an
//     address or has a name, as rxe is bound to a netdev (rxe_net.c);
//   - ActiveMTU is the IB MTU rxe runs on an interface's MTU (rxe.c,
//     rxe_set_mtu), MTUEnum its verbs encoding (IBV_MTU_*);
//   - GID, GIDTable and DefaultGID are the RoCEv2 GIDs and the table ib_core
//     builds for a RoCE port from the interface's addresses
//     (drivers/infiniband/core/roce_gid_mgmt.c): the default GID from the
//     MAC at index 0, then the IPv4 addresses mapped, then the IPv6 ones.
//
// It reads the kernel's state and keeps none: no sockets, no packets. The
// port (wire/ibudp) asks it which interface and MTU an address gives; the
// NIC and the tools ask it for GIDs.
package netif
