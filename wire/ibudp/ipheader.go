package ibudp

import (
	"encoding/binary"
	"net/netip"

	"github.com/rnicd/rnicd/wire/bth"
)

// ipHeader is what parseIPHeader learns from a datagram's IP and UDP
// headers.
type ipHeader struct {
	env    bth.Envelope
	hdrLen int // IP header (with options) and UDP header
	end    int // end of the IP datagram; bytes after it are link padding
}

// parseIPHeader checks the IP and UDP headers of an IP datagram b that
// should be a RoCEv2 packet to local, UDP port port: the version, lengths
// (IP total and UDP, which must agree), the IPv4 header checksum, no
// fragmentation, UDP as protocol (no IPv6 extension headers), the
// destination address and port. The kernel did none of this for an
// AF_PACKET socket.
func parseIPHeader(b []byte, local netip.Addr, port uint16) (ipHeader, bool) {
	var h ipHeader
	e := &h.env
	var ipLen, total int
	switch {
	case local.Is4():
		if len(b) < bth.IPv4HeaderLen || b[0]>>4 != 4 {
			return h, false
		}
		ipLen = int(b[0]&0x0f) * 4
		total = int(binary.BigEndian.Uint16(b[2:]))
		if ipLen < bth.IPv4HeaderLen || total < ipLen+bth.UDPHeaderLen || total > len(b) {
			return h, false
		}
		if ipChecksum(b[:ipLen]) != 0 {
			return h, false
		}
		if b[9] != 17 || binary.BigEndian.Uint16(b[6:])&0x3fff != 0 {
			return h, false
		}
		if netip.AddrFrom4([4]byte(b[16:20])) != local {
			return h, false
		}
		e.TOS, e.TTL, e.ID = b[1], b[8], binary.BigEndian.Uint16(b[4:])
		e.Src = netip.AddrFrom4([4]byte(b[12:16]))
		e.Dst = local
	case local.Is6():
		ipLen = bth.IPv6HeaderLen
		if len(b) < ipLen+bth.UDPHeaderLen || b[0]>>4 != 6 || b[6] != 17 {
			return h, false
		}
		total = ipLen + int(binary.BigEndian.Uint16(b[4:]))
		if total < ipLen+bth.UDPHeaderLen || total > len(b) {
			return h, false
		}
		if netip.AddrFrom16([16]byte(b[24:40])) != local.WithZone("") {
			return h, false
		}
		vtf := binary.BigEndian.Uint32(b)
		e.TOS, e.FlowLabel, e.TTL = uint8(vtf>>20), vtf&0xfffff, b[7]
		e.Src = netip.AddrFrom16([16]byte(b[8:24]))
		e.Dst = local.WithZone("")
	default:
		return h, false
	}
	u := b[ipLen : ipLen+bth.UDPHeaderLen]
	e.SrcPort = binary.BigEndian.Uint16(u[0:])
	e.DstPort = binary.BigEndian.Uint16(u[2:])
	if e.DstPort != port || int(binary.BigEndian.Uint16(u[4:])) != total-ipLen {
		return h, false
	}
	h.hdrLen, h.end = ipLen+bth.UDPHeaderLen, total
	return h, true
}

// ipChecksum is the Internet checksum of b; over an IPv4 header with its
// checksum field filled in it is 0.
func ipChecksum(b []byte) uint16 {
	var sum uint32
	for len(b) >= 2 {
		sum += uint32(b[0])<<8 | uint32(b[1])
		b = b[2:]
	}
	if len(b) == 1 {
		sum += uint32(b[0]) << 8
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}
