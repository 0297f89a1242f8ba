package hostif

import (
	"os"

	"golang.org/x/sys/unix"

	"github.com/rnicd/rnicd/abi"
	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/rnic"
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
	if err := c.s.dev.DeregMR(o.mr); err != nil {
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
	// Only a memfd sealed against shrinking may be mapped: any other
	// file could be truncated under the NIC and fault its DMA.
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil {
		return nil, nil, c.refuseMemory(errf(abi.CodeInvalid, "reg_mr: descriptor is not a memfd with sealing (F_GET_SEALS: %v)", err))
	}
	if seals&unix.F_SEAL_SHRINK == 0 {
		return nil, nil, c.refuseMemory(errf(abi.CodeInvalid, "reg_mr: memfd is not sealed with F_SEAL_SHRINK (seals %#x): it could be truncated under the NIC", seals))
	}
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
	page := uint64(os.Getpagesize())
	start := r.Offset &^ (page - 1)
	// The mapping's length is what regMRCost charged.
	mem, err := unix.Mmap(fd, int64(start), int(r.Offset-start+r.Length), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, nil, errf(abi.CodeFailed, "reg_mr: mmap %d bytes: %v", r.Length, err)
	}
	buf := mem[r.Offset-start:]
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
