package lend

import (
	"encoding/binary"
	"errors"
)

// The ring carries records from the borrower (the only producer) to the
// daemon (the only consumer): a u32 length of the whole record, a multiple
// of 8, a u16 type, two bytes of padding, then the payload. A record that
// would cross the ring's end is preceded by a pad record to the end.
const (
	recHdrLen = 8
	recPad    = 0 // skip to the ring's end
	recEvent  = 1 // a trace event (eventLen bytes)
	recPacket = 2 // a packet copy (packetHdrLen bytes, then the packet)
	// maxRecord bounds a record: a packet of MTU 9000 with its headers
	// and more.
	maxRecord = 16 << 10
)

// errRing says the ring's words make no sense: the borrower wrote them so.
var errRing = errors.New("lend: the borrower's ring is corrupt")

// put writes one record of type typ whose payload is the parts, if it
// fits; the caller serializes puts. A record that does not fit is counted
// as lost.
func (a *Area) put(typ uint16, parts ...[]byte) bool {
	n := recHdrLen
	for _, p := range parts {
		n += len(p)
	}
	n = (n + 7) &^ 7
	head, tail := a.u64(offRingHead).Load(), a.u64(offRingTail).Load()
	pos := int(tail % RingLen)
	pad := 0
	if pos+n > RingLen {
		pad = RingLen - pos
	}
	if n > maxRecord || tail-head > RingLen || uint64(pad+n) > RingLen-(tail-head) {
		if typ == recPacket {
			a.u64(offPktLost).Add(1)
		} else {
			a.u64(offRingLost).Add(1)
		}
		return false
	}
	ring := a.mem[offRing : offRing+RingLen]
	if pad > 0 {
		binary.LittleEndian.PutUint32(ring[pos:], uint32(pad))
		binary.LittleEndian.PutUint16(ring[pos+4:], recPad)
		pos = 0
	}
	binary.LittleEndian.PutUint32(ring[pos:], uint32(n))
	binary.LittleEndian.PutUint16(ring[pos+4:], typ)
	at := pos + recHdrLen
	for _, p := range parts {
		at += copy(ring[at:], p)
	}
	a.u64(offRingTail).Store(tail + uint64(pad+n))
	return true
}

// drain hands every record waiting in the ring to fn, in order, with a
// copy of its payload in scratch (which must hold maxRecord bytes), and
// frees its room. A record that makes no sense ends the drain: what is
// left is skipped and errRing returned.
func (a *Area) drain(scratch []byte, fn func(typ uint16, payload []byte)) (int, error) {
	head, tail := a.u64(offRingHead).Load(), a.u64(offRingTail).Load()
	if tail-head > RingLen || head%8 != 0 {
		a.u64(offRingHead).Store(tail &^ 7)
		return 0, errRing
	}
	ring := a.mem[offRing : offRing+RingLen]
	n := 0
	for head < tail {
		pos := int(head % RingLen)
		l := int(binary.LittleEndian.Uint32(ring[pos:]))
		typ := binary.LittleEndian.Uint16(ring[pos+4:])
		if l < recHdrLen || l%8 != 0 || l > RingLen-pos || uint64(l) > tail-head || (typ != recPad && l > maxRecord) {
			a.u64(offRingHead).Store(tail)
			return n, errRing
		}
		if typ != recPad {
			p := scratch[:copy(scratch[:l-recHdrLen], ring[pos+recHdrLen:pos+l])]
			fn(typ, p)
			n++
		}
		head += uint64(l)
		a.u64(offRingHead).Store(head)
	}
	return n, nil
}

// skip drops whatever waits in the ring: events and packets of a trace or
// capture that has ended, which the next one must not show.
func (a *Area) skip() {
	tail := a.u64(offRingTail).Load()
	if tail%8 != 0 {
		tail &^= 7
	}
	a.u64(offRingHead).Store(tail)
}

// Lost is the number of trace events and of packet copies the borrower
// could not fit in the ring.
func (a *Area) Lost() (events, packets uint64) {
	return a.u64(offRingLost).Load(), a.u64(offPktLost).Load()
}
