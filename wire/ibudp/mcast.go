package ibudp

import (
	"errors"
	"fmt"
	"net/netip"
)

// Multicaster is a Port that joins IP multicast groups, as rxe's port
// joins the group of each MGID a QP attaches to (rxe_mcast_add in
// rxe_net.c): RoCEv2 carries a multicast UD datagram as an IP multicast
// datagram to the group whose address the MGID holds (IPv4-mapped for
// IPv4), so sending one is an ordinary Send to that address and
// receiving one needs the group joined on the port's interface. ModeUDP
// ports are Multicasters.
type Multicaster interface {
	// JoinMulticast joins group on the port's interface; the group's
	// datagrams come from RecvMulticast from then on. At most
	// MaxMcastGroups groups at once; joining a joined group is an error.
	JoinMulticast(group netip.Addr) error
	// LeaveMulticast leaves a joined group.
	LeaveMulticast(group netip.Addr) error
	// RecvMulticast blocks until at least one datagram of a joined group
	// arrives and fills bufs[0:n], each Buf's Dst the group. It checks
	// and counts as Recv does. One goroutine calls it at a time. After
	// Close it returns an error wrapping net.ErrClosed.
	RecvMulticast(bufs []*Buf) (n int, err error)
}

// MaxMcastGroups bounds the groups a port joins at once. Each is a socket
// of its own (a UDP socket receives a group's datagrams only when bound to
// the group's address: a port's socket is bound to its unicast address),
// so the bound is the daemon's descriptors; rxe allows 8192 groups
// (RXE_MAX_MCAST_GRP), which no test or program here comes near.
const MaxMcastGroups = 64

// MulticastGroup checks that gid is a multicast GID of RoCEv2 and returns
// its IP group address: an IPv4-mapped GID of 224.0.0.0/4 (rdma_cm's MGID
// for an IPv4 group, cma_iboe_set_mgid) or an IPv6 ff00::/8 address, as
// rdma_is_multicast_addr takes them.
func MulticastGroup(gid [16]byte) (netip.Addr, error) {
	a := netip.AddrFrom16(gid)
	if a.Is4In6() {
		a = a.Unmap()
	}
	if !a.IsMulticast() {
		return netip.Addr{}, fmt.Errorf("ibudp: GID %v is not a multicast GID (IPv4-mapped 224.0.0.0/4 or ff00::/8)", netip.AddrFrom16(gid))
	}
	return a, nil
}

// ErrNoMulticast is what a device answers for a port that is no
// Multicaster (ModePacket): its AF_PACKET socket would see the groups'
// frames, but nothing joins them on the interface.
var ErrNoMulticast = errors.New("ibudp: the port cannot join multicast groups (ModePacket): run rnicd with a UDP port")
