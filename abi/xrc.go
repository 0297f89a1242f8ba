package abi

import "github.com/rnicd/rnicd/ib"

// XRC's requests (IBTA annex A14): domains, XRC SRQs and XRC QPs. Their
// kinds are numbered apart from the others' so that the kinds of other
// features can grow without meeting them.
const (
	// KindOpenXRCD opens an XRC domain (ibv_open_xrcd): an Empty
	// request, a Handle reply. Domains are not shared between
	// processes: each open is a new domain.
	KindOpenXRCD Kind = 48
	// KindCloseXRCD closes one (ibv_close_xrcd): a Handle.
	KindCloseXRCD Kind = 49
	// KindCreateXRCSRQ creates an XRC SRQ: a CreateXRCSRQReq; the
	// RingReply carries the SRQ's number (ibv_get_srq_num) in QPN. It
	// is destroyed with KindDestroySRQ, and fed like any SRQ.
	KindCreateXRCSRQ Kind = 50
	// KindCreateXRCQP creates an XRC send or receive QP: a
	// CreateXRCQPReq, a RingReply (a receive QP's rings are empty).
	KindCreateXRCQP Kind = 51
	// KindOpenXRCDFile opens the XRC domain shared through the file
	// whose descriptor the message carries (ibv_open_xrcd with an fd):
	// an OpenXRCDFileReq, a Handle reply.
	KindOpenXRCDFile Kind = 52
)

// OpenXRCDFileReq says how to open a domain shared through a file: its
// open flags, of which O_CREAT and O_EXCL count (ibv_xrcd_init_attr's
// oflags).
type OpenXRCDFileReq struct{ OFlags uint32 }

func (m *OpenXRCDFileReq) encode(e *encoder) { e.u32(m.OFlags) }
func (m *OpenXRCDFileReq) decode(d *decoder) { m.OFlags = d.u32() }

func init() {
	kindNames[KindOpenXRCD] = "open_xrcd"
	kindNames[KindCloseXRCD] = "close_xrcd"
	kindNames[KindCreateXRCSRQ] = "create_xrc_srq"
	kindNames[KindCreateXRCQP] = "create_xrc_qp"
	kindNames[KindOpenXRCDFile] = "open_xrcd_file"
}

// CreateXRCSRQReq asks for an XRC SRQ in domain XRCD whose receives
// complete on CQ and use PD's memory (ibv_create_srq_ex, IBV_SRQT_XRC).
type CreateXRCSRQReq struct{ PD, XRCD, CQ, MaxWR, MaxSGE, Limit uint32 }

func (m *CreateXRCSRQReq) encode(e *encoder) {
	for _, v := range []uint32{m.PD, m.XRCD, m.CQ, m.MaxWR, m.MaxSGE, m.Limit} {
		e.u32(v)
	}
}

func (m *CreateXRCSRQReq) decode(d *decoder) {
	for _, p := range []*uint32{&m.PD, &m.XRCD, &m.CQ, &m.MaxWR, &m.MaxSGE, &m.Limit} {
		*p = d.u32()
	}
}

// CreateXRCQPReq asks for an XRC QP in RESET (ibv_create_qp_ex): Type
// ib.QPTypeXRCSend with PD, SendCQ and the send caps, or
// ib.QPTypeXRCRecv with XRCD and nothing else (handles 0).
type CreateXRCQPReq struct {
	Type             ib.QPType
	PD, SendCQ, XRCD uint32
	SigAll           bool
	Caps             ib.QPCap
}

func (m *CreateXRCQPReq) encode(e *encoder) {
	e.u8(uint8(m.Type))
	e.u32(m.PD)
	e.u32(m.SendCQ)
	e.u32(m.XRCD)
	e.u8(b2u(m.SigAll))
	encodeCaps(e, &m.Caps)
}

func (m *CreateXRCQPReq) decode(d *decoder) {
	m.Type = ib.QPType(d.u8())
	m.PD, m.SendCQ, m.XRCD = d.u32(), d.u32(), d.u32()
	m.SigAll = u2b(d, d.u8())
	decodeCaps(d, &m.Caps)
}
