package verbs

import (
	"github.com/rnicd/rnicd/abi"
)

// PD is a protection domain (ibv_pd).
type PD struct {
	ctx *Context
	h   uint32
}

// AllocPD allocates a protection domain (ibv_alloc_pd).
func (c *Context) AllocPD() (*PD, error) {
	var r abi.Handle
	if _, err := c.call(abi.KindAllocPD, &abi.Empty{}, nil, &r); err != nil {
		return nil, err
	}
	return &PD{ctx: c, h: r.H}, nil
}

// Dealloc frees the PD (ibv_dealloc_pd).
func (pd *PD) Dealloc() error { return pd.ctx.destroy(abi.KindDeallocPD, pd.h) }
