package perftest

import (
	"net/netip"
	"testing"

	"github.com/rnicd/rnicd/verbs"
)

// grhOf is the GRH area of a UD receive as rxe and rnicd write it: an
// IPv4 header in its last 20 bytes, or an IPv6 header.
func grhOf(src netip.Addr, tc uint8, flow uint32) []byte {
	g := make([]byte, udAddition)
	if src.Is4() {
		h := g[20:]
		h[0], h[1], h[8], h[9] = 0x45, tc, 64, 17
		a := src.As4()
		copy(h[12:16], a[:])
		return g
	}
	g[0], g[1] = 6<<4|tc>>4, tc<<4|uint8(flow>>16)&0xf
	g[2], g[3] = uint8(flow>>8), uint8(flow)
	g[6], g[7] = 17, 64
	a := src.As16()
	copy(g[8:24], a[:])
	return g
}

// The server's address handle back to the client (ibv_init_ah_from_wc):
// the GRH's source as DGID, IPv4-mapped for IPv4, its traffic class and
// IPv6 flow label, hop limit 0xff, the given source GID index; a GRH area
// that holds neither header is refused.
func TestAHFromGRH(t *testing.T) {
	for _, c := range []struct {
		src  string
		tc   uint8
		flow uint32
		want verbs.AH
	}{
		{"198.18.0.2", 0x0a, 0, verbs.AH{DGID: netip.MustParseAddr("::ffff:198.18.0.2").As16(), SGIDIndex: 1, HopLimit: 0xff, TrafficClass: 0x0a}},
		{"2001:db8::2", 0xb8, 0x12345, verbs.AH{DGID: netip.MustParseAddr("2001:db8::2").As16(), SGIDIndex: 1, HopLimit: 0xff,
			TrafficClass: 0xb8, FlowLabel: 0x12345}},
		// An IPv6 source whose byte 12 looks like an IPv4 version nibble.
		{"2001:db8::4500:0", 0, 0, verbs.AH{DGID: netip.MustParseAddr("2001:db8::4500:0").As16(), SGIDIndex: 1, HopLimit: 0xff}},
	} {
		got, err := ahFromGRH(grhOf(netip.MustParseAddr(c.src), c.tc, c.flow), 1)
		if err != nil || got != c.want {
			t.Errorf("%s: %+v, %v; want %+v", c.src, got, err, c.want)
		}
	}
	if _, err := ahFromGRH(make([]byte, udAddition), 1); err == nil {
		t.Error("a zero GRH area gave an address handle")
	}
}

// FuzzAHFromGRH: the GRH area is the client's datagram, any 40 bytes:
// an address handle or an error, never a panic; an IPv4 one is
// IPv4-mapped.
func FuzzAHFromGRH(f *testing.F) {
	f.Add(grhOf(netip.MustParseAddr("198.18.0.2"), 0, 0))
	f.Add(grhOf(netip.MustParseAddr("2001:db8::2"), 3, 7))
	f.Fuzz(func(t *testing.T, b []byte) {
		g := make([]byte, udAddition)
		copy(g, b)
		ah, err := ahFromGRH(g, 0)
		if err == nil && g[0]>>4 != 6 && !ah.Addr().Is4() {
			t.Fatalf("IPv4 GRH gave %v", ah.Addr())
		}
	})
}
