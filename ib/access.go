package ib

import (
	"strconv"
	"strings"
)

// Access is a set of memory access flags, with the values of libibverbs'
// enum ibv_access_flags so they can be passed through unchanged from a
// client. A memory region and a QP each carry a set.
type Access uint32

// Memory access flags (IBV_ACCESS_*).
const (
	AccessLocalWrite   Access = 1  // IBV_ACCESS_LOCAL_WRITE: the NIC may write it for local work (receives, READ responses)
	AccessRemoteWrite  Access = 2  // IBV_ACCESS_REMOTE_WRITE: RDMA WRITE from the peer
	AccessRemoteRead   Access = 4  // IBV_ACCESS_REMOTE_READ: RDMA READ from the peer
	AccessRemoteAtomic Access = 8  // IBV_ACCESS_REMOTE_ATOMIC: atomics from the peer
	AccessMWBind       Access = 16 // IBV_ACCESS_MW_BIND: memory windows may be bound to the region
	AccessZeroBased    Access = 32 // IBV_ACCESS_ZERO_BASED: the region answers to addresses from 0
	AccessOnDemand     Access = 64 // IBV_ACCESS_ON_DEMAND: ODP; accepted, memory here is always resident
)

// AccessKnown holds every flag rnicd understands; a region asking for any
// other bit is refused rather than silently given less than it asked.
const AccessKnown = AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead |
	AccessRemoteAtomic | AccessMWBind | AccessZeroBased | AccessOnDemand

// AccessRemote is every flag that grants the peer access.
const AccessRemote = AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic

var accessNames = [...]struct {
	a    Access
	name string
}{
	{AccessLocalWrite, "LOCAL_WRITE"},
	{AccessRemoteWrite, "REMOTE_WRITE"},
	{AccessRemoteRead, "REMOTE_READ"},
	{AccessRemoteAtomic, "REMOTE_ATOMIC"},
	{AccessMWBind, "MW_BIND"},
	{AccessZeroBased, "ZERO_BASED"},
	{AccessOnDemand, "ON_DEMAND"},
}

// String names the flags as libibverbs does without the IBV_ACCESS_ prefix,
// joined by "|", e.g. "LOCAL_WRITE|REMOTE_READ". No flags is "0"; unknown
// bits are shown in hex at the end.
func (a Access) String() string {
	if a == 0 {
		return "0"
	}
	var sb strings.Builder
	for _, n := range accessNames {
		if a&n.a == 0 {
			continue
		}
		if sb.Len() > 0 {
			sb.WriteByte('|')
		}
		sb.WriteString(n.name)
	}
	if rest := a &^ AccessKnown; rest != 0 {
		if sb.Len() > 0 {
			sb.WriteByte('|')
		}
		sb.WriteString("0x")
		sb.WriteString(strconv.FormatUint(uint64(rest), 16))
	}
	return sb.String()
}
