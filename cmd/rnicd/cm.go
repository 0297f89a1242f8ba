package main

import (
	"encoding/binary"
	"net"
	"net/netip"
)

// caGUID is the node's CA GUID the CM agent sends in REQ and REP: the
// EUI-64 of the MAC address of the interface that holds addr, as rxe
// derives its node GUID (addrconf_addr_eui48: FF:FE in the middle, the
// universal/local bit flipped). A port without a MAC (loopback) gets a
// locally administered GUID made of its IPv4 or last 4 IPv6 bytes, so
// two daemons on one host still differ.
func caGUID(addr netip.Addr) uint64 {
	if mac := macOf(addr); len(mac) == 6 {
		eui := [8]byte{mac[0] ^ 0x02, mac[1], mac[2], 0xff, 0xfe, mac[3], mac[4], mac[5]}
		return binary.BigEndian.Uint64(eui[:])
	}
	a := addr.As16()
	return 0x0200_00ff_0000_0000 | uint64(binary.BigEndian.Uint32(a[12:]))
}

// macOf returns the hardware address of the interface holding addr.
func macOf(addr netip.Addr) net.HardwareAddr {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil
	}
	for _, ifc := range ifs {
		as, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range as {
			if n, ok := a.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap() == addr.Unmap() {
					return ifc.HardwareAddr
				}
			}
		}
	}
	return nil
}
