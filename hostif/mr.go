package hostif

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/rnicd/rnicd/abi"
	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/rnic"
	"github.com/rnicd/rnicd/rnic/dma"
)

type mrObj struct {
	noUsers
	pd  *pdObj
	mr  *rnic.MR
	mem []byte // the daemon's mapping of the client's memfd
	shm bool   // mem is an attachment of a System V segment (shm.go)
}

func (*mrObj) kind() objKind { return kindMR }
func (o *mrObj) cost() Quota { return mrCost(uint64(len(o.mem))) }

func (o *mrObj) release(c *conn) error {
	if err := c.s.dev.DeregMR(o.mr); errors.Is(err, dma.ErrBusy) {
		return errf(abi.CodeInvalid, "dereg_mr: %v", err) // EINVAL, as rxe_dereg_mr
	} else if err != nil {
		return errf(abi.CodeFailed, "dereg_mr: %v", err)
	}
	// A pipeline that looked the region up before it went may still be
	// copying: wait for its batch before the memory goes.
	c.s.dev.Fence()
	if o.shm {
		unix.SysvShmDetach(o.mem)
	} else {
		unix.Munmap(o.mem)
	}
	o.pd.drop()
	return nil
}

// maxMR is the largest region (ibv_device_attr max_mr_size).
const maxMR = 1 << 40

// regMRCost is a region's cost: the bytes the daemon maps for it, from
// the page its offset falls in (see regMR).
func regMRCost(b abi.Body) Quota {
	r := b.(*abi.RegMRReq)
	page := uint64(os.Getpagesize())
	return mrCost(r.Offset%page + min(r.Length, maxMR))
}

func (c *conn) regMR(_ object, b abi.Body, fds []int) (abi.Body, []int, error) {
	r := b.(*abi.RegMRReq)
	pd, err := lookup[*pdObj](c, r.PD, kindPD)
	if err != nil {
		return nil, nil, err
	}
	fd := fds[0]
	if err := sealShrink(fd); err != nil {
		return nil, nil, c.refuseMemory(errf(abi.CodeInvalid, "reg_mr: %v", err))
	}
	return c.mapMR(pd, fd, r)
}

// mapMR maps r's bytes of fd, a file that cannot shrink under the
// mapping, and registers them in pd.
func (c *conn) mapMR(pd *pdObj, fd int, r *abi.RegMRReq) (abi.Body, []int, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, nil, errf(abi.CodeInvalid, "reg_mr: fstat: %v", err)
	}
	if r.Length == 0 || r.Length > maxMR || r.Offset > uint64(st.Size) || r.Length > uint64(st.Size)-r.Offset {
		return nil, nil, errf(abi.CodeInvalid, "reg_mr: %d bytes at offset %d of a %d-byte memfd", r.Length, r.Offset, st.Size)
	}
	if ib.Access(r.Access)&^(ib.AccessLocalWrite|ib.AccessRemoteWrite|ib.AccessRemoteRead|
		ib.AccessRemoteAtomic|ib.AccessMWBind|ib.AccessZeroBased|ib.AccessOnDemand) != 0 {
		return nil, nil, errf(abi.CodeInvalid, "reg_mr: access flags %#x", r.Access)
	}
	page, err := mapUnit(fd)
	if err != nil {
		return nil, nil, errf(abi.CodeInvalid, "reg_mr: %v", err)
	}
	start := r.Offset &^ (page - 1)
	// The mapping's length is what regMRCost charged, but on hugetlbfs,
	// whose mappings are of whole huge pages: the object's cost (its
	// mapping's length) replaces the charge.
	n := r.Offset - start + r.Length
	if page != uint64(os.Getpagesize()) {
		if n = (n + page - 1) &^ (page - 1); start+n > uint64(st.Size) {
			return nil, nil, errf(abi.CodeInvalid, "reg_mr: %d bytes at offset %d of a %d-byte hugetlbfs file of %d-byte pages", r.Length, r.Offset, st.Size, page)
		}
	}
	mem, err := unix.Mmap(fd, int64(start), int(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, nil, errf(abi.CodeFailed, "reg_mr: mmap %d bytes: %v", r.Length, err)
	}
	buf := mem[r.Offset-start : r.Offset-start+r.Length : r.Offset-start+r.Length]
	mr, err := c.s.dev.RegMR(pd.pd, buf, r.IOVA, ib.Access(r.Access))
	if err != nil {
		unix.Munmap(mem)
		return nil, nil, errf(abi.CodeInvalid, "reg_mr: %v", err)
	}
	pd.hold()
	h := c.add(&mrObj{pd: pd, mr: mr, mem: mem})
	return &abi.RegMRReply{H: h, LKey: mr.LKey, RKey: mr.RKey}, nil, nil
}

// refuseMemory counts and logs memory the daemon will not map because
// its client could make an access to it fault.
func (c *conn) refuseMemory(err error) error {
	c.s.unsealed.Add(1)
	c.s.log.Warn("memory refused", "pid", c.pid, "uid", c.uid, "comm", c.comm, "err", err)
	return err
}

// sealShrink makes sure the memfd fd cannot shrink under the NIC's
// mapping, where an access past its new end would fault the daemon
// (SIGBUS): a memfd already sealed with F_SEAL_SHRINK (the library's own)
// is taken as it is; one that may still take seals (MFD_ALLOW_SEALING:
// a program's memfd, hugetlb's too) is sealed here, for good, as the
// price of registering it in place: it can still grow. Any other file (a
// regular file, POSIX shm, a memfd made without MFD_ALLOW_SEALING) could
// be truncated by whoever holds it and is refused.
func sealShrink(fd int) error {
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil {
		return fmt.Errorf("descriptor is not a memfd with sealing (F_GET_SEALS: %v): a file could be truncated under the NIC", err)
	}
	if seals&unix.F_SEAL_SHRINK != 0 {
		return nil
	}
	if seals&unix.F_SEAL_SEAL != 0 {
		return fmt.Errorf("the file cannot be sealed against shrinking (seals %#x: a memfd made without MFD_ALLOW_SEALING, POSIX shm or another tmpfs file): it could be truncated under the NIC", seals)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK); err != nil {
		return fmt.Errorf("sealing the memfd against shrinking (F_ADD_SEALS F_SEAL_SHRINK): %v", err)
	}
	return nil
}

// mapUnit is the granule fd's mappings are made of: the page, or on
// hugetlbfs (a memfd made with MFD_HUGETLB) the huge page, which an
// offset and a length must be multiples of.
func mapUnit(fd int) (uint64, error) {
	var fs unix.Statfs_t
	if err := unix.Fstatfs(fd, &fs); err != nil {
		return 0, fmt.Errorf("fstatfs: %v", err)
	}
	if fs.Type != unix.HUGETLBFS_MAGIC {
		return uint64(os.Getpagesize()), nil
	}
	if fs.Bsize <= 0 || fs.Bsize&(fs.Bsize-1) != 0 || fs.Bsize > 1<<30 {
		return 0, fmt.Errorf("hugetlbfs page size %d", fs.Bsize)
	}
	return uint64(fs.Bsize), nil
}
