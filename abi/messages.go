package abi

import (
	"github.com/rnicd/rnicd/ib"
)

// The bodies of requests and replies, in the order of their kinds. Every
// handle is a uint32 the daemon chose, valid on the connection that
// created it only; 0 is never a handle.

// Empty is the body of requests and replies with no fields.
type Empty struct{}

func (*Empty) encode(*encoder) {}
func (*Empty) decode(*decoder) {}

// Handle is the body of requests naming one object (dealloc, dereg,
// destroy, query) and of replies returning one.
type Handle struct{ H uint32 }

// Target is the handle of the object a request acts on. The daemon
// checks that it names an object of the client's, of a kind the request
// acts on, before any handler runs; every body of such a request has it
// (Handle, ModifyQPReq, DoorbellReq and the CM requests').
func (m *Handle) Target() uint32 { return m.H }

func (m *Handle) encode(e *encoder) { e.u32(m.H) }
func (m *Handle) decode(d *decoder) { m.H = d.u32() }

// PortReply answers KindQueryPort.
type PortReply struct {
	Name      string
	Addr      [16]byte // IPv4-mapped for IPv4
	GID       [16]byte
	ActiveMTU uint32 // bytes
	// State is the port's ibv_port_state: PortActive, or PortDown
	// while the link under it is down (rxe's port follows its netdev).
	State uint8
}

func (m *PortReply) encode(e *encoder) {
	e.str(m.Name)
	e.bytes(m.Addr[:])
	e.bytes(m.GID[:])
	e.u32(m.ActiveMTU)
	e.u8(m.State)
}

func (m *PortReply) decode(d *decoder) {
	m.Name = d.str()
	d.bytes(m.Addr[:])
	d.bytes(m.GID[:])
	m.ActiveMTU = d.u32()
	m.State = d.u8()
}

// RegMRReq asks to register Length bytes at Offset of the memfd the
// message carries, answering to IOVA with Access (ibv_reg_mr).
type RegMRReq struct {
	PD     uint32
	Access uint32
	Offset uint64
	Length uint64
	IOVA   uint64
}

func (m *RegMRReq) encode(e *encoder) {
	e.u32(m.PD)
	e.u32(m.Access)
	e.u64(m.Offset)
	e.u64(m.Length)
	e.u64(m.IOVA)
}

func (m *RegMRReq) decode(d *decoder) {
	m.PD, m.Access = d.u32(), d.u32()
	m.Offset, m.Length, m.IOVA = d.u64(), d.u64(), d.u64()
}

// RegMRShmReq asks to register Length bytes at Addr of the client's
// address space, which lie in its attachment of System V shared memory
// segment ShmID (ibv_reg_mr on shmat memory, as UCX's sysv allocator
// gives), answering to IOVA with Access. The daemon attaches the segment
// itself: its size is fixed, so nothing the client does can make the
// NIC's access to it fault. The reply is a RegMRReply.
type RegMRShmReq struct {
	PD     uint32
	Access uint32
	ShmID  uint32
	Addr   uint64
	Length uint64
	IOVA   uint64
}

func (m *RegMRShmReq) encode(e *encoder) {
	e.u32(m.PD)
	e.u32(m.Access)
	e.u32(m.ShmID)
	e.u64(m.Addr)
	e.u64(m.Length)
	e.u64(m.IOVA)
}

func (m *RegMRShmReq) decode(d *decoder) {
	m.PD, m.Access, m.ShmID = d.u32(), d.u32(), d.u32()
	m.Addr, m.Length, m.IOVA = d.u64(), d.u64(), d.u64()
}

// RegMRReply answers KindRegMR.
type RegMRReply struct{ H, LKey, RKey uint32 }

func (m *RegMRReply) encode(e *encoder) { e.u32(m.H); e.u32(m.LKey); e.u32(m.RKey) }
func (m *RegMRReply) decode(d *decoder) { m.H, m.LKey, m.RKey = d.u32(), d.u32(), d.u32() }

// AllocMWReq asks for a memory window of PD of Type (1 or 2: enum
// ibv_mw_type).
type AllocMWReq struct{ PD, Type uint32 }

func (m *AllocMWReq) encode(e *encoder) { e.u32(m.PD); e.u32(m.Type) }
func (m *AllocMWReq) decode(d *decoder) { m.PD, m.Type = d.u32(), d.u32() }

// AllocMWReply answers KindAllocMW: the window's handle and its rkey.
type AllocMWReply struct{ H, RKey uint32 }

func (m *AllocMWReply) encode(e *encoder) { e.u32(m.H); e.u32(m.RKey) }
func (m *AllocMWReply) decode(d *decoder) { m.H, m.RKey = d.u32(), d.u32() }

// CreateCQReq asks for a CQ of at least CQE entries reporting to Channel
// (0: none). The reply carries the ring's memfd, then the read end of a
// pipe the daemon writes when the client sleeps in Wait (see the ring
// layout's waiting word).
type CreateCQReq struct{ CQE, Channel uint32 }

func (m *CreateCQReq) encode(e *encoder) { e.u32(m.CQE); e.u32(m.Channel) }
func (m *CreateCQReq) decode(d *decoder) { m.CQE, m.Channel = d.u32(), d.u32() }

// RingReply answers the creation of an object with rings (CQ, SRQ, QP):
// its handle, and where its rings lie in the memfd the reply carries.
type RingReply struct {
	H   uint32
	QPN uint32 // QPs only
	// Caps are the sizes the object got (a CQ's depth in MaxSendWR; an
	// SRQ's in MaxRecvWR/MaxRecvSGE).
	Caps ib.QPCap
	// Rings: the send (or completion) ring and the receive ring; Size 0
	// for a ring the object does not have.
	Send, Recv RingDesc
}

// RingDesc locates one ring in the object's memfd.
type RingDesc struct {
	Offset, Size     uint32
	Slots, SlotBytes uint32
}

func (r *RingDesc) encode(e *encoder) {
	e.u32(r.Offset)
	e.u32(r.Size)
	e.u32(r.Slots)
	e.u32(r.SlotBytes)
}
func (r *RingDesc) decode(d *decoder) {
	r.Offset, r.Size, r.Slots, r.SlotBytes = d.u32(), d.u32(), d.u32(), d.u32()
}

func encodeCaps(e *encoder, c *ib.QPCap) {
	for _, v := range []int{c.MaxSendWR, c.MaxRecvWR, c.MaxSendSGE, c.MaxRecvSGE, c.MaxInlineData} {
		e.u32(uint32(v))
	}
}

func decodeCaps(d *decoder, c *ib.QPCap) {
	for _, p := range []*int{&c.MaxSendWR, &c.MaxRecvWR, &c.MaxSendSGE, &c.MaxRecvSGE, &c.MaxInlineData} {
		v := d.u32()
		if v > 1<<24 {
			d.fail("queue size %d", v)
		}
		*p = int(v)
	}
}

func (m *RingReply) encode(e *encoder) {
	e.u32(m.H)
	e.u32(m.QPN)
	encodeCaps(e, &m.Caps)
	m.Send.encode(e)
	m.Recv.encode(e)
}

func (m *RingReply) decode(d *decoder) {
	m.H, m.QPN = d.u32(), d.u32()
	decodeCaps(d, &m.Caps)
	m.Send.decode(d)
	m.Recv.decode(d)
}

// CreateSRQReq asks for a shared receive queue (ibv_create_srq).
type CreateSRQReq struct{ PD, MaxWR, MaxSGE, Limit uint32 }

func (m *CreateSRQReq) encode(e *encoder) {
	e.u32(m.PD)
	e.u32(m.MaxWR)
	e.u32(m.MaxSGE)
	e.u32(m.Limit)
}
func (m *CreateSRQReq) decode(d *decoder) {
	m.PD, m.MaxWR, m.MaxSGE, m.Limit = d.u32(), d.u32(), d.u32(), d.u32()
}

// CreateQPReq asks for a QP in RESET (ibv_create_qp); SRQ 0 is none.
type CreateQPReq struct {
	PD, SendCQ, RecvCQ, SRQ uint32
	Type                    ib.QPType
	SigAll                  bool
	Caps                    ib.QPCap
}

func (m *CreateQPReq) encode(e *encoder) {
	e.u32(m.PD)
	e.u32(m.SendCQ)
	e.u32(m.RecvCQ)
	e.u32(m.SRQ)
	e.u8(uint8(m.Type))
	e.u8(b2u(m.SigAll))
	encodeCaps(e, &m.Caps)
}

func (m *CreateQPReq) decode(d *decoder) {
	m.PD, m.SendCQ, m.RecvCQ, m.SRQ = d.u32(), d.u32(), d.u32(), d.u32()
	m.Type = ib.QPType(d.u8())
	m.SigAll = u2b(d, d.u8())
	decodeCaps(d, &m.Caps)
}

func b2u(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

func u2b(d *decoder, v uint8) bool {
	if v > 1 {
		d.fail("boolean %d", v)
	}
	return v == 1
}

// ModifyQPReq changes a QP (ibv_modify_qp): the attributes Mask names.
type ModifyQPReq struct {
	H    uint32
	Mask ib.AttrMask
	Attr ib.QPAttr
}

// Target is the QP (or SRQ) the request acts on.
func (m *ModifyQPReq) Target() uint32 { return m.H }

func encodeAttr(e *encoder, a *ib.QPAttr) {
	e.u8(uint8(a.State))
	e.u8(uint8(a.PathMTU))
	e.u32(a.QKey)
	e.u32(a.RQPSN)
	e.u32(a.SQPSN)
	e.u32(a.DestQPN)
	e.u32(uint32(a.AccessFlags))
	e.u16(a.PKeyIndex)
	e.u8(a.PortNum)
	e.bytes(a.AH.DGID[:])
	e.u32(a.AH.FlowLabel)
	e.u8(a.AH.SGIDIndex)
	e.u8(a.AH.HopLimit)
	e.u8(a.AH.TrafficClass)
	for _, v := range []uint8{a.Timeout, a.RetryCnt, a.RNRRetry, a.MinRNRTimer, a.MaxRdAtomic, a.MaxDestRdAtomic} {
		e.u8(v)
	}
}

func decodeAttr(d *decoder, a *ib.QPAttr) {
	a.State = ib.QPState(d.u8())
	a.PathMTU = ib.MTU(d.u8())
	a.QKey, a.RQPSN, a.SQPSN, a.DestQPN = d.u32(), d.u32(), d.u32(), d.u32()
	a.AccessFlags = ib.Access(d.u32())
	a.PKeyIndex = d.u16()
	a.PortNum = d.u8()
	d.bytes(a.AH.DGID[:])
	a.AH.FlowLabel = d.u32()
	a.AH.SGIDIndex, a.AH.HopLimit, a.AH.TrafficClass = d.u8(), d.u8(), d.u8()
	for _, p := range []*uint8{&a.Timeout, &a.RetryCnt, &a.RNRRetry, &a.MinRNRTimer, &a.MaxRdAtomic, &a.MaxDestRdAtomic} {
		*p = d.u8()
	}
}

func (m *ModifyQPReq) encode(e *encoder) {
	e.u32(m.H)
	e.u32(uint32(m.Mask))
	encodeAttr(e, &m.Attr)
}

func (m *ModifyQPReq) decode(d *decoder) {
	m.H = d.u32()
	m.Mask = ib.AttrMask(d.u32())
	decodeAttr(d, &m.Attr)
}

// QPAttrReply answers KindQueryQP.
type QPAttrReply struct{ Attr ib.QPAttr }

func (m *QPAttrReply) encode(e *encoder) { encodeAttr(e, &m.Attr) }
func (m *QPAttrReply) decode(d *decoder) { decodeAttr(d, &m.Attr) }

// ListQPsReq asks for the device's QPs from QPN From up (rdma res show qp).
type ListQPsReq struct{ From uint32 }

func (m *ListQPsReq) encode(e *encoder) { e.u32(m.From) }
func (m *ListQPsReq) decode(d *decoder) { m.From = d.u32() }

// QPRow is one QP of ListQPsReply.
type QPRow struct {
	QPN, SQPSN, RQPSN, DestQPN uint32
	Type                       ib.QPType
	State                      ib.QPState
	PathMTU                    ib.MTU
	Dest                       [16]byte
	SQDepth, RQDepth           uint32
	PID                        uint32 // owner's; 0 for the daemon's own
	Comm                       string // owner's process name
}

// MaxRows keeps a ListQPs reply well inside MaxMessage.
const MaxRows = 256

// ListQPsReply answers KindListQPs; More says a further request from
// Next is needed.
type ListQPsReply struct {
	Rows []QPRow
	More bool
	Next uint32
}

func (m *ListQPsReply) encode(e *encoder) {
	e.u32(uint32(len(m.Rows)))
	for i := range m.Rows {
		r := &m.Rows[i]
		e.u32(r.QPN)
		e.u32(r.SQPSN)
		e.u32(r.RQPSN)
		e.u32(r.DestQPN)
		e.u8(uint8(r.Type))
		e.u8(uint8(r.State))
		e.u8(uint8(r.PathMTU))
		e.bytes(r.Dest[:])
		e.u32(r.SQDepth)
		e.u32(r.RQDepth)
		e.u32(r.PID)
		e.str(r.Comm)
	}
	e.u8(b2u(m.More))
	e.u32(m.Next)
}

func (m *ListQPsReply) decode(d *decoder) {
	n := d.u32()
	if n > MaxRows {
		d.fail("%d QP rows", n)
		return
	}
	m.Rows = make([]QPRow, n)
	for i := range m.Rows {
		r := &m.Rows[i]
		r.QPN, r.SQPSN, r.RQPSN, r.DestQPN = d.u32(), d.u32(), d.u32(), d.u32()
		r.Type, r.State, r.PathMTU = ib.QPType(d.u8()), ib.QPState(d.u8()), ib.MTU(d.u8())
		d.bytes(r.Dest[:])
		r.SQDepth, r.RQDepth, r.PID = d.u32(), d.u32(), d.u32()
		r.Comm = d.str()
	}
	m.More = u2b(d, d.u8())
	m.Next = d.u32()
}

// CountersReply answers KindCounters: the device's counters by name.
type CountersReply struct{ Counters map[string]uint64 }

const maxCounters = 1024

func (m *CountersReply) encode(e *encoder) {
	e.u32(uint32(len(m.Counters)))
	for k, v := range m.Counters {
		e.str(k)
		e.u64(v)
	}
}

func (m *CountersReply) decode(d *decoder) {
	n := d.u32()
	if n > maxCounters {
		d.fail("%d counters", n)
		return
	}
	m.Counters = make(map[string]uint64, n)
	for range n {
		k := d.str()
		m.Counters[k] = d.u64()
	}
}

// Doorbell queues. A doorbell names a QP's send or receive queue, or an
// SRQ (Queue is then DoorbellRecv).
const (
	DoorbellSend uint8 = 0
	DoorbellRecv uint8 = 1
)

// DoorbellReq says the producer index of an object's ring moved: the
// daemon fetches the new WQEs. It has no reply; a malformed or misdirected
// doorbell gets an error reply the client reads as an asynchronous error.
type DoorbellReq struct {
	H     uint32
	Queue uint8
}

// Target is the QP (or SRQ) the request acts on.
func (m *DoorbellReq) Target() uint32 { return m.H }

func (m *DoorbellReq) encode(e *encoder) { e.u32(m.H); e.u8(m.Queue) }
func (m *DoorbellReq) decode(d *decoder) {
	m.H, m.Queue = d.u32(), d.u8()
	if m.Queue > DoorbellRecv {
		d.fail("doorbell queue %d", m.Queue)
	}
}

// McastReq attaches a UD QP to a multicast group, or detaches it
// (KindAttachMcast, KindDetachMcast): the group's GID (for RoCEv2 its IP
// address, IPv4-mapped for IPv4) and LID, which RoCE does not use.
type McastReq struct {
	H   uint32 // the QP
	GID [16]byte
	LID uint16
}

// Target is the QP the request acts on.
func (m *McastReq) Target() uint32 { return m.H }

func (m *McastReq) encode(e *encoder) {
	e.u32(m.H)
	e.bytes(m.GID[:])
	e.u16(m.LID)
}

func (m *McastReq) decode(d *decoder) {
	m.H = d.u32()
	d.bytes(m.GID[:])
	m.LID = d.u16()
}
