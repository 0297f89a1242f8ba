package monitor

import "strings"

// The sequence diagram's rows. At full speed a 64 KiB WRITE is 64
// packets and an ACK or two, hundreds of thousands a second: drawn one
// arrow a packet, the page showed ~2,400 px of identical WRITE MIDDLE
// arrows for a few milliseconds of traffic. A row is therefore a run of
// like packets (same ends, QPs, kind and opcode class: every RDMA_WRITE_*
// of one QP to the other) with its count, first and last PSN, while a
// lost packet and a NAK are always a row of their own, and a
// retransmission or a CNP is never counted in a run of other packets.

// keepRows is how many rows the monitor keeps for the diagram; the page
// draws the newest maxRows of them (app.js).
const keepRows = 512

// coalesceBack is how many of the newest rows a packet may join: the
// runs that interleave on one connection (data one way, ACKs the other,
// CNPs, READ responses) stay open together.
const coalesceBack = 4

// runSpan closes a run a second after its first packet, so that a
// steady stream still moves down the diagram (a row a second per flow)
// rather than one row counting forever.
const runSpan = int64(1e9)

// diagram is the ring of rows and the numbering the page asks by.
type diagram struct {
	rows    []Packet
	nextSeq uint64 // Seq of the next row, from 1
	ver     uint64 // bumped on every change; a row's Ver is its last
}

// opClass is the class an opcode belongs to for coalescing: its name
// without the packet's place in the message (RDMA_WRITE_FIRST, _MIDDLE,
// _LAST, _LAST_WITH_IMMEDIATE and _ONLY are all RDMA_WRITE).
func opClass(op string) string {
	for _, part := range []string{"_FIRST", "_MIDDLE", "_LAST", "_ONLY"} {
		if i := strings.Index(op, part); i > 0 {
			return op[:i]
		}
	}
	return op
}

// alone reports whether p is a row of its own whatever comes before or
// after it: a loss, a NAK, an RNR NAK.
func alone(p *Packet) bool { return p.Lost || p.Kind == "nak" || p.Kind == "rnr" }

// sameRun reports whether packet p may be counted in row r.
func sameRun(r, p *Packet) bool {
	return r.From == p.From && r.To == p.To && r.FromQPN == p.FromQPN && r.ToQPN == p.ToQPN &&
		r.Kind == p.Kind && r.Class == p.Class && r.Retransmit == p.Retransmit && p.TimeNS-r.TimeNS < runSpan
}

// add puts packet p in the diagram: counted in an open run of like
// packets among the newest coalesceBack rows, or as a new row. A row of
// its own (a loss, a NAK) closes every run before it, and so does a run
// of retransmissions for the packets that are not retransmitted, so
// that the rows keep the order things happened in: the run before a
// loss, the loss, what followed it, the NAK, the retransmissions.
func (d *diagram) add(p Packet) {
	if d.nextSeq == 0 {
		d.nextSeq = 1
	}
	p.Class = opClass(p.Opcode)
	p.Count, p.Bytes, p.LastPSN, p.LastOpcode, p.LastTimeNS = 1, uint64(p.Len), p.PSN, p.Opcode, p.TimeNS
	d.ver++
	if !alone(&p) {
		for i := len(d.rows) - 1; i >= 0 && i >= len(d.rows)-coalesceBack; i-- {
			r := &d.rows[i]
			if alone(r) || (r.Retransmit && !p.Retransmit) {
				break
			}
			if sameRun(r, &p) {
				r.Count++
				r.Bytes += uint64(p.Len)
				r.LastPSN, r.LastOpcode, r.LastTimeNS, r.Ver = p.PSN, p.Opcode, p.TimeNS, d.ver
				return
			}
		}
	}
	p.Seq, p.Ver = d.nextSeq, d.ver
	d.nextSeq++
	d.rows = append(d.rows, p)
	if extra := len(d.rows) - keepRows; extra > 0 {
		d.rows = append(d.rows[:0], d.rows[extra:]...)
	}
}

// changed returns the rows added or grown since version after.
func (d *diagram) changed(after uint64) []Packet {
	out := []Packet{}
	for _, r := range d.rows {
		if r.Ver > after {
			out = append(out, r)
		}
	}
	return out
}

// keep drops the rows whose ends are not among lanes: rows of a far end
// whose QPs are gone.
func (d *diagram) keep(lanes []Lane) {
	has := make(map[string]bool, len(lanes))
	for _, l := range lanes {
		has[l.Name] = true
	}
	out := d.rows[:0]
	for _, r := range d.rows {
		if has[r.From] && has[r.To] {
			out = append(out, r)
		}
	}
	clear(d.rows[len(out):])
	d.rows = out
}
