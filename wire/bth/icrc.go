package bth

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"net/netip"
)

// UDPPort is the IANA port of RoCEv2.
const UDPPort = 4791

// Envelope is the IP and UDP header around a RoCEv2 packet. The ICRC covers
// some of its fields (addresses, lengths, ports, the IPv4 ID and flags), so a
// sender needs it to seal a packet and a receiver to verify one.
type Envelope struct {
	Src, Dst         netip.Addr // both IPv4 (or IPv4-mapped) or both IPv6
	SrcPort, DstPort uint16
	TOS              uint8  // IPv4 TOS / IPv6 traffic class: DSCP and ECN
	TTL              uint8  // IPv4 TTL / IPv6 hop limit
	ID               uint16 // IPv4 identification; 0 for a kernel UDP socket with DF
	FlowLabel        uint32 // IPv6 only
}

// Header lengths of the envelope.
const (
	IPv4HeaderLen = 20
	IPv6HeaderLen = 40
	UDPHeaderLen  = 8
	// MaxEnvelopeLen is the longest IP (with options) plus UDP header.
	MaxEnvelopeLen = 60 + UDPHeaderLen
)

// IsIPv4 reports whether the envelope is IPv4 (IPv4-mapped addresses count).
func (e *Envelope) IsIPv4() bool { return e.Src.Unmap().Is4() }

// Len is the length of the IP and UDP headers Put writes.
func (e *Envelope) Len() int {
	if e.IsIPv4() {
		return IPv4HeaderLen + UDPHeaderLen
	}
	return IPv6HeaderLen + UDPHeaderLen
}

// Put writes an IP header (IPv4 with DF, no options, or IPv6) and a UDP
// header with checksum 0 for a UDP payload of roceLen bytes into b, which
// must hold e.Len() bytes. It returns the number of bytes written.
func (e *Envelope) Put(b []byte, roceLen int) int {
	udpLen := UDPHeaderLen + roceLen
	var n int
	if e.IsIPv4() {
		_ = b[IPv4HeaderLen+UDPHeaderLen-1]
		b[0] = 0x45
		b[1] = e.TOS
		binary.BigEndian.PutUint16(b[2:], uint16(IPv4HeaderLen+udpLen))
		binary.BigEndian.PutUint16(b[4:], e.ID)
		binary.BigEndian.PutUint16(b[6:], 0x4000) // DF, fragment offset 0
		b[8] = e.TTL
		b[9] = 17 // UDP
		b[10], b[11] = 0, 0
		src, dst := e.Src.Unmap().As4(), e.Dst.Unmap().As4()
		copy(b[12:16], src[:])
		copy(b[16:20], dst[:])
		binary.BigEndian.PutUint16(b[10:], ipv4Checksum(b[:IPv4HeaderLen]))
		n = IPv4HeaderLen
	} else {
		_ = b[IPv6HeaderLen+UDPHeaderLen-1]
		binary.BigEndian.PutUint32(b[0:], 6<<28|uint32(e.TOS)<<20|e.FlowLabel&0xfffff)
		binary.BigEndian.PutUint16(b[4:], uint16(udpLen))
		b[6] = 17
		b[7] = e.TTL
		src, dst := e.Src.As16(), e.Dst.As16()
		copy(b[8:24], src[:])
		copy(b[24:40], dst[:])
		n = IPv6HeaderLen
	}
	u := b[n : n+UDPHeaderLen]
	binary.BigEndian.PutUint16(u[0:], e.SrcPort)
	binary.BigEndian.PutUint16(u[2:], e.DstPort)
	binary.BigEndian.PutUint16(u[4:], uint16(udpLen))
	u[6], u[7] = 0, 0
	return n + UDPHeaderLen
}

func ipv4Checksum(h []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(h); i += 2 {
		sum += uint32(h[i])<<8 | uint32(h[i+1])
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// icrcSeed is the CRC state after the eight 0xFF bytes that stand in for the
// LRH of native InfiniBand (RoCEv2 annex A17.3.3).
var icrcSeed = crc32.Update(0, crc32.IEEETable, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})

var errEnvelope = errors.New("bth: ICRC needs an IPv4 or IPv6 header followed by a UDP header")

// ComputeICRC returns the ICRC of a RoCEv2 packet: hdr is its IP and UDP
// headers as on the wire, roce its BTH through the pad (without the ICRC).
// The variant fields (IPv4 TOS, TTL and checksum; IPv6 traffic class, flow
// label and hop limit; the UDP checksum; BTH byte 4) are taken as all ones.
// The value is stored least significant byte first (Packet.SetICRC).
func ComputeICRC(hdr, roce []byte) (uint32, error) {
	// m is the masked copy of the headers. It stays on the stack because
	// it is only ever fed to crcBytes, never to crc32.Update, whose calls
	// through function values make the compiler move any array passed to it
	// to the heap: one allocation per packet on the NIC's data path.
	var m [MaxEnvelopeLen + BTHLen]byte
	if len(hdr) < 1 || len(roce) < BTHLen {
		return 0, errEnvelope
	}
	var ipLen int
	switch hdr[0] >> 4 {
	case 4:
		ipLen = int(hdr[0]&0x0f) * 4
		if ipLen < IPv4HeaderLen || len(hdr) != ipLen+UDPHeaderLen {
			return 0, errEnvelope
		}
		copy(m[:], hdr)
		m[1] = 0xff               // TOS
		m[8] = 0xff               // TTL
		m[10], m[11] = 0xff, 0xff // header checksum
	case 6:
		ipLen = IPv6HeaderLen
		if len(hdr) != ipLen+UDPHeaderLen {
			return 0, errEnvelope
		}
		copy(m[:], hdr)
		m[0] |= 0x0f // traffic class and flow label
		m[1], m[2], m[3] = 0xff, 0xff, 0xff
		m[7] = 0xff // hop limit
	default:
		return 0, errEnvelope
	}
	m[ipLen+6], m[ipLen+7] = 0xff, 0xff // UDP checksum
	n := copy(m[len(hdr):], roce[:BTHLen])
	m[len(hdr)+4] = 0xff // BTH FECN, BECN and reserved bits
	crc := crcBytes(icrcSeed, m[:len(hdr)+n])
	// The bulk goes through crc32.Update, which uses the CPU's carry-less
	// multiply; roce is the caller's buffer, already on the heap.
	crc = crc32.Update(crc, crc32.IEEETable, roce[BTHLen:])
	return crc, nil
}

// crcBytes is crc32.Update with the IEEE table for short inputs, one table
// lookup per byte. Unlike crc32.Update it lets b stay on the caller's stack.
func crcBytes(crc uint32, b []byte) uint32 {
	tab := crc32.IEEETable
	crc = ^crc
	for _, v := range b {
		crc = tab[byte(crc)^v] ^ crc>>8
	}
	return ^crc
}

// Seal computes the packet's ICRC for envelope e and stores it.
func (p Packet) Seal(e *Envelope) {
	var h [MaxEnvelopeLen]byte
	n := e.Put(h[:], p.Len())
	// Put always writes a well-formed header, so this cannot fail.
	crc, _ := ComputeICRC(h[:n], p.b[:len(p.b)-ICRCLen])
	p.SetICRC(crc)
}

// CheckICRC reports whether the packet's ICRC matches envelope e.
func (p Packet) CheckICRC(e *Envelope) bool {
	var h [MaxEnvelopeLen]byte
	n := e.Put(h[:], p.Len())
	crc, _ := ComputeICRC(h[:n], p.b[:len(p.b)-ICRCLen])
	return crc == p.ICRC()
}

// IPPacket is a RoCEv2 packet with its IP and UDP headers, as an AF_PACKET
// socket or a capture sees it after the link-layer header.
type IPPacket struct {
	Envelope Envelope
	Packet   Packet
	Hdr      []byte // the IP and UDP headers as received
}

// ParseIP decodes an IP datagram carrying a RoCEv2 packet: it checks the IP
// and UDP headers (version, lengths, protocol, destination port 4791), then
// the transport headers with Parse, then the ICRC. A datagram whose lengths
// disagree, that is fragmented or whose ICRC is wrong is an error, always a
// *DecodeError. Bytes after the IP total length (Ethernet padding) are
// ignored. ParseIP does not allocate on success.
func ParseIP(b []byte) (IPPacket, error) {
	var ip IPPacket
	if len(b) < 1 {
		return ip, &DecodeError{Reason: ReasonIPShort, Need: IPv4HeaderLen + UDPHeaderLen}
	}
	var ipLen, total int
	e := &ip.Envelope
	switch v := b[0] >> 4; v {
	case 4:
		if len(b) < IPv4HeaderLen+UDPHeaderLen {
			return ip, &DecodeError{Reason: ReasonIPShort, Len: len(b), Need: IPv4HeaderLen + UDPHeaderLen}
		}
		ipLen = int(b[0]&0x0f) * 4
		total = int(binary.BigEndian.Uint16(b[2:]))
		if ipLen < IPv4HeaderLen || total < ipLen+UDPHeaderLen || total > len(b) {
			return ip, &DecodeError{Reason: ReasonIPLength, Len: len(b), Need: total}
		}
		if b[9] != 17 {
			return ip, &DecodeError{Reason: ReasonNotUDP, Need: int(b[9])}
		}
		if ff := binary.BigEndian.Uint16(b[6:]); ff&0x3fff != 0 {
			return ip, &DecodeError{Reason: ReasonFragmented, Need: int(ff)}
		}
		e.TOS, e.TTL, e.ID = b[1], b[8], binary.BigEndian.Uint16(b[4:])
		e.Src = netip.AddrFrom4([4]byte(b[12:16]))
		e.Dst = netip.AddrFrom4([4]byte(b[16:20]))
	case 6:
		ipLen = IPv6HeaderLen
		if len(b) < ipLen+UDPHeaderLen {
			return ip, &DecodeError{Reason: ReasonIPShort, Len: len(b), Need: ipLen + UDPHeaderLen}
		}
		total = ipLen + int(binary.BigEndian.Uint16(b[4:]))
		if b[6] != 17 {
			return ip, &DecodeError{Reason: ReasonNotUDP, Need: int(b[6])}
		}
		if total < ipLen+UDPHeaderLen || total > len(b) {
			return ip, &DecodeError{Reason: ReasonIPLength, Len: len(b), Need: total}
		}
		vtf := binary.BigEndian.Uint32(b[0:])
		e.TOS, e.FlowLabel, e.TTL = uint8(vtf>>20), vtf&0xfffff, b[7]
		e.Src = netip.AddrFrom16([16]byte(b[8:24]))
		e.Dst = netip.AddrFrom16([16]byte(b[24:40]))
	default:
		return ip, &DecodeError{Reason: ReasonIPVersion, Len: len(b), Need: int(v)}
	}
	u := b[ipLen : ipLen+UDPHeaderLen]
	e.SrcPort = binary.BigEndian.Uint16(u[0:])
	e.DstPort = binary.BigEndian.Uint16(u[2:])
	if ul := int(binary.BigEndian.Uint16(u[4:])); ul != total-ipLen {
		return ip, &DecodeError{Reason: ReasonUDPLength, Len: total - ipLen, Need: ul}
	}
	if e.DstPort != UDPPort {
		return ip, &DecodeError{Reason: ReasonNotRoCEPort, Need: int(e.DstPort)}
	}
	ip.Hdr = b[:ipLen+UDPHeaderLen]
	p, err := Parse(b[ipLen+UDPHeaderLen : total])
	if err != nil {
		return ip, err
	}
	ip.Packet = p
	// Hdr is well formed by now, so ComputeICRC cannot fail.
	crc, _ := ComputeICRC(ip.Hdr, p.b[:len(p.b)-ICRCLen])
	if crc != p.ICRC() {
		return ip, &DecodeError{Reason: ReasonBadICRC, Opcode: p.op, Len: len(p.b)}
	}
	return ip, nil
}
