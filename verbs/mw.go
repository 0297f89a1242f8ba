package verbs

import (
	"fmt"

	"github.com/rnicd/rnicd/abi"
	"github.com/rnicd/rnicd/ib"
)

// Memory windows (ibv_alloc_mw, ibv_bind_mw, IBV_WR_BIND_MW), as rxe has
// them: a window gives the peer an rkey of its own for part of an MR
// (one registered with AccessMWBind), with rights of its own, and can be
// taken back without deregistering the MR. Type 1 windows are bound with
// QP.BindMW and rebound at will; type 2 windows are bound by a WRBindMW
// work request on one QP, answer through that QP only, and are taken back
// by WRLocalInv or the peer's WRSendWithInv naming their rkey.

// MWType is a memory window's type (enum ibv_mw_type).
type MWType uint8

// Memory window types.
const (
	MWType1 MWType = 1 // IBV_MW_TYPE_1
	MWType2 MWType = 2 // IBV_MW_TYPE_2
)

// Memory window operations and completions.
const (
	WRLocalInv  = ib.WRLocalInv  // IBV_WR_LOCAL_INV: invalidate InvRKey (a type 2 window's, or an MR's) here
	WRBindMW    = ib.WRBindMW    // IBV_WR_BIND_MW: bind the window SendWR.Bind names
	WCBindMW    = ib.WCBindMW    // IBV_WC_BIND_MW
	WCLocalInv  = ib.WCLocalInv  // IBV_WC_LOCAL_INV
	WCMWBindErr = ib.WCMWBindErr // IBV_WC_MW_BIND_ERR: the window, the MR or the QP did not allow the bind
)

// MWBind is what a bind binds (ibv_send_wr's bind_mw), SendWR.Bind.
type MWBind = ib.MWBind

// MW is a memory window (ibv_mw). RKey is its current rkey: BindMW sets
// it for a type 1 window; after a type 2 bind the application sets it to
// the rkey the bind gave, as a C program does.
type MW struct {
	pd   *PD
	h    uint32
	Type MWType
	RKey uint32
}

// AllocMW allocates an unbound memory window (ibv_alloc_mw).
func (pd *PD) AllocMW(typ MWType) (*MW, error) {
	if err := pd.ctx.check(); err != nil {
		return nil, err
	}
	var r abi.AllocMWReply
	if _, err := pd.ctx.call(abi.KindAllocMW, &abi.AllocMWReq{PD: pd.h, Type: uint32(typ)}, nil, &r); err != nil {
		return nil, fmt.Errorf("verbs: alloc_mw: %w", err)
	}
	return &MW{pd: pd, h: r.H, Type: typ, RKey: r.RKey}, nil
}

// Dealloc frees the window, bound or not (ibv_dealloc_mw).
func (mw *MW) Dealloc() error { return mw.pd.ctx.destroy(abi.KindDeallocMW, mw.h) }

// IncRKey is rkey with its low 8 bits, the key, one up (ibv_inc_rkey):
// the rkey to bind a window with next.
func IncRKey(rkey uint32) uint32 { return rkey&^0xff | (rkey+1)&0xff }

// BindMW binds a type 1 window to length bytes at addr of mr with access
// (AccessRemote*), as ibv_bind_mw does: it posts a signaled-if-flags-say
// BIND_MW with the window's next rkey, which mw.RKey holds once posted;
// the bind's completion (WCBindMW, or WCMWBindErr) comes on the send CQ.
// A length of 0 and a nil mr unbind the window.
func (qp *QP) BindMW(mw *MW, wrid uint64, flags SendFlags, mr *MR, addr, length uint64, access Access) error {
	if mw.Type != MWType1 {
		return fmt.Errorf("verbs: BindMW binds type 1 windows; a type 2 window is bound by a WRBindMW work request")
	}
	b := &MWBind{MWRKey: mw.RKey, RKey: IncRKey(mw.RKey), Addr: addr, Length: length, Access: access}
	if mr != nil {
		b.MRLKey = mr.LKey
	}
	if err := qp.PostSend([]SendWR{{WRID: wrid, Opcode: WRBindMW, Flags: flags, Bind: b}}); err != nil {
		return err
	}
	mw.RKey = b.RKey
	return nil
}
