package verbs

import (
	"net/netip"
	"strconv"

	"github.com/rnicd/rnicd/abi"
	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/rnic"
)

// DeviceAttr describes the device (ibv_query_device).
type DeviceAttr struct {
	Name            string
	NodeGUID        uint64
	FWVer           string
	MaxQP           int
	MaxQPWR         int
	MaxSGE          int
	MaxCQ           int
	MaxCQE          int
	MaxMR           int
	MaxMW           int // memory windows (clib's ibv_alloc_mw)
	MaxMRSize       uint64
	MaxPD           int
	MaxQPRdAtom     int
	MaxQPInitRdAtom int
	MaxSRQ          int
	MaxSRQWR        int
	MaxInlineData   int
	AtomicCap       string // "ATOMIC_HCA" like rxe
	// Multicast: groups the device's QPs attach to, QPs a group, and
	// attachments in all (ibv_device_attr.max_mcast_grp and the rest).
	MaxMcastGrp, MaxMcastQPAttach, MaxTotalMcastQPAttach int
}

// PortAttr describes the device's one port (ibv_query_port) and its GID
// table (ibv_query_gid).
type PortAttr struct {
	State     string // "PORT_ACTIVE", or "PORT_DOWN" while the link under the port is down
	MaxMTU    MTU
	ActiveMTU MTU
	LinkLayer string // "Ethernet"
	Addr      netip.Addr
	// GIDs is the GID table: the port's RoCEv2 GID (Addr as an IPv4-mapped
	// or IPv6 GID) at index 0 and 1, where rxe puts an IPv4 address's v1
	// and v2 GIDs; rnicd speaks RoCEv2 only.
	GIDs []GID
	// GIDIndex is the index of Addr's RoCEv2 GID in GIDs.
	GIDIndex int
}

// QPInfo is one row of `rnic res`: a QP of the device, whoever owns it
// (rdma res show qp).
type QPInfo struct {
	QPN      uint32
	Type     QPType
	State    QPState
	SQPSN    uint32 // next PSN the requester sends
	RQPSN    uint32 // next PSN the responder expects
	DestQPN  uint32
	Dest     netip.Addr
	PathMTU  MTU
	Owner    string // process name and pid of the client, "rnicd" for the daemon's own
	SQDepth  int    // WQEs posted and not completed
	RQDepth  int    // receive WQEs posted and not consumed
	Counters map[string]uint64
}

// QueryDevice returns the device's attributes (ibv_query_device).
func (c *Context) QueryDevice() (DeviceAttr, error) {
	p, err := c.QueryPort()
	if err != nil {
		return DeviceAttr{}, err
	}
	return DeviceAttr{
		Name: c.name, NodeGUID: NodeGUID(p.Addr), FWVer: "0.1", MaxQP: 1 << 16, MaxQPWR: ib.MaxQPWR, MaxSGE: ib.MaxSGE,
		MaxCQ: 1 << 16, MaxCQE: rnic.MaxCQE, MaxMR: 1 << 16, MaxMW: rnic.MaxMW, MaxMRSize: 1 << 40, MaxPD: 1 << 16,
		MaxQPRdAtom: ib.MaxRdAtomic, MaxQPInitRdAtom: ib.MaxRdAtomic, MaxSRQ: 1 << 16,
		MaxSRQWR: ib.MaxQPWR, MaxInlineData: ib.MaxInlineData, AtomicCap: "ATOMIC_HCA",
		MaxMcastGrp: rnic.MaxMcastGroups, MaxMcastQPAttach: rnic.MaxMcastQPAttach,
		MaxTotalMcastQPAttach: rnic.MaxMcastGroups * rnic.MaxMcastQPAttach,
	}, nil
}

// NodeGUID is the node GUID of the device whose port has address a. rxe
// takes it from the interface's MAC, which every rnicd on one interface
// (on lo, every one) would share; rnicd serves one address per device, so
// the GUID is made from it instead: an IPv4 address in the low 32 bits
// under a locally administered prefix (127.0.0.1 gives
// 0200:0000:7f00:0001), an IPv6 address's interface identifier.
func NodeGUID(a netip.Addr) uint64 {
	a = a.Unmap()
	b := a.As16()
	if a.Is4() {
		return 0x02<<56 | uint64(b[12])<<24 | uint64(b[13])<<16 | uint64(b[14])<<8 | uint64(b[15])
	}
	var g uint64
	for _, x := range b[8:] {
		g = g<<8 | uint64(x)
	}
	return g
}

// QueryPort returns the port's attributes and GID table (ibv_query_port).
func (c *Context) QueryPort() (PortAttr, error) {
	var r abi.PortReply
	if _, err := c.call(abi.KindQueryPort, &abi.Empty{}, nil, &r); err != nil {
		return PortAttr{}, err
	}
	mtu := MTUFromBytes(int(r.ActiveMTU))
	// rxe lays an IPv4 address out as two GIDs, RoCE v1 at index 0 and v2
	// at index 1 (on an interface without IPv6), and RDMA users pass -g 1
	// / -x 1 out of habit; rnicd speaks v2 only, so every index of its
	// table (ib.GIDTableLen, the length the daemon checks sgid_index
	// against) holds the port's GID and 1 is the one to use.
	gids := make([]GID, ib.GIDTableLen)
	for i := range gids {
		gids[i] = r.GID
	}
	state := "PORT_ACTIVE"
	if r.State == abi.PortDown {
		state = "PORT_DOWN"
	}
	return PortAttr{
		State: state, MaxMTU: MTU4096, ActiveMTU: mtu, LinkLayer: "Ethernet",
		Addr: netip.AddrFrom16(r.Addr).Unmap(), GIDs: gids, GIDIndex: 1,
	}, nil
}

// QPs lists every QP of the device, the ones of other clients among them
// (rdma res show qp). Owner is "comm[pid]".
func (c *Context) QPs() ([]QPInfo, error) {
	var out []QPInfo
	from := uint32(0)
	for {
		var r abi.ListQPsReply
		if _, err := c.call(abi.KindListQPs, &abi.ListQPsReq{From: from}, nil, &r); err != nil {
			return nil, err
		}
		for _, row := range r.Rows {
			owner := row.Comm
			if row.PID != 0 {
				owner = row.Comm + "[" + strconv.Itoa(int(row.PID)) + "]"
			}
			out = append(out, QPInfo{
				QPN: row.QPN, Type: row.Type, State: row.State, SQPSN: row.SQPSN, RQPSN: row.RQPSN,
				DestQPN: row.DestQPN, Dest: netip.AddrFrom16(row.Dest).Unmap(), PathMTU: row.PathMTU,
				Owner: owner, SQDepth: int(row.SQDepth), RQDepth: int(row.RQDepth),
			})
		}
		if !r.More {
			return out, nil
		}
		from = r.Next
	}
}

// Counters returns the device's counters by rxe's names
// (/sys/class/infiniband/rxe0/ports/1/hw_counters), and the host
// interface's (hostif_*).
func (c *Context) Counters() (map[string]uint64, error) {
	var r abi.CountersReply
	if _, err := c.call(abi.KindCounters, &abi.Empty{}, nil, &r); err != nil {
		return nil, err
	}
	return r.Counters, nil
}
