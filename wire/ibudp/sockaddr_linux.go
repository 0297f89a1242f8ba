package ibudp

import (
	"encoding/binary"
	"net/netip"

	"golang.org/x/sys/unix"
)

// Socket addresses are written and read as bytes, so that a batch's names
// live in one flat buffer and every length the kernel reports is checked.

const (
	sizeofSockaddrInet4 = unix.SizeofSockaddrInet4 // 16
	sizeofSockaddrInet6 = unix.SizeofSockaddrInet6 // 28
	sizeofSockaddrLL    = unix.SizeofSockaddrLinklayer
	nameLen             = 32 // room for any of them, a multiple of 8
)

// putSockaddr writes a sockaddr_in (a IPv4) or sockaddr_in6 into b and
// returns its length, or 0 if b is too short.
func putSockaddr(b []byte, a netip.Addr, port uint16, scope uint32) int {
	if a.Is4() {
		if len(b) < sizeofSockaddrInet4 {
			return 0
		}
		clear(b[:sizeofSockaddrInet4])
		binary.NativeEndian.PutUint16(b[0:], unix.AF_INET)
		binary.BigEndian.PutUint16(b[2:], port)
		a4 := a.As4()
		copy(b[4:8], a4[:])
		return sizeofSockaddrInet4
	}
	if len(b) < sizeofSockaddrInet6 {
		return 0
	}
	clear(b[:sizeofSockaddrInet6])
	binary.NativeEndian.PutUint16(b[0:], unix.AF_INET6)
	binary.BigEndian.PutUint16(b[2:], port)
	a16 := a.As16()
	copy(b[8:24], a16[:])
	binary.NativeEndian.PutUint32(b[24:], scope)
	return sizeofSockaddrInet6
}

// parseSockaddr reads the address and port of a sockaddr_in or
// sockaddr_in6. The zone of a link-local IPv6 address is dropped.
func parseSockaddr(b []byte) (netip.Addr, uint16, bool) {
	if len(b) < 2 {
		return netip.Addr{}, 0, false
	}
	switch binary.NativeEndian.Uint16(b) {
	case unix.AF_INET:
		if len(b) < 8 {
			break
		}
		return netip.AddrFrom4([4]byte(b[4:8])), binary.BigEndian.Uint16(b[2:]), true
	case unix.AF_INET6:
		if len(b) < 24 {
			break
		}
		return netip.AddrFrom16([16]byte(b[8:24])), binary.BigEndian.Uint16(b[2:]), true
	}
	return netip.Addr{}, 0, false
}

// parsePktType reads sll_pkttype from a sockaddr_ll (PACKET_HOST,
// PACKET_OUTGOING, ...).
func parsePktType(b []byte) (uint8, bool) {
	// sll_family(2) sll_protocol(2) sll_ifindex(4) sll_hatype(2) sll_pkttype(1)
	if len(b) < 11 || binary.NativeEndian.Uint16(b) != unix.AF_PACKET {
		return 0, false
	}
	return b[10], true
}
