package lend

import (
	"encoding/binary"
	"math"
	"net/netip"
	"time"

	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/rnic/trace"
	"github.com/rnicd/rnicd/wire/bth"
	"github.com/rnicd/rnicd/wire/ibudp"
)

var le = binary.LittleEndian

// eventLen is a trace event's payload: the Event without Seq and NIC,
// which the daemon's tracer stamps.
const eventLen = 48

func putEvent(b []byte, e *trace.Event) {
	le.PutUint64(b[0:], uint64(e.Time))
	le.PutUint64(b[8:], e.WRID)
	le.PutUint32(b[16:], e.QPN)
	le.PutUint32(b[20:], e.DestQPN)
	le.PutUint32(b[24:], e.PSN)
	le.PutUint32(b[28:], e.Len)
	le.PutUint32(b[32:], e.Arg)
	le.PutUint32(b[36:], e.Aux)
	b[40], b[41], b[42], b[43], b[44] = byte(e.Module), byte(e.Step), byte(e.Flags), byte(e.Opcode), byte(e.WROp)
}

// decodeEvent reads an event record's payload; any bytes make some event
// (the trace prints unknown modules and steps by number).
func decodeEvent(b []byte) (trace.Event, bool) {
	if len(b) < eventLen {
		return trace.Event{}, false
	}
	return trace.Event{
		Time: int64(le.Uint64(b[0:])), WRID: le.Uint64(b[8:]),
		QPN: le.Uint32(b[16:]) & bth.QPNMask, DestQPN: le.Uint32(b[20:]) & bth.QPNMask, PSN: le.Uint32(b[24:]),
		Len: le.Uint32(b[28:]), Arg: le.Uint32(b[32:]), Aux: le.Uint32(b[36:]),
		Module: trace.Module(b[40]), Step: trace.Step(b[41]), Flags: trace.Flags(b[42]),
		Opcode: bth.Opcode(b[43]), WROp: ib.WROpcode(b[44]),
	}, true
}

// A packet record: tap point, ICRC status, header length, RoCE length,
// then the header and the RoCE part.
const packetHdrLen = 8

func putPacketHdr(b []byte, at ibudp.TapPoint, icrc ibudp.ICRCStatus, hdr, roce []byte) {
	b[0], b[1] = byte(at), byte(icrc)
	le.PutUint16(b[2:], uint16(len(hdr)))
	le.PutUint32(b[4:], uint32(len(roce)))
}

// decodePacket splits a packet record's payload; ok is false if its
// lengths do not add up or it names no tap point a borrower reports.
func decodePacket(b []byte) (at ibudp.TapPoint, icrc ibudp.ICRCStatus, hdr, roce []byte, ok bool) {
	if len(b) < packetHdrLen {
		return 0, 0, nil, nil, false
	}
	at, icrc = ibudp.TapPoint(b[0]), ibudp.ICRCStatus(b[1])
	hl, rl := int(le.Uint16(b[2:])), int(le.Uint32(b[4:]))
	if at < ibudp.TapSent || at > ibudp.TapFaultDropRX || rl < bth.BTHLen+bth.ICRCLen || rl > ibudp.MaxRoCELen ||
		hl > len(b)-packetHdrLen || rl > len(b)-packetHdrLen-hl {
		return 0, 0, nil, nil, false
	}
	if hl > 0 {
		hdr = b[packetHdrLen : packetHdrLen+hl]
	}
	return at, icrc, hdr, b[packetHdrLen+hl : packetHdrLen+hl+rl], true
}

// QPRow is one of the borrower's QPs as the daemon lists them.
type QPRow struct {
	QPN, SQPSN, UnaPSN, RQPSN, DestQPN uint32
	SQUsed, SQCap, SQInFlight          uint32
	RQUsed, RQCap                      uint32
	PathMTUBytes                       uint32 // the path MTU in bytes (a UD QP's is the port's)
	Type                               ib.QPType
	State                              ib.QPState
	PathMTU                            ib.MTU // the attribute, as ibv_query_qp has it
	Dest                               [16]byte
}

// DestAddr is the peer of a connected QP, invalid if none.
func (r *QPRow) DestAddr() netip.Addr {
	a := netip.AddrFrom16(r.Dest).Unmap()
	if a.IsUnspecified() {
		return netip.Addr{}
	}
	return a
}

func putQPRow(b []byte, r *QPRow) {
	for i, v := range []uint32{r.QPN, r.SQPSN, r.UnaPSN, r.RQPSN, r.DestQPN, r.SQUsed, r.SQCap, r.SQInFlight, r.RQUsed, r.RQCap, r.PathMTUBytes} {
		le.PutUint32(b[4*i:], v)
	}
	b[44], b[45], b[46] = byte(r.Type), byte(r.State), byte(r.PathMTU)
	copy(b[48:64], r.Dest[:])
}

// decodeQPRow reads a row; ok is false for a QP of no known type or state
// or a QPN outside first..last, the borrower's block.
func decodeQPRow(b []byte, first, last uint32) (QPRow, bool) {
	var r QPRow
	for i, p := range []*uint32{&r.QPN, &r.SQPSN, &r.UnaPSN, &r.RQPSN, &r.DestQPN, &r.SQUsed, &r.SQCap, &r.SQInFlight, &r.RQUsed, &r.RQCap, &r.PathMTUBytes} {
		*p = le.Uint32(b[4*i:])
	}
	r.Type, r.State, r.PathMTU = ib.QPType(b[44]), ib.QPState(b[45]), ib.MTU(b[46])
	copy(r.Dest[:], b[48:64])
	switch r.Type {
	case ib.QPTypeRC, ib.QPTypeUC, ib.QPTypeUD:
	default:
		return r, false
	}
	if r.State > ib.QPSErr || r.QPN < first || r.QPN > last {
		return r, false
	}
	r.SQPSN &= bth.PSNMask
	r.UnaPSN &= bth.PSNMask
	r.RQPSN &= bth.PSNMask
	r.DestQPN &= bth.QPNMask
	return r, true
}

// Faults cross as 16 eight-byte fields.
func putFaults(b []byte, f *ibudp.Faults) {
	filter := uint64(0)
	if f.FilterQPN {
		filter = 1
	}
	for i, v := range []uint64{math.Float64bits(f.Drop), math.Float64bits(f.Duplicate), math.Float64bits(f.Corrupt),
		math.Float64bits(f.Reorder), uint64(f.ReorderBy), uint64(f.ReorderTimeout), uint64(f.Delay), uint64(f.Jitter),
		filter, uint64(f.QPN), uint64(f.DropNth), f.Link.Rate, uint64(f.Link.Queue), uint64(f.Link.KMin), uint64(f.Link.KMax),
		math.Float64bits(f.Link.PMax)} {
		le.PutUint64(b[8*i:], v)
	}
}

func decodeFaults(b []byte) ibudp.Faults {
	u := func(i int) uint64 { return le.Uint64(b[8*i:]) }
	fl := func(i int) float64 { return math.Float64frombits(u(i)) }
	return ibudp.Faults{
		Drop: fl(0), Duplicate: fl(1), Corrupt: fl(2), Reorder: fl(3), ReorderBy: int(u(4)),
		ReorderTimeout: time.Duration(u(5)), Delay: time.Duration(u(6)), Jitter: time.Duration(u(7)),
		FilterQPN: u(8) != 0, QPN: uint32(u(9)) & bth.QPNMask, DropNth: int(u(10)),
		Link: ibudp.Link{Rate: u(11), Queue: int(u(12)), KMin: int(u(13)), KMax: int(u(14)), PMax: fl(15)},
	}
}

// faultFields are a FaultCounts' fields in their order in the area.
func faultFields(c *ibudp.FaultCounts) []*uint64 {
	return []*uint64{&c.Packets, &c.Matched, &c.Dropped, &c.Duplicated, &c.Corrupted, &c.Reordered, &c.Delayed,
		&c.Overflow, &c.LinkPackets, &c.LinkDropped, &c.Marked, &c.QueueDepth, &c.QueuePeak}
}

// validName says whether a counter name is one a device would use:
// 1 to counterNameLen of [a-z0-9_].
func validName(s []byte) bool {
	if len(s) == 0 || len(s) > counterNameLen {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}
