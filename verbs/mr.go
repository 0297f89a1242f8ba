package verbs

import (
	"errors"
	"fmt"

	"github.com/rnicd/rnicd/abi"
	"github.com/rnicd/rnicd/ib"
)

// Access is a set of memory access flags (enum ibv_access_flags): what an
// MR lets the NIC do with its memory (PD.RegMR), and what remote
// operations a QP accepts (QPAttr.AccessFlags).
type Access = ib.Access

// Access flags (IBV_ACCESS_*). A region the peer may write or use atomics on
// must be locally writable too.
const (
	AccessLocalWrite   = ib.AccessLocalWrite   // IBV_ACCESS_LOCAL_WRITE: the NIC may write it for local work (receives, READ results)
	AccessRemoteWrite  = ib.AccessRemoteWrite  // IBV_ACCESS_REMOTE_WRITE: RDMA WRITE from the peer
	AccessRemoteRead   = ib.AccessRemoteRead   // IBV_ACCESS_REMOTE_READ: RDMA READ from the peer
	AccessRemoteAtomic = ib.AccessRemoteAtomic // IBV_ACCESS_REMOTE_ATOMIC: atomics from the peer
	AccessMWBind       = ib.AccessMWBind       // IBV_ACCESS_MW_BIND: memory windows may be bound to it (clib's ibv_alloc_mw)
	AccessZeroBased    = ib.AccessZeroBased    // IBV_ACCESS_ZERO_BASED: the MR answers to addresses from 0
	AccessOnDemand     = ib.AccessOnDemand     // IBV_ACCESS_ON_DEMAND: accepted; memory here is always resident
)

// MR is a registered memory region (ibv_mr).
type MR struct {
	pd   *PD
	h    uint32
	Buf  []byte // the registered memory
	Addr uint64 // the address SGEs and the peer use for Buf[0] (0 if zero-based)
	LKey uint32
	RKey uint32
}

// RegMR registers buf, which must lie in memory from Alloc (ibv_reg_mr).
// The NIC maps the same pages: no copies.
func (pd *PD) RegMR(buf []byte, access Access) (*MR, error) {
	if err := pd.ctx.check(); err != nil {
		return nil, err
	}
	if len(buf) == 0 {
		return nil, errors.New("verbs: register an empty buffer")
	}
	va := Addr(buf)
	if access&AccessZeroBased != 0 {
		va = 0
	}
	s, off, err := pd.ctx.mem.find(buf)
	if err != nil {
		return nil, err
	}
	var r abi.RegMRReply
	req := &abi.RegMRReq{PD: pd.h, Access: uint32(access), Offset: uint64(off), Length: uint64(len(buf)), IOVA: va}
	if _, err := pd.ctx.call(abi.KindRegMR, req, []int{s.fd}, &r); err != nil {
		return nil, fmt.Errorf("verbs: reg_mr: %w", err)
	}
	return &MR{pd: pd, h: r.H, Buf: buf, Addr: va, LKey: r.LKey, RKey: r.RKey}, nil
}

// PD is the protection domain the region was registered in (ibv_mr's pd).
func (mr *MR) PD() *PD { return mr.pd }

// Dereg deregisters the region (ibv_dereg_mr).
func (mr *MR) Dereg() error { return mr.pd.ctx.destroy(abi.KindDeregMR, mr.h) }

// SGE returns the SGE for buf[off:off+n].
func (mr *MR) SGE(off, n int) SGE {
	return SGE{Addr: mr.Addr + uint64(off), Length: uint32(n), LKey: mr.LKey}
}
