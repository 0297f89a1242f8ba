package hostif

import (
	"github.com/rnicd/rnicd/abi"
	"github.com/rnicd/rnicd/rnic"
	"github.com/rnicd/rnicd/rnic/dma"
)

// mwObj is a memory window. It is bound by BIND_MW WQEs on the client's
// QPs, which the device checks against the window's PD (rnic/dma/mw.go):
// the handle only allocates and frees it.
type mwObj struct {
	noUsers
	pd *pdObj
	mw *rnic.MW
}

func (*mwObj) kind() objKind { return kindMW }
func (*mwObj) cost() Quota   { return costMW }

func (o *mwObj) release(c *conn) error {
	if err := c.s.dev.DeallocMW(o.mw); err != nil {
		return errf(abi.CodeFailed, "dealloc_mw: %v", err)
	}
	o.pd.drop()
	return nil
}

func (c *conn) allocMW(_ object, b abi.Body, _ []int) (abi.Body, []int, error) {
	r := b.(*abi.AllocMWReq)
	pd, err := lookup[*pdObj](c, r.PD, kindPD)
	if err != nil {
		return nil, nil, err
	}
	if r.Type != uint32(dma.MWType1) && r.Type != uint32(dma.MWType2) {
		return nil, nil, errf(abi.CodeInvalid, "alloc_mw: type %d: rnicd has types 1 and 2", r.Type)
	}
	mw, err := c.s.dev.AllocMW(pd.pd, dma.MWType(r.Type))
	if err != nil {
		return nil, nil, errf(abi.CodeFailed, "alloc_mw: %v", err)
	}
	pd.hold()
	h := c.add(&mwObj{pd: pd, mw: mw})
	return &abi.AllocMWReply{H: h, RKey: mw.RKey}, nil, nil
}
