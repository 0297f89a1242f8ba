package bth

import "hash/crc32"

// The ICRC covers the IPv4 identification, but a plain UDP socket does not
// show it, and rxe sends a new ID with every packet. CheckICRCAnyID recovers
// the ID from the ICRC instead of trying all 65536 values.
//
// A CRC is affine over GF(2) in the bits of a message of fixed length: if
// crc(x) is the ICRC of the packet sent with ID x, then
//
//	crc(x) = crc(0) XOR M·x
//
// where column i of the 32x16 matrix M is the change a flip of ID bit i
// makes to the CRC. That change depends only on where the bit is and on how
// many bytes follow it, not on the rest of the packet: flipping one bit of
// the byte being fed changes the CRC register by a table entry, and each
// byte fed after it multiplies that difference by x^8 modulo the CRC
// polynomial. So M takes a table lookup and a power of x, and the
// ID is the solution of M·x = crc(0) XOR stored, found by Gaussian
// elimination over GF(2). CRC-32 detects every burst of up to 32 bits, so
// no nonzero x leaves the CRC unchanged: M has rank 16 and the solution,
// when there is one, is unique.

// crcPoly is the IEEE CRC-32 polynomial in the reflected bit order of
// hash/crc32: bit 31 holds the coefficient of x^0, bit 0 that of x^31.
const crcPoly = 0xedb88320

// mulModP returns a·b modulo the CRC polynomial, both in reflected order.
func mulModP(a, b uint32) uint32 {
	var p uint32
	for m := uint32(1) << 31; m != 0; m >>= 1 {
		if a&m != 0 {
			p ^= b
		}
		b = mulX(b)
	}
	return p
}

// mulX returns a·x modulo the CRC polynomial: one step of the CRC
// register with a zero input bit. The x^31 coefficient (bit 0) leaves and
// is reduced.
func mulX(a uint32) uint32 { return a>>1 ^ -(a&1)&crcPoly }

// xPowModP returns x^n modulo the CRC polynomial, by repeated squaring.
func xPowModP(n int) uint32 {
	r := uint32(1) << 31 // x^0
	base := uint32(1) << 30
	for ; n > 0; n >>= 1 {
		if n&1 != 0 {
			r = mulModP(r, base)
		}
		base = mulModP(base, base)
	}
	return r
}

// xPow8Pow2[k] is x^(8·2^k), the effect on the CRC register of 2^k zero
// bytes: enough powers for any IP datagram. It is a constant table, filled
// once, like crc32's.
var xPow8Pow2 = func() (t [17]uint32) {
	for k := range t {
		t[k] = xPowModP(8 << k)
	}
	return t
}()

// shiftBytes returns v·x^(8n), the CRC register difference v after n more
// bytes that do not differ, n < 2^17.
func shiftBytes(v uint32, n int) uint32 {
	for k := 0; n > 0; k, n = k+1, n>>1 {
		if n&1 != 0 {
			v = mulModP(v, xPow8Pow2[k])
		}
	}
	return v
}

// idColumns returns the CRC difference that flipping each bit of the IPv4 ID
// makes when after bytes follow the ID.
//
// The CRC register feeds a byte's bits least significant first, so of the
// sixteen bits the last one fed is bit 7 of the ID's low byte (the
// datagram's byte 5): it changes the register by crc32 table entry 0x80,
// x^32, and the n bytes after it multiply that by x^(8n). Every bit fed one
// step earlier has one more factor x.
func idColumns(after int) (cols [16]uint32) {
	v := shiftBytes(crc32.IEEETable[0x80], after)
	for k := range 16 {
		// k steps before the last: bits 7..0 of the low byte, then
		// bits 7..0 (ID bits 15..8) of the high byte.
		if k < 8 {
			cols[7-k] = v
		} else {
			cols[23-k] = v
		}
		v = mulX(v)
	}
	return cols
}

// IDSolver finds the IPv4 ID that explains an ICRC difference. Its basis
// depends only on the packet length, so it keeps the last one it built: a
// stream of packets of one size (a run of MTU-sized packets) pays for
// Gaussian elimination once. The zero value is ready to use; it is not
// safe for concurrent use.
type IDSolver struct {
	after int  // bytes after the ID of the basis below
	built bool // the basis is for after
	basis [16]uint32
	pivot [16]uint32
	combo [16]uint16
	n     int
}

// Solve returns the ID x with crc(x) XOR crc(0) = d for a packet whose
// ICRC covers after bytes behind the IPv4 ID, and reports false if no ID
// gives d.
func (s *IDSolver) Solve(after int, d uint32) (uint16, bool) {
	if after < 0 {
		return 0, false
	}
	if !s.built || s.after != after {
		cols := idColumns(after)
		s.build(&cols)
		s.after, s.built = after, true
	}
	var x uint16
	for k := range s.n {
		if d&s.pivot[k] != 0 {
			d ^= s.basis[k]
			x ^= s.combo[k]
		}
	}
	return x, d == 0
}

// build reduces the columns to a basis over GF(2), bitwise: each basis
// vector is a column reduced against the earlier ones' pivots (their lowest
// set bit); combo records which columns it sums.
func (s *IDSolver) build(cols *[16]uint32) {
	s.n = 0
	for i, c := range cols {
		v, cb := c, uint16(1)<<i
		for k := range s.n {
			if v&s.pivot[k] != 0 {
				v ^= s.basis[k]
				cb ^= s.combo[k]
			}
		}
		if v == 0 {
			continue
		}
		s.basis[s.n], s.pivot[s.n], s.combo[s.n] = v, v&-v, cb
		s.n++
	}
}

// IDBytesAfter is how many bytes the ICRC covers after the IPv4 ID of a
// packet with IP and UDP headers of hdrLen bytes and a RoCE part (BTH to
// ICRC) of roceLen bytes: what IDSolver.Solve takes.
func IDBytesAfter(hdrLen, roceLen int) int { return hdrLen - 6 + roceLen - ICRCLen }

// CheckICRCAnyID reports whether some IPv4 identification makes the
// packet's ICRC match the IPv4 envelope e, whose ID field is ignored, and
// returns that ID. Since the 16 ID bits are solved for, only the other 16
// bits of the ICRC are checked: a corrupted packet passes with probability
// 2^-16. It returns false for an IPv6 envelope (IPv6 has no ID; use
// CheckICRC). It does not allocate.
func (p Packet) CheckICRCAnyID(e *Envelope) (id uint16, ok bool) {
	if !e.IsIPv4() || len(p.b) < BTHLen+ICRCLen {
		return 0, false
	}
	env := *e
	env.ID = 0
	var h [MaxEnvelopeLen]byte
	n := env.Put(h[:], p.Len())
	crc0, _ := ComputeICRC(h[:n], p.b[:len(p.b)-ICRCLen])
	d := crc0 ^ p.ICRC()
	if d == 0 {
		return 0, true
	}
	var s IDSolver
	return s.Solve(IDBytesAfter(n, len(p.b)), d)
}
