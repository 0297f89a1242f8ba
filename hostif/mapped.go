package hostif

import (
	"bufio"
	"bytes"
	"fmt"
	"math/bits"
	"os"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/rnicd/rnicd/abi"
)

// Shared memory that the client has no descriptor of (MAP_SHARED
// anonymous memory, hugetlb's too, or a memfd it closed once mapped) is
// reached by the daemon itself, through /proc/PID/map_files: a link to
// the file of each of the client's mappings, which only a process with
// CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE (and ptrace access to the
// client) may open. The daemon maps the file only if it cannot shrink
// under the NIC: a memfd sealed (or sealable) against shrinking, as
// regMR's; or the object behind shared anonymous memory, which has no
// name and no seals, and which nothing can shrink without such a
// descriptor, that is without the privilege the daemon used to open it:
// a process that has it can stop the daemon by other means. The mapping
// is checked in /proc/PID/maps before and after the open, as a System V
// attachment is (shm.go): the client must map the file itself over the
// whole region, with the rights the access flags need.

// regMRMappedCost is what a mapped region is charged before the daemon
// maps it: its bytes; the object's cost (its mapping) replaces it.
func regMRMappedCost(b abi.Body) Quota {
	return mrCost(min(b.(*abi.RegMRMappedReq).Length, maxMR))
}

func (c *conn) regMRMapped(_ object, b abi.Body, _ []int) (abi.Body, []int, error) {
	r := b.(*abi.RegMRMappedReq)
	pd, err := lookup[*pdObj](c, r.PD, kindPD)
	if err != nil {
		return nil, nil, err
	}
	_, writes, err := addrRegion(r.Access, r.Addr, r.Length)
	if err != nil {
		return nil, nil, err
	}
	if err := c.sameProcess(); err != nil {
		return nil, nil, c.refuseMemory(errf(abi.CodeInvalid, "reg_mr: %v", err))
	}
	v, err := clientVMA(c.pid, r.Addr, r.Length)
	if err == nil && !v.shared {
		err = fmt.Errorf("[%#x, %#x+%d) is private memory of the client, not a shared mapping", r.Addr, r.Addr, r.Length)
	}
	if err == nil && (!v.read || (writes && !v.write)) {
		err = fmt.Errorf("the client's mapping over [%#x, %#x+%d) is not readable and writable as access %#x needs", r.Addr, r.Addr, r.Length, r.Access)
	}
	if err != nil {
		return nil, nil, c.refuseMemory(errf(abi.CodeInvalid, "reg_mr: %v", err))
	}
	fd, err := unix.Open(fmt.Sprintf("/proc/%d/map_files/%x-%x", c.pid, v.lo, v.hi), unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, c.refuseMemory(errf(abi.CodeInvalid,
			"reg_mr: opening the client's shared mapping of %s through /proc/%d/map_files (rnicd needs CAP_CHECKPOINT_RESTORE or CAP_SYS_ADMIN for it; a memfd can be registered by a descriptor the client keeps open): %v",
			v.path, c.pid, err))
	}
	defer unix.Close(fd)
	err = unshrinkable(fd, v)
	if err == nil {
		// Still the client's mapping of the same file: the link was not
		// opened to another mapping made at the same place in between.
		if v2, err2 := clientVMA(c.pid, r.Addr, r.Length); err2 != nil || v2 != v {
			err = fmt.Errorf("the client's mapping over [%#x, %#x+%d) changed while it was being registered", r.Addr, r.Addr, r.Length)
		} else {
			// And the maps read were the client's process's all along.
			err = c.sameProcess()
		}
	}
	if err != nil {
		return nil, nil, c.refuseMemory(errf(abi.CodeInvalid, "reg_mr: %v", err))
	}
	return c.mapMR(pd, fd, &abi.RegMRReq{PD: r.PD, Access: r.Access, Offset: v.off + (r.Addr - v.lo), Length: r.Length, IOVA: r.IOVA})
}

// unshrinkable says why fd, opened from the client's mapping v, could
// shrink under the NIC, or nil: it must be the file v maps, and either
// shared anonymous memory or a memfd sealed against shrinking.
func unshrinkable(fd int, v clientMapping) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("fstat: %v", err)
	}
	if st.Ino != v.ino || unix.Major(st.Dev) != v.major || unix.Minor(st.Dev) != v.minor {
		return fmt.Errorf("the client's mapping over [%#x, %#x) changed while it was being registered", v.lo, v.hi)
	}
	if (v.path == "/dev/zero (deleted)" || v.path == "/anon_hugepage (deleted)") && st.Nlink == 0 {
		// The name alone proves nothing: a client with a mount
		// namespace of its own (an unprivileged user namespace) can
		// mount a tmpfs at /dev, map a file "zero" of it, unlink it,
		// keep a descriptor, and truncate the file under the NIC. The
		// kernel's own shared anonymous memory lives on its internal
		// mount, which no one can mount and on which memfds are made
		// too: its device is the daemon's memfd's.
		if internal, err := internalMount(fd); err != nil {
			return err
		} else if st.Dev == internal {
			return nil
		}
	}
	if !v.write {
		// The daemon's descriptor may write where the client's may not:
		// it adds no seal the client could not have added itself.
		if seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0); err != nil || seals&unix.F_SEAL_SHRINK == 0 {
			return fmt.Errorf("the client maps %s read-only, and it is not sealed against shrinking: it could be truncated under the NIC", v.path)
		}
		return nil
	}
	return sealShrink(fd)
}

// internalMount is the device of the kernel's internal mount that
// shared anonymous memory of fd's kind lives on: tmpfs's (shm_mnt, where
// memfd_create makes its files), or hugetlbfs's for fd's huge page size
// (where MFD_HUGETLB's are made). A memfd of the daemon's own says it.
func internalMount(fd int) (uint64, error) {
	var fs unix.Statfs_t
	if err := unix.Fstatfs(fd, &fs); err != nil {
		return 0, fmt.Errorf("fstatfs: %v", err)
	}
	flags := unix.MFD_CLOEXEC
	switch {
	case fs.Type == unix.TMPFS_MAGIC:
	case fs.Type == unix.HUGETLBFS_MAGIC && fs.Bsize > 0 && fs.Bsize&(fs.Bsize-1) == 0:
		flags |= unix.MFD_HUGETLB | bits.TrailingZeros64(uint64(fs.Bsize))<<unix.MFD_HUGE_SHIFT
	default:
		return 0, fmt.Errorf("the client's shared anonymous mapping is on a file system of type %#x, not the kernel's", fs.Type)
	}
	probe, err := unix.MemfdCreate("rnicd-probe", flags)
	if err != nil {
		return 0, fmt.Errorf("memfd_create, to learn the device of the kernel's shared anonymous memory: %v", err)
	}
	defer unix.Close(probe)
	var st unix.Stat_t
	if err := unix.Fstat(probe, &st); err != nil {
		return 0, fmt.Errorf("fstat: %v", err)
	}
	return st.Dev, nil
}

// sameProcess says why c.pid may no longer be the client's process, or
// nil. The connection can outlive the process that made it (it forked,
// or passed the socket on, and exited), and its pid then comes back for
// another process, another user's: the daemon read that process's
// /proc/PID/maps and opened its map_files as the client's, and
// registered the other process's memory in the client's PD. A process
// is its pid and its start time, recorded when the client connected; a
// pid comes back only after every pid was used since, never within the
// 10 ms tick of start time.
func (c *conn) sameProcess() error {
	if c.start == 0 {
		return fmt.Errorf("the client's process %d could not be identified when it connected", c.pid)
	}
	if now, err := procStart(c.pid); err != nil || now != c.start {
		return fmt.Errorf("the process %d that opened the connection is gone (the connection outlived it)", c.pid)
	}
	return nil
}

// procStart is when process pid started, in clock ticks since boot
// (/proc/PID/stat's starttime, its 22nd field; the 2nd, the command,
// is in parentheses and may hold spaces and parentheses itself).
func procStart(pid int32) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command", pid)
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 20 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields after the command", pid, len(f))
	}
	return strconv.ParseUint(string(f[19]), 10, 64)
}

// clientMapping is one line of a client's /proc/PID/maps.
type clientMapping struct {
	lo, hi, off  uint64 // addresses, and the file offset at lo
	read, write  bool
	shared       bool
	major, minor uint32 // the file's device
	ino          uint64
	path         string
}

// parseMapping reads one line of /proc/PID/maps:
//
//	7f639102f000-7f6391030000 rw-s 00000000 00:01 393216 /SYSV00000000 (deleted)
func parseMapping(line []byte) (clientMapping, bool) {
	var m clientMapping
	var perms string
	f := bytes.Fields(line)
	if len(f) < 5 {
		return m, false
	}
	r := bytes.SplitN(f[0], []byte("-"), 2)
	d := bytes.SplitN(f[3], []byte(":"), 2)
	if len(r) != 2 || len(d) != 2 || len(f[1]) < 4 {
		return m, false
	}
	var err [6]error
	m.lo, err[0] = strconv.ParseUint(string(r[0]), 16, 64)
	m.hi, err[1] = strconv.ParseUint(string(r[1]), 16, 64)
	m.off, err[2] = strconv.ParseUint(string(f[2]), 16, 64)
	maj, e3 := strconv.ParseUint(string(d[0]), 16, 32)
	min, e4 := strconv.ParseUint(string(d[1]), 16, 32)
	err[3], err[4] = e3, e4
	m.ino, err[5] = strconv.ParseUint(string(f[4]), 10, 64)
	for _, e := range err {
		if e != nil {
			return m, false
		}
	}
	perms = string(f[1])
	m.major, m.minor = uint32(maj), uint32(min)
	m.read, m.write, m.shared = perms[0] == 'r', perms[1] == 'w', perms[3] == 's'
	if i := bytes.Index(line, []byte(" /")); len(f) > 5 && i >= 0 {
		m.path = string(line[i+1:])
	}
	return m, true
}

// clientVMA finds the mapping of pid's address space that covers
// [addr, addr+n) whole.
func clientVMA(pid int32, addr, n uint64) (clientMapping, error) {
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return clientMapping{}, fmt.Errorf("reading the client's mappings: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(maps))
	sc.Buffer(nil, 1<<16)
	for sc.Scan() {
		m, ok := parseMapping(sc.Bytes())
		if ok && addr >= m.lo && addr < m.hi && n <= m.hi-addr {
			return m, nil
		}
	}
	return clientMapping{}, fmt.Errorf("no one mapping of the client covers [%#x, %#x+%d)", addr, addr, n)
}
