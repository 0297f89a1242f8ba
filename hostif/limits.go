package hostif

import (
	"encoding/binary"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rnicd/rnicd/abi"
	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/rnic"
)

// What a client holds in the daemon, and the limits on it.
//
// Without limits one client could take the whole NIC: 65,530 QPs
// (one mapping each) exhausted vm.max_map_count and the next allocation
// anywhere in the daemon was fatal; 127 regions of 1 TiB on a sparse memfd
// filled the daemon's address space; 20,000 CQs (an eventfd each)
// exhausted its descriptors. Every creating request is therefore charged
// to its client, a process (connections of one pid share one account, so
// that a process cannot multiply its share by opening the device again),
// and to the daemon, before anything is allocated; a request that would
// go over either limit is refused with CodeLimit and a message naming the
// limit and the rnicd flag that raises it, and nothing else changes. A
// client's charges go back when its objects are destroyed or it hangs up.
//
// A process is no bound on a user, who can start as many as they like
// (five processes of one user took five clients' shares): every charge
// is therefore also charged to the client's user (its uid, from
// SO_PEERCRED at connect) against the per-user limits. Root and the
// daemon's own uid are not held to those: either may stop the daemon
// anyway.

// Resource is one thing a client holds that the daemon limits.
type Resource int

const (
	ResConns     Resource = iota // control connections (a descriptor each)
	ResPDs                       // protection domains (a table entry each)
	ResQPs                       // QPs (a ring mapping each)
	ResCQs                       // CQs (a ring mapping and a wake pipe each)
	ResSRQs                      // SRQs (a ring mapping each)
	ResMRs                       // memory regions (a mapping of the client's memfd each)
	ResMRBytes                   // bytes of address space the daemon maps for regions
	ResMaps                      // memory mappings (vm.max_map_count)
	ResRingBytes                 // bytes of the rings the daemon creates for QPs, SRQs and CQs (its own memory)
	ResFDs                       // descriptors: connections, CQ wake pipes, completion channels
	// ResMcast is multicast attachments (a QP to a group): the device
	// has 64 groups (rnic.MaxMcastGroups, a socket each), which a
	// client attached to all of them would keep from every other.
	ResMcast
	ResXRCDs // XRC domains (a device object each, as PDs)
	// ResMWs is memory windows (an entry of the device's key table
	// each, which the MRs share).
	ResMWs
	NumResources
)

// resources names each Resource in messages and counters, with the rnicd
// flags that set its daemon-wide and per-client limits.
var resources = [NumResources]struct{ name, counter, flag string }{
	ResConns:     {"connections", "conns", "max-conns"},
	ResPDs:       {"PDs", "pd", "max-pd"},
	ResQPs:       {"QPs", "qp", "max-qp"},
	ResCQs:       {"CQs", "cq", "max-cq"},
	ResSRQs:      {"SRQs", "srq", "max-srq"},
	ResMRs:       {"MRs", "mr", "max-mr"},
	ResMRBytes:   {"registered bytes", "mr_bytes", "max-mr-bytes"},
	ResMaps:      {"memory mappings", "maps", "max-maps"},
	ResRingBytes: {"ring bytes", "ring_bytes", "max-ring-bytes"},
	ResFDs:       {"descriptors", "fds", "max-fds"},
	ResMcast:     {"multicast attachments", "mcast", "max-mcast"},
	ResXRCDs:     {"XRC domains", "xrcd", "max-xrcd"},
	ResMWs:       {"memory windows", "mw", "max-mw"},
}

// Name is the resource's name in messages ("QPs").
func (r Resource) Name() string { return resources[r].name }

// Flag is the name of the rnicd flag of the daemon-wide limit
// ("max-qp"); the per-client limit's is "client-" and this.
func (r Resource) Flag() string { return resources[r].flag }

// Quota is an amount of each Resource: what a client or the daemon holds,
// or may hold. A zero limit means no limit.
type Quota [NumResources]uint64

// Limits are the most each client (a process), each user (a uid other
// than root and the daemon's) and all clients together may hold. The
// zero value limits nothing (an in-process NIC, tests).
type Limits struct {
	Client Quota
	User   Quota
	Daemon Quota
}

// What each object costs. A QP's or SRQ's rings, and a CQ's, are one
// memfd the daemon creates and maps once, of the bytes its depth needs
// (up to about 35 MB for a QP of 16,384 WRs of 32 SGEs, 32 MB for a CQ
// of 2^20 CQEs: memory of the daemon's, which a client fills by touching
// it); a CQ keeps its wake pipe's write end, a completion channel
// its own. An MR costs the bytes it maps. The descriptors a request
// carries are closed when it is answered and cost nothing lasting.
var (
	costConn    = Quota{ResConns: 1, ResFDs: 1}
	costPD      = Quota{ResPDs: 1}
	costChannel = Quota{ResFDs: 1}
	mcastCost   = Quota{ResMcast: 1}
	costMW      = Quota{ResMWs: 1}
)

func mrCost(mapped uint64) Quota { return Quota{ResMRs: 1, ResMaps: 1, ResMRBytes: mapped} }
func qpCost(ring uint64) Quota   { return Quota{ResQPs: 1, ResMaps: 1, ResRingBytes: ring} }
func cqCost(ring uint64) Quota   { return Quota{ResCQs: 1, ResMaps: 1, ResFDs: 1, ResRingBytes: ring} }
func srqCost(ring uint64) Quota  { return Quota{ResSRQs: 1, ResMaps: 1, ResRingBytes: ring} }

// The costs of creating requests, before the object exists: the rings of
// the depths asked for (a QP with an SRQ is charged a receive ring it
// will not get; the charge is trued up to the object's own cost once it
// exists: see conn.dispatch). Sizes past the device's limits are refused
// by the handler; here they are clamped, only so that nothing overflows.
func createQPCost(b abi.Body) Quota {
	c := b.(*abi.CreateQPReq).Caps
	send := abi.RingBytes(clamp(c.MaxSendWR, ib.MaxQPWR), abi.SendSlotBytes(int(clamp(c.MaxSendSGE, ib.MaxSGE)), int(clamp(c.MaxInlineData, ib.MaxInlineData))))
	recv := abi.RingBytes(clamp(c.MaxRecvWR, ib.MaxQPWR), abi.RecvSlotBytes(int(clamp(c.MaxRecvSGE, ib.MaxSGE))))
	return qpCost(send + recv)
}

func createCQCost(b abi.Body) Quota {
	return cqCost(abi.RingBytes(min(b.(*abi.CreateCQReq).CQE, rnic.MaxCQE), abi.CQESlotBytes))
}

func createSRQCost(b abi.Body) Quota {
	r := b.(*abi.CreateSRQReq)
	return srqCost(abi.RingBytes(min(r.MaxWR, ib.MaxQPWR), abi.RecvSlotBytes(int(min(r.MaxSGE, ib.MaxSGE)))))
}

func clamp(v, hi int) uint32 { return uint32(max(0, min(v, hi))) }

// accounts is what every client and the daemon hold.
type accounts struct {
	lim Limits

	mu      sync.Mutex
	total   Quota
	clients map[int32]*Quota  // by pid
	users   map[uint32]*Quota // by uid, of the users held to the per-user limits
	owners  map[int32]owner   // the user of each pid in clients
}

// owner is the user a client's charges also go to; exempt: root or the
// daemon's own uid, not held to the per-user limits.
type owner struct {
	uid    uint32
	exempt bool
}

// limitErr is a refusal for going over a limit.
func limitErr(what string, r Resource, scope string, held, want, limit uint64) error {
	flag := "-" + r.Flag()
	switch scope {
	case "client":
		flag = "-client-" + r.Flag()
	case "user":
		flag = "-user-" + r.Flag()
	}
	return errf(abi.CodeLimit, "%s: this %s holds %d %s and asks for %d more, over its limit of %d (rnicd %s raises it)",
		what, scope, held, r.Name(), want, limit, flag)
}

// connect charges a connection of client pid, of user o, as charge
// does: the first charge of a pid says whose it is.
func (a *accounts) connect(pid int32, o owner, cost Quota) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.clients[pid]; !ok {
		if a.owners == nil {
			a.owners = make(map[int32]owner)
		}
		a.owners[pid] = o
	}
	err := a.chargeLocked("connect", pid, cost)
	if _, ok := a.clients[pid]; !ok {
		delete(a.owners, pid)
	}
	return err
}

// charge adds cost to client pid's account, its user's and the daemon's,
// or, if any would go over its limit, changes nothing and says which
// limit.
func (a *accounts) charge(what string, pid int32, cost Quota) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.chargeLocked(what, pid, cost)
}

func (a *accounts) chargeLocked(what string, pid int32, cost Quota) error {
	cl := a.clients[pid]
	if cl == nil {
		cl = new(Quota)
	}
	us := a.user(pid)
	for r := range NumResources {
		if cost[r] == 0 {
			continue
		}
		if l := a.lim.Client[r]; l != 0 && (cost[r] > l || cl[r] > l-cost[r]) {
			return limitErr(what, r, "client", cl[r], cost[r], l)
		}
		if l := a.lim.User[r]; us != nil && l != 0 && (cost[r] > l || us[r] > l-cost[r]) {
			return limitErr(what, r, "user", us[r], cost[r], l)
		}
		if l := a.lim.Daemon[r]; l != 0 && (cost[r] > l || a.total[r] > l-cost[r]) {
			return limitErr(what, r, "daemon", a.total[r], cost[r], l)
		}
	}
	for r := range NumResources {
		cl[r] += cost[r]
		a.total[r] += cost[r]
	}
	if a.clients == nil {
		a.clients = make(map[int32]*Quota)
	}
	a.clients[pid] = cl
	if us != nil {
		for r := range NumResources {
			us[r] += cost[r]
		}
		if a.users == nil {
			a.users = make(map[uint32]*Quota)
		}
		a.users[a.owners[pid].uid] = us
	}
	return nil
}

// user is the account of client pid's user, nil if the user is exempt
// (or unknown: an in-process client); a new one is empty.
func (a *accounts) user(pid int32) *Quota {
	o, ok := a.owners[pid]
	if !ok || o.exempt {
		return nil
	}
	if us := a.users[o.uid]; us != nil {
		return us
	}
	return new(Quota)
}

// refund takes back what charge added.
func (a *accounts) refund(pid int32, cost Quota) {
	a.mu.Lock()
	defer a.mu.Unlock()
	cl := a.clients[pid]
	if cl == nil {
		return
	}
	us := a.user(pid)
	empty, usEmpty := true, true
	for r := range NumResources {
		cl[r] -= min(cost[r], cl[r])
		a.total[r] -= min(cost[r], a.total[r])
		empty = empty && cl[r] == 0
		if us != nil {
			us[r] -= min(cost[r], us[r])
			usEmpty = usEmpty && us[r] == 0
		}
	}
	if us != nil && usEmpty {
		delete(a.users, a.owners[pid].uid)
	}
	if empty {
		delete(a.clients, pid)
		delete(a.owners, pid)
	}
}

// trueUp changes a client's charge from what a request was charged to
// what its object costs, over the limits or not: the two differ by the
// rounding of a ring's depth at most.
func (a *accounts) trueUp(pid int32, charged, cost Quota) {
	a.mu.Lock()
	defer a.mu.Unlock()
	cl := a.clients[pid]
	if cl == nil {
		return
	}
	us := a.user(pid)
	for r := range NumResources {
		cl[r] += cost[r] - charged[r]
		a.total[r] += cost[r] - charged[r]
		if us != nil {
			us[r] += cost[r] - charged[r]
		}
	}
}

// users counts the users held to the per-user limits that hold
// something.
func (a *accounts) heldUsers() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.users)
}

// held returns what the daemon holds in all.
func (a *accounts) held() Quota {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.total
}

// String says a quota as "QPs 10, CQs 20, ..." (nonzero ones only).
func (q Quota) String() string {
	s := ""
	for r := range NumResources {
		if q[r] != 0 {
			if s != "" {
				s += ", "
			}
			s += fmt.Sprintf("%s %d", resources[r].name, q[r])
		}
	}
	return s
}

// refuseConn answers the first request of a connection over a limit with
// the limit's error, then hangs up: the client's verbs.Open succeeded (it
// only dials), so its first verb is where it learns why. The wait for
// that request is short, so that a flood of refused connections holds
// few descriptors.
func (c *conn) refuseConn(err error) {
	defer c.uc.Close()
	// Said at most once a second: a flood of refused connections must
	// not flood the log.
	if now := time.Now().UnixNano(); now-c.s.connWarned.Load() >= int64(time.Second) {
		c.s.connWarned.Store(now)
		c.s.log.Warn("connection over a limit", "pid", c.pid, "uid", c.uid, "comm", c.comm, "err", err)
	}
	c.uc.SetReadDeadline(time.Now().Add(refuseWait))
	buf := make([]byte, abi.HeaderLen)
	oob := make([]byte, unix.CmsgSpace(4*8))
	n, oobn, _, _, rerr := c.uc.ReadMsgUnix(buf, oob)
	for _, fd := range parseFDs(oob[:oobn]) {
		unix.Close(fd)
	}
	if rerr != nil || n < 8 {
		return
	}
	k, id := abi.Kind(binary.LittleEndian.Uint16(buf[0:])), binary.LittleEndian.Uint32(buf[4:])
	c.uc.WriteMsgUnix(abi.EncodeError(k, id, abi.CodeLimit, err.Error()), nil, nil)
}

// refuseWait is how long a refused connection waits for its first
// request: a client sends it right after connecting.
const refuseWait = 2 * time.Second
