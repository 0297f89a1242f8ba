package icrcref

import (
	"encoding/binary"
	"net/netip"
	"testing"
)

// The IPv6 ICRC ignores what routers may change (traffic class, flow
// label, hop limit, the UDP checksum) and nothing else of the headers.
func TestIPv6Mask(t *testing.T) {
	ip := make([]byte, 40)
	ip[0], ip[4], ip[5], ip[6], ip[7] = 0x60, 0, 24, 17, 64
	copy(ip[8:24], netip.MustParseAddr("2001:db8::1").AsSlice())
	copy(ip[24:40], netip.MustParseAddr("2001:db8::2").AsSlice())
	pkt := make([]byte, 8+12+4)
	pkt[1], pkt[3], pkt[5] = 0xc0, 0xb7, 24
	pkt[8] = 0x11 // BTH opcode: ACKNOWLEDGE
	sum := Of(ip, pkt)
	for _, i := range []int{0, 1, 2, 3, 7} {
		ip[i] ^= 0x0f
		if i > 0 {
			ip[i] ^= 0xf0
		}
		if Of(ip, pkt) != sum {
			t.Errorf("changing masked byte %d of the IPv6 header changes the ICRC", i)
		}
	}
	pkt[6] ^= 0xff
	if Of(ip, pkt) != sum {
		t.Error("the UDP checksum changes the ICRC")
	}
	for _, i := range []int{4, 5, 6, 8, 23, 39} {
		ip[i] ^= 1
		if Of(ip, pkt) == sum {
			t.Errorf("byte %d of the IPv6 header is not covered", i)
		}
		ip[i] ^= 1
	}
}

// A checksum worked by hand: the pseudo-header and datagram of an 8-byte
// UDP payload sum, with the checksum in, to 0xffff; 0 means none; one bit
// off fails.
func TestUDP6OK(t *testing.T) {
	ip := make([]byte, 40)
	ip[0], ip[6] = 0x60, 17
	ip[8], ip[23] = 0x20, 1  // 2000::1
	ip[24], ip[39] = 0x20, 2 // 2000::2
	udp := []byte{0xc0, 0x00, 0x12, 0xb7, 0, 16, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8}
	if !UDP6OK(ip, udp) {
		t.Fatal("checksum 0 refused")
	}
	// 0x2000+0x0001+0x2000+0x0002 + 16 + 17 = 0x4024; the UDP header
	// 0xc000+0x12b7+0x0010 = 0xd2c7; the payload 0x0102+0x0304+0x0506+
	// 0x0708 = 0x1014: 0x1_22ff, folded 0x2300.
	binary.BigEndian.PutUint16(udp[6:], ^uint16(0x2300))
	if !UDP6OK(ip, udp) {
		t.Fatalf("checksum %#04x refused", ^uint16(0x2300))
	}
	udp[9] ^= 1
	if UDP6OK(ip, udp) {
		t.Fatal("a flipped bit passes")
	}
}
