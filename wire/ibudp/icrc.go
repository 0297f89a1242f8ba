package ibudp

import (
	"encoding/binary"
	"hash/crc32"

	"github.com/rnicd/rnicd/wire/bth"
)

// icrc computes ICRCs with scratch space of its own for the headers built
// from an Envelope, one per direction of a port. The CRC itself is
// bth.ComputeICRC, which allocates nothing.
type icrc struct {
	h  [bth.MaxEnvelopeLen]byte // headers built from an Envelope
	id bth.IDSolver             // for packets whose IPv4 ID is not known
}

// compute returns the ICRC of roce (BTH through ICRC) under the IP and UDP
// headers hdr, which must be well formed (built by Envelope.Put or checked
// by parseIPHeader) and at most bth.MaxEnvelopeLen long.
func (c *icrc) compute(hdr, roce []byte) uint32 {
	// hdr and roce are checked by the callers, so this cannot fail.
	crc, _ := bth.ComputeICRC(hdr, roce[:len(roce)-bth.ICRCLen])
	return crc
}

// seal stores the ICRC of roce under hdr in its last four bytes, least
// significant byte first.
func (c *icrc) seal(hdr, roce []byte) {
	binary.LittleEndian.PutUint32(roce[len(roce)-bth.ICRCLen:], c.compute(hdr, roce))
}

// check reports whether roce's ICRC is right under hdr.
func (c *icrc) check(hdr, roce []byte) bool {
	return c.compute(hdr, roce) == binary.LittleEndian.Uint32(roce[len(roce)-bth.ICRCLen:])
}

// sealEnvelope seals roce for the headers e describes.
func (c *icrc) sealEnvelope(e *bth.Envelope, roce []byte) {
	c.seal(c.h[:e.Put(c.h[:], len(roce))], roce)
}

// sealEnvelopeParts seals a RoCE part given as three pieces (Buf.lentParts:
// head from the BTH, a payload where it lies, tail ending in the ICRC) for
// the headers e describes, reading the payload once and copying nothing.
// head is at least a BTH long (SetPayloadRef) and tail at least the ICRC.
func (c *icrc) sealEnvelopeParts(e *bth.Envelope, head, payload, tail []byte) {
	hdr := c.h[:e.Put(c.h[:], len(head)+len(payload)+len(tail))]
	// crc32.Update carries on from an earlier result, so the CRC of the
	// pieces one after another is the CRC of the whole.
	crc, _ := bth.ComputeICRC(hdr, head)
	crc = crc32.Update(crc, crc32.IEEETable, payload)
	crc = crc32.Update(crc, crc32.IEEETable, tail[:len(tail)-bth.ICRCLen])
	binary.LittleEndian.PutUint32(tail[len(tail)-bth.ICRCLen:], crc)
}

// checkEnvelopeAnyID checks roce under the headers e describes with any
// IPv4 ID, with one pass of the CRC: it reports whether the ICRC is right,
// and if so the ID that makes it so and whether that is e.ID. For IPv6 it
// is a plain check under e's headers.
func (c *icrc) checkEnvelopeAnyID(e *bth.Envelope, roce []byte) (id uint16, exact, ok bool) {
	n := e.Put(c.h[:], len(roce))
	d := c.compute(c.h[:n], roce) ^ binary.LittleEndian.Uint32(roce[len(roce)-bth.ICRCLen:])
	if d == 0 {
		return e.ID, true, true
	}
	if !e.IsIPv4() {
		return 0, false, false
	}
	x, ok := c.id.Solve(bth.IDBytesAfter(n, len(roce)), d)
	return e.ID ^ x, false, ok
}

// ApplyFlip applies a fault injector's pending corruption (Flip) to b,
// after sealing, as every port's send path does.
func (b *Buf) ApplyFlip() {
	if b.Flip == 0 {
		return
	}
	bit := int(b.Flip - 1)
	b.Flip = 0
	if r := b.RoCE(); bit/8 < len(r) {
		r[bit/8] ^= 1 << (bit % 8)
	}
}
