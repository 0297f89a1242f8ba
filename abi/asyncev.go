package abi

import "github.com/rnicd/rnicd/ib"

// Asynchronous events and the SRQ's limit. The kinds start at 40, apart
// from the ones other features append, so that no two land on one value.
const (
	// KindOpenAsync opens the client's asynchronous event queue
	// (ibv_open_device's async_fd): the reply carries the read end of a
	// wake pipe the daemon writes when it queues an event, and, when
	// the daemon goes, the pipe's end of file (DEVICE_FATAL). Once per
	// connection. Empty request, Empty reply.
	KindOpenAsync Kind = 40
	// KindGetAsyncEvent takes the oldest queued event
	// (ibv_get_async_event): Empty request, AsyncEvent reply.
	KindGetAsyncEvent Kind = 41
	// KindModifySRQ arms an SRQ's limit (ibv_modify_srq, ModifySRQReq).
	KindModifySRQ Kind = 42
	// KindQuerySRQ reads an SRQ's attributes (ibv_query_srq): Handle
	// request, SRQAttrReply.
	KindQuerySRQ Kind = 43
)

func init() {
	kindNames[KindOpenAsync] = "open_async"
	kindNames[KindGetAsyncEvent] = "get_async_event"
	kindNames[KindModifySRQ] = "modify_srq"
	kindNames[KindQuerySRQ] = "query_srq"
}

// AsyncEvent answers KindGetAsyncEvent: Have 0 when no event waits; else
// the event's type (libibverbs' numbering), the handle of the client's
// object it is affiliated with (a QP, CQ or SRQ; 0 for a port event) and
// the port (1 for a port event, else 0).
type AsyncEvent struct {
	Have bool
	Type ib.EventType
	Port uint8
	H    uint32
}

func (m *AsyncEvent) encode(e *encoder) {
	e.u8(b2u(m.Have))
	e.u8(uint8(m.Type))
	e.u8(m.Port)
	e.u8(0)
	e.u32(m.H)
}

func (m *AsyncEvent) decode(d *decoder) {
	m.Have = d.u8() != 0
	m.Type = ib.EventType(d.u8())
	m.Port = d.u8()
	d.u8()
	m.H = d.u32()
}

// Port states (enum ibv_port_state), a PortReply's State.
const (
	PortDown   uint8 = 1 // IBV_PORT_DOWN
	PortActive uint8 = 4 // IBV_PORT_ACTIVE
)

// SRQ attribute mask bits (enum ibv_srq_attr_mask).
const (
	SRQMaxWR uint32 = 1 << 0 // IBV_SRQ_MAX_WR: resize, which rnicd refuses
	SRQLimit uint32 = 1 << 1 // IBV_SRQ_LIMIT
)

// ModifySRQReq changes the attributes of SRQ H named in Mask
// (ibv_modify_srq): only the limit (SRQLimit), which arms
// SRQ_LIMIT_REACHED; 0 disarms it.
type ModifySRQReq struct{ H, Mask, MaxWR, Limit uint32 }

// Target is the SRQ.
func (m *ModifySRQReq) Target() uint32 { return m.H }

func (m *ModifySRQReq) encode(e *encoder) {
	e.u32(m.H)
	e.u32(m.Mask)
	e.u32(m.MaxWR)
	e.u32(m.Limit)
}

func (m *ModifySRQReq) decode(d *decoder) {
	m.H, m.Mask, m.MaxWR, m.Limit = d.u32(), d.u32(), d.u32(), d.u32()
}

// SRQAttrReply answers KindQuerySRQ (struct ibv_srq_attr): Limit is 0
// once the limit fired, as rxe disarms it.
type SRQAttrReply struct{ MaxWR, MaxSGE, Limit uint32 }

func (m *SRQAttrReply) encode(e *encoder) {
	e.u32(m.MaxWR)
	e.u32(m.MaxSGE)
	e.u32(m.Limit)
}

func (m *SRQAttrReply) decode(d *decoder) {
	m.MaxWR, m.MaxSGE, m.Limit = d.u32(), d.u32(), d.u32()
}
