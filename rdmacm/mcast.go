package rdmacm

import (
	"fmt"
	"net/netip"
	"syscall"

	"github.com/rnicd/rnicd/verbs"
)

// MulticastQPN is the remote QPN of every multicast datagram (a
// MULTICAST_JOIN's UD.QPN).
const MulticastQPN = 0xFFFFFF

// JoinMulticast is rdma_join_multicast on RoCEv2, as the kernel's cma.c
// does it (cma_iboe_join_multicast): no SA, the group's MGID is its IPv4
// address mapped (::ffff:a.b.c.d), and a MULTICAST_JOIN follows at once
// whose UD param sends to the group: an AH to the MGID (hop limit 64, as
// cma.c sets on RoCEv2), QPN 0xFFFFFF and, in the UDP port space,
// UDPQKey. The ID's QP (CreateQP) is attached to the group unless
// sendOnly (rdma_join_multicast_ex's SENDONLY_FULLMEMBER), as
// librdmacm's ucma_process_join does. The ID must be bound or have its
// address resolved. IPv6 groups are refused as the kernel refuses them
// on RoCEv2 (EOPNOTSUPP).
func (id *ID) JoinMulticast(group netip.Addr, sendOnly bool) error {
	if id.dev == nil {
		return fmt.Errorf("rdmacm: join %v: %w: bind the ID or resolve an address first", group, syscall.EINVAL)
	}
	group = group.Unmap()
	switch {
	case group.Is6():
		return fmt.Errorf("rdmacm: join %v: %w: IPv6 groups are not joined on RoCEv2", group, syscall.EOPNOTSUPP)
	case !group.IsMulticast():
		return fmt.Errorf("rdmacm: join %v: %w: not a multicast address (224.0.0.0/4)", group, syscall.EINVAL)
	}
	if _, ok := id.groups[group]; ok {
		return fmt.Errorf("rdmacm: join %v: %w: joined already", group, syscall.EADDRINUSE)
	}
	gid := verbs.GID(group.As16())
	attached := id.QP != nil && !sendOnly
	if attached {
		if err := id.QP.AttachMcast(gid); err != nil {
			return fmt.Errorf("rdmacm: join %v: %w", group, err)
		}
	}
	if id.groups == nil {
		id.groups = map[netip.Addr]bool{}
	}
	id.groups[group] = attached
	ud := &UDParam{AH: verbs.AH{DGID: gid, HopLimit: 64}, QPN: MulticastQPN}
	if id.ud() {
		ud.QKey = UDPQKey
	}
	id.ch.post(&Event{Event: EventMulticastJoin, ID: id, UD: ud})
	return nil
}

// LeaveMulticast is rdma_leave_multicast: the QP is detached from the
// group (a detach that fails does not stop the leave, as librdmacm's).
func (id *ID) LeaveMulticast(group netip.Addr) error {
	group = group.Unmap()
	attached, ok := id.groups[group]
	if !ok {
		return fmt.Errorf("rdmacm: leave %v: %w: not joined", group, syscall.EADDRNOTAVAIL)
	}
	delete(id.groups, group)
	if attached && id.QP != nil {
		id.QP.DetachMcast(verbs.GID(group.As16()))
	}
	return nil
}
