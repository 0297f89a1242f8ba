// Package icrcref is the test suites' own check of a captured RoCEv2
// packet, written from the specifications and not from wire/bth or
// wire/ibudp, so that a bug there cannot hide itself: the ICRC (IBTA
// RoCEv2 annex A17.3.3) over IPv4 and IPv6, and the UDP checksum IPv6
// requires (RFC 8200 section 8.1).
package icrcref

import (
	"encoding/binary"
	"hash/crc32"
)

// Of is the ICRC of a RoCEv2 packet whose IP header (IPv4 without options,
// or IPv6, told by the version) is ip and whose UDP header, RoCE part and
// ICRC are udpAndRoCE: CRC-32 over eight 0xFF bytes, the IP header with
// what routers may change set to ones (IPv4: TOS, TTL and header checksum;
// IPv6: traffic class, flow label and hop limit), the UDP header with its
// checksum set to ones, the BTH with its reserved byte 4 set to ones, and
// the rest of the packet up to the ICRC (crc32.ChecksumIEEE, which inverts
// its result). The packet carries it least significant byte first.
func Of(ip, udpAndRoCE []byte) uint32 {
	buf := make([]byte, 0, 8+len(ip)+len(udpAndRoCE))
	buf = append(buf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)
	h := append([]byte(nil), ip...)
	if h[0]>>4 == 6 {
		h[0] |= 0x0f                        // traffic class, high half
		h[1], h[2], h[3] = 0xff, 0xff, 0xff // traffic class low half, flow label
		h[7] = 0xff                         // hop limit
	} else {
		h[1] = 0xff               // TOS
		h[8] = 0xff               // TTL
		h[10], h[11] = 0xff, 0xff // header checksum
	}
	buf = append(buf, h...)
	u := append([]byte(nil), udpAndRoCE[:len(udpAndRoCE)-4]...)
	u[6], u[7] = 0xff, 0xff // UDP checksum
	u[8+4] = 0xff           // BTH reserved byte
	buf = append(buf, u...)
	return crc32.ChecksumIEEE(buf)
}

// OK reports whether the packet's ICRC, its last four bytes, is Of.
func OK(ip, udpAndRoCE []byte) bool {
	if len(udpAndRoCE) < 8+12+4 || len(ip) < 20 {
		return false
	}
	return binary.LittleEndian.Uint32(udpAndRoCE[len(udpAndRoCE)-4:]) == Of(ip, udpAndRoCE)
}

// UDP6OK reports whether the UDP checksum of the IPv6 datagram with header
// ip and UDP header and payload udp is right, or 0: none, as rxe sends it
// (RFC 6936 lets a tunnel's receiver accept that).
func UDP6OK(ip, udp []byte) bool {
	if binary.BigEndian.Uint16(udp[6:]) == 0 {
		return true
	}
	// The pseudo-header: addresses, UDP length, next header 17; then the
	// datagram, word by word (RFC 1071).
	var b []byte
	b = append(b, ip[8:40]...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(udp)))
	b = append(b, 0, 0, 0, 17)
	b = append(b, udp...)
	if len(b)%2 == 1 {
		b = append(b, 0)
	}
	var s uint32
	for i := 0; i < len(b); i += 2 {
		s += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	for s > 0xffff {
		s = s&0xffff + s>>16
	}
	return s == 0xffff
}
