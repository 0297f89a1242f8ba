package hostif

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/rnicd/rnicd/abi"
	"github.com/rnicd/rnicd/ib"
)

// Memory a C program registers is moved onto a memfd it shares with the
// daemon (clib/src/mem.c), which cannot be done to memory that is
// already shared with other processes without breaking that sharing.
// System V shared memory (shmget/shmat: UCX's default allocator for
// the buffers it registers) is registered in place instead: the daemon
// attaches the same segment. A segment's size never changes while it
// exists, and it exists while the daemon has it attached (IPC_RMID only
// marks it), so no store, unmap or removal by the client can make the
// NIC's access fault; a region the client has detached keeps receiving
// what the NIC writes, as a kernel driver's pinned pages do.
//
// The client names the segment by its id; the daemon attaches only a
// segment the client itself has attached over the whole region, with
// the permissions the access flags need (read, and write for any write
// or atomic access), as its /proc/PID/maps shows before and after the
// attach: a client cannot reach a segment it could not attach itself,
// nor one whose id was reused in between.

// regMRShmCost is what a shm region is charged before the daemon knows
// the segment's size: its bytes; the object's cost (the whole segment
// the daemon attaches) replaces it.
func regMRShmCost(b abi.Body) Quota {
	return mrCost(min(b.(*abi.RegMRShmReq).Length, maxMR))
}

// shmVMA is a client mapping of a System V segment.
type shmVMA struct {
	lo, hi, off uint64 // addresses and offset in the segment
	read, write bool
}

// clientShmVMA finds the mapping of segment id in pid's address space
// that covers [addr, addr+n).
func clientShmVMA(pid int32, id uint32, addr, n uint64) (shmVMA, error) {
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return shmVMA{}, fmt.Errorf("reading the client's mappings: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(maps))
	sc.Buffer(nil, 1<<16)
	for sc.Scan() {
		m, ok := parseMapping(sc.Bytes())
		if !ok || !m.shared || !strings.HasPrefix(m.path, "/SYSV") || uint32(m.ino) != id || m.ino > 0xffffffff {
			continue
		}
		if addr < m.lo || addr >= m.hi || n > m.hi-addr {
			continue
		}
		return shmVMA{lo: m.lo, hi: m.hi, off: m.off, read: m.read, write: m.write}, nil
	}
	return shmVMA{}, fmt.Errorf("the client has no attachment of System V segment %d over [%#x, %#x+%d)", id, addr, addr, n)
}

// sameIPCNamespace says whether process pid shares the daemon's IPC
// namespace (its System V ids).
func sameIPCNamespace(pid int32) error {
	var mine, theirs unix.Stat_t
	if err := unix.Stat("/proc/self/ns/ipc", &mine); err != nil {
		return fmt.Errorf("the daemon's IPC namespace: %w", err)
	}
	if err := unix.Stat(fmt.Sprintf("/proc/%d/ns/ipc", pid), &theirs); err != nil {
		return fmt.Errorf("the client's IPC namespace: %w", err)
	}
	if mine.Dev != theirs.Dev || mine.Ino != theirs.Ino {
		return fmt.Errorf("the client is in another IPC namespace than the daemon's: register private memory instead")
	}
	return nil
}

func (c *conn) regMRShm(_ object, b abi.Body, _ []int) (abi.Body, []int, error) {
	r := b.(*abi.RegMRShmReq)
	pd, err := lookup[*pdObj](c, r.PD, kindPD)
	if err != nil {
		return nil, nil, err
	}
	access, writes, err := addrRegion(r.Access, r.Addr, r.Length)
	if err != nil {
		return nil, nil, err
	}
	if err := c.sameProcess(); err != nil {
		return nil, nil, c.refuseMemory(errf(abi.CodeInvalid, "reg_mr: %v", err))
	}
	v, err := clientShmVMA(c.pid, r.ShmID, r.Addr, r.Length)
	if err == nil && (!v.read || (writes && !v.write)) {
		err = fmt.Errorf("the client's attachment of System V segment %d is not readable and writable as access %#x needs", r.ShmID, r.Access)
	}
	if err != nil {
		return nil, nil, c.refuseMemory(errf(abi.CodeInvalid, "reg_mr: %v", err))
	}
	// An id names a segment in an IPC namespace: the daemon's must be
	// the client's, or the id would name another segment, or none.
	if err := sameIPCNamespace(c.pid); err != nil {
		return nil, nil, c.refuseMemory(errf(abi.CodeInvalid, "reg_mr: System V segment %d: %v", r.ShmID, err))
	}
	flag := 0
	if !writes {
		flag = unix.SHM_RDONLY
	}
	seg, err := unix.SysvShmAttach(int(r.ShmID), 0, flag)
	if err != nil {
		return nil, nil, c.refuseMemory(errf(abi.CodeInvalid, "reg_mr: attaching System V segment %d: %v", r.ShmID, err))
	}
	// Still the client's: the id named the segment the client has
	// attached all along (an attached segment cannot go, so its id is
	// not reused while the client's attachment stays).
	v2, err := clientShmVMA(c.pid, r.ShmID, r.Addr, r.Length)
	start := v.off + (r.Addr - v.lo)
	if err == nil && v2 != v {
		err = fmt.Errorf("the client's attachment of System V segment %d changed while it was being registered", r.ShmID)
	}
	if err == nil {
		err = c.sameProcess() // the maps read were the client's process's all along
	}
	if err == nil && (start > uint64(len(seg)) || r.Length > uint64(len(seg))-start) {
		err = fmt.Errorf("%d bytes at offset %d of System V segment %d of %d bytes", r.Length, start, r.ShmID, len(seg))
	}
	if err != nil {
		unix.SysvShmDetach(seg)
		return nil, nil, c.refuseMemory(errf(abi.CodeInvalid, "reg_mr: %v", err))
	}
	mr, err := c.s.dev.RegMR(pd.pd, seg[start:start+r.Length:start+r.Length], r.IOVA, access)
	if err != nil {
		unix.SysvShmDetach(seg)
		return nil, nil, errf(abi.CodeInvalid, "reg_mr: %v", err)
	}
	pd.hold()
	h := c.add(&mrObj{pd: pd, mr: mr, mem: seg, shm: true})
	return &abi.RegMRReply{H: h, LKey: mr.LKey, RKey: mr.RKey}, nil, nil
}

// addrRegion checks a region the client names by its address, for the
// daemon to reach in the client's own mappings: its access flags (and
// whether they need write access), and its bytes.
func addrRegion(flags uint32, addr, n uint64) (access ib.Access, writes bool, err error) {
	access = ib.Access(flags)
	if access&^(ib.AccessLocalWrite|ib.AccessRemoteWrite|ib.AccessRemoteRead|
		ib.AccessRemoteAtomic|ib.AccessMWBind|ib.AccessZeroBased|ib.AccessOnDemand) != 0 {
		return 0, false, errf(abi.CodeInvalid, "reg_mr: access flags %#x", flags)
	}
	if n == 0 || n > maxMR || addr+n < addr {
		return 0, false, errf(abi.CodeInvalid, "reg_mr: %d bytes at %#x", n, addr)
	}
	return access, access&(ib.AccessLocalWrite|ib.AccessRemoteWrite|ib.AccessRemoteAtomic) != 0, nil
}
