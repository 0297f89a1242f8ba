package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/rnicd/rnicd/hostif"
	"github.com/rnicd/rnicd/rnic"
)

// The limits on what clients hold (hostif.Limits) and their defaults,
// sized from the machine's own limits at start, so that the daemon
// refuses a greedy client before the kernel refuses the daemon (unbounded,
// 65,530 QPs exhausted vm.max_map_count and crashed it; 20,000 CQs
// exhausted its descriptors; 127 x 1 TiB regions its address space).

// machine is what the defaults are sized from.
type machine struct {
	maxMapCount uint64 // vm.max_map_count
	nofile      uint64 // RLIMIT_NOFILE (soft, after raiseNofile)
	memBytes    uint64 // physical memory
}

// readMachine reads the machine's limits; one it cannot read takes the
// kernel's default (65,530 mappings, 1,024 descriptors, 1 GiB).
func readMachine() machine {
	m := machine{maxMapCount: 65530, nofile: 1024, memBytes: 1 << 30}
	if b, err := os.ReadFile("/proc/sys/vm/max_map_count"); err == nil {
		if v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil {
			m.maxMapCount = v
		}
	}
	var lim unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &lim) == nil {
		m.nofile = lim.Cur
	}
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) == nil {
		m.memBytes = uint64(si.Totalram) * uint64(si.Unit)
	}
	return m
}

// deviceMax is what ibv_query_device says of the objects of each kind
// (max_qp, max_cq, max_mr, max_pd, max_srq: verbs.Context.QueryDevice).
const deviceMax = 1 << 16

// clientShare is the share of each daemon-wide limit one client may
// hold: four greedy clients are needed to fill the daemon.
const clientShare = 4

// userShare is the share one user (other than root and the daemon's
// own) may hold: with two processes at their client limits a user has
// reached it, so two greedy users are needed to fill the daemon.
const userShare = 2

// defaultLimits sizes the limits from m:
//   - mappings: vm.max_map_count less an eighth (at least 4,096) kept for
//     the Go runtime and the daemon's own (65,530 gives 57,339); every
//     QP, CQ, SRQ and MR is one mapping;
//   - QPs, CQs, SRQs, MRs: the mappings, at most the device's 65,536;
//     PDs and memory windows (no mapping): 65,536;
//   - descriptors: RLIMIT_NOFILE less an eighth (at least 256) kept for
//     the port, listeners, files and descriptors in flight; every
//     connection, CQ and completion channel holds one;
//   - connections: a quarter of the descriptors;
//   - registered bytes: physical memory, as a NIC that pins what it
//     registers cannot register more (the daemon maps every region:
//     this bounds its address space);
//   - ring bytes: a quarter of physical memory: the rings are memory the
//     daemon creates (a QP's up to about 35 MB), which its clients fill;
//   - each client: a quarter of each; each user but root and the
//     daemon's own: half of each;
//   - none below 1, which would mean no limit.
func defaultLimits(m machine) hostif.Limits {
	maps := m.maxMapCount - min(m.maxMapCount, max(4096, m.maxMapCount/8))
	fds := m.nofile - min(m.nofile, max(256, m.nofile/8))
	objs := min(maps, deviceMax)
	var l hostif.Limits
	l.Daemon = hostif.Quota{
		hostif.ResConns: fds / 4, hostif.ResPDs: deviceMax, hostif.ResQPs: objs, hostif.ResCQs: objs,
		hostif.ResSRQs: objs, hostif.ResMRs: objs, hostif.ResMRBytes: m.memBytes, hostif.ResMaps: maps,
		hostif.ResFDs: fds, hostif.ResRingBytes: m.memBytes / 4,
		hostif.ResMcast: rnic.MaxMcastGroups * rnic.MaxMcastQPAttach,
		hostif.ResXRCDs: deviceMax, hostif.ResMWs: rnic.MaxMW,
	}
	for r, v := range l.Daemon {
		// 0 would mean no limit: a machine too small for the reserves
		// still gets a limit, of one.
		l.Daemon[r] = max(1, v)
		l.Client[r] = max(1, v/clientShare)
		l.User[r] = max(1, v/userShare)
	}
	// Multicast attachments: every one the device takes (64 groups of
	// 56 QPs), but a client's and a user's shares are of the groups,
	// the scarce part: 16 and 32 attachments hold at most as many.
	l.Client[hostif.ResMcast] = rnic.MaxMcastGroups / clientShare
	l.User[hostif.ResMcast] = rnic.MaxMcastGroups / userShare
	return l
}

// limitFlags adds -max-X and -client-max-X for every limit in l.
func limitFlags(fs *flag.FlagSet, l *hostif.Limits, m machine) {
	for r := range hostif.NumResources {
		bytes, n := r == hostif.ResMRBytes || r == hostif.ResRingBytes, "`N` "+r.Name()
		switch r {
		case hostif.ResMRBytes:
			n = "`BYTES` (suffix K, M or G) of memory regions"
		case hostif.ResRingBytes:
			n = "`BYTES` (suffix K, M or G) of QP, SRQ and CQ rings"
		}
		fs.Var(&quotaFlag{&l.Daemon[r], bytes}, r.Flag(),
			fmt.Sprintf("most %s all clients together hold (0: no limit; the default is sized from %s)", n, sizedFrom(r, m)))
		fs.Var(&quotaFlag{&l.Client[r], bytes}, "client-"+r.Flag(),
			fmt.Sprintf("most %s one client (a process) holds (0: no limit; default: 1/%d of -%s)", n, clientShare, r.Flag()))
		fs.Var(&quotaFlag{&l.User[r], bytes}, "user-"+r.Flag(),
			fmt.Sprintf("most %s the clients of one user (uid) hold together; root and rnicd's own uid are not held to it (0: no limit; default: 1/%d of -%s)", n, userShare, r.Flag()))
	}
}

// sizedFrom says what a default was derived from, for -h.
func sizedFrom(r hostif.Resource, m machine) string {
	switch r {
	case hostif.ResConns, hostif.ResFDs:
		return fmt.Sprintf("RLIMIT_NOFILE %d", m.nofile)
	case hostif.ResMRBytes, hostif.ResRingBytes:
		return fmt.Sprintf("physical memory %v", byteSize(m.memBytes))
	case hostif.ResPDs, hostif.ResXRCDs:
		return fmt.Sprintf("the device's max_pd %d", deviceMax)
	case hostif.ResMWs:
		return fmt.Sprintf("the device's max_mw %d", rnic.MaxMW)
	case hostif.ResMcast:
		return fmt.Sprintf("the device's max_total_mcast_qp_attach %d; a client's and a user's shares are of its max_mcast_grp %d",
			rnic.MaxMcastGroups*rnic.MaxMcastQPAttach, rnic.MaxMcastGroups)
	}
	return fmt.Sprintf("vm.max_map_count %d", m.maxMapCount)
}

// quotaFlag is one limit: a count, or bytes with a K, M or G suffix.
type quotaFlag struct {
	p     *uint64
	bytes bool
}

func (q *quotaFlag) Set(s string) error {
	if q.bytes {
		var b byteSize
		if err := b.Set(s); err != nil {
			return err
		}
		*q.p = uint64(b)
		return nil
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return fmt.Errorf("%q: want a count, 0 for no limit", s)
	}
	*q.p = v
	return nil
}

func (q *quotaFlag) String() string {
	if q == nil || q.p == nil {
		return "0"
	}
	if q.bytes {
		return byteSize(*q.p).String()
	}
	return strconv.FormatUint(*q.p, 10)
}
