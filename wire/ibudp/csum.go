package ibudp

import (
	"encoding/binary"
	"math/bits"

	"github.com/rnicd/rnicd/wire/bth"
)

// The UDP checksum over IPv6 (RFC 8200 section 8.1): IPv4 lets a sender
// leave it 0, IPv6 does not, except for tunnels that opt in (RFC 6935,
// 6936), which is what rxe does: it sends every RoCEv2 packet with UDP
// checksum 0, over IPv6 too, and its tunnel socket accepts 0. Any other
// receiver (a plain UDP socket, a middlebox, a NIC's checksum offload)
// drops such an IPv6 datagram. So:
//
//   - ModeUDP: the kernel computes it on every IPv6 datagram (the port
//     never sets UDP_NO_CHECK6_TX), and checks any nonzero one on receive;
//     UDP_NO_CHECK6_RX makes the socket take rxe's zeros.
//   - ModePacket: the port writes the header, so it computes the checksum
//     of every IPv6 packet it sends, after the ICRC (the checksum covers
//     the ICRC; the ICRC masks the checksum field), and checks a nonzero one
//     on receive, as the kernel would have before the packet reached a
//     socket: a packet rxe or Linux would drop for it is dropped here too
//     (Stats.RxUDPChecksum), so that two rnicd talking in ModePacket catch a
//     checksum rxe would refuse. A zero checksum is taken, as rxe sends it.
//
// IPv4 datagrams go with checksum 0 as rxe's do (SO_NO_CHECK), except GSO
// runs, whose checksum the offload computes.

// onesSum adds b, read as big-endian 16-bit words, to the ones' complement
// sum s, eight bytes at a time: the end-around carry makes a 64-bit sum
// fold to the same 16 bits (RFC 1071 section 2).
func onesSum(s uint64, b []byte) uint64 {
	var c uint64
	for len(b) >= 8 {
		s, c = bits.Add64(s, binary.BigEndian.Uint64(b), c)
		b = b[8:]
	}
	var tail uint64
	for i, x := range b {
		tail |= uint64(x) << (56 - 8*i)
	}
	s, c = bits.Add64(s, tail, c)
	return endAround(s, c)
}

// endAround adds the carry c back into s (once more if that carries: then
// s is 0 and cannot carry again).
func endAround(s, c uint64) uint64 {
	s, c = bits.Add64(s, c, 0)
	return s + c
}

// fold reduces a 64-bit ones' complement sum to 16 bits.
func fold(s uint64) uint16 {
	s = s>>32 + s&0xffffffff
	s = s>>32 + s&0xffffffff
	s = s>>16 + s&0xffff
	s = s>>16 + s&0xffff
	return uint16(s)
}

// udp6Sum is the ones' complement sum of the IPv6 pseudo-header (source,
// destination, UDP length, next header 17), the UDP header and payload of
// the datagram whose IPv6 and UDP headers are hdr (bth.IPv6HeaderLen +
// bth.UDPHeaderLen bytes) and whose UDP payload is roce.
func udp6Sum(hdr, roce []byte) uint16 {
	s := onesSum(0, hdr[8:40]) // addresses
	s = onesSum(s, hdr[bth.IPv6HeaderLen:bth.IPv6HeaderLen+bth.UDPHeaderLen])
	s = onesSum(s, roce)
	// UDP length and next header, as two 32-bit words.
	return fold(endAround(bits.Add64(s, uint64(bth.UDPHeaderLen+len(roce))<<32|17, 0)))
}

// putUDP6Checksum fills in the UDP checksum of an IPv6 datagram whose
// checksum field is 0: the complement of the sum, 0xffff for a sum of
// 0xffff (0 would mean no checksum).
func putUDP6Checksum(hdr, roce []byte) {
	sum := ^udp6Sum(hdr, roce)
	if sum == 0 {
		sum = 0xffff
	}
	binary.BigEndian.PutUint16(hdr[bth.IPv6HeaderLen+6:], sum)
}

// udp6ChecksumOK reports whether a received IPv6 datagram's UDP checksum is
// right or 0 (none, as rxe sends).
func udp6ChecksumOK(hdr, roce []byte) bool {
	return binary.BigEndian.Uint16(hdr[bth.IPv6HeaderLen+6:]) == 0 || udp6Sum(hdr, roce) == 0xffff
}
