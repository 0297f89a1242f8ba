package netif

import (
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// GID is a 128-bit InfiniBand global identifier. For RoCEv2 it is an IPv6
// address, or an IPv4 address mapped into IPv6 (::ffff:a.b.c.d).
type GID [16]byte

// GIDFromAddr returns the RoCEv2 GID of an IP address: an IPv6 address as it
// is, an IPv4 address mapped (::ffff:a.b.c.d).
func GIDFromAddr(a netip.Addr) GID {
	return GID(a.As16())
}

// Addr returns the IP address the GID stands for: IPv4 for a mapped GID,
// IPv6 otherwise (without zone).
func (g GID) Addr() netip.Addr { return netip.AddrFrom16(g).Unmap() }

// IsZero reports whether g is all zeros (an unused GID table entry).
func (g GID) IsZero() bool { return g == GID{} }

// String gives the GID as sysfs and show_gids do: eight groups of four hex
// digits, e.g. 0000:0000:0000:0000:0000:ffff:c612:0002.
func (g GID) String() string {
	var b [39]byte
	const hexd = "0123456789abcdef"
	j := 0
	for i := 0; i < 16; i += 2 {
		if i > 0 {
			b[j] = ':'
			j++
		}
		b[j], b[j+1], b[j+2], b[j+3] = hexd[g[i]>>4], hexd[g[i]&15], hexd[g[i+1]>>4], hexd[g[i+1]&15]
		j += 4
	}
	return string(b[:])
}

// ParseGID reads a GID in any of the forms tools print: the sysfs form
// (0000:...:c612:0002), any IPv6 text (::ffff:198.18.0.2, fe80::1), 32 hex
// digits as ibv_rc_pingpong sends them, or an IPv4 address (mapped).
func ParseGID(s string) (GID, error) {
	if len(s) == 32 && !strings.ContainsAny(s, ":.") {
		var g GID
		if _, err := hex.Decode(g[:], []byte(s)); err != nil {
			return GID{}, fmt.Errorf("netif: GID %q: %w", s, err)
		}
		return g, nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return GID{}, fmt.Errorf("netif: GID %q: not an IPv6/IPv4 address or 32 hex digits", s)
	}
	if a.Zone() != "" {
		return GID{}, fmt.Errorf("netif: GID %q: a GID has no zone", s)
	}
	return GIDFromAddr(a), nil
}

// MarshalText implements encoding.TextMarshaler with String's form.
func (g GID) MarshalText() ([]byte, error) { return []byte(g.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler with ParseGID.
func (g *GID) UnmarshalText(b []byte) error {
	v, err := ParseGID(string(b))
	if err != nil {
		return err
	}
	*g = v
	return nil
}

// DefaultGID is the GID ib_core gives every RoCE port at index 0: the IPv6
// link-local address fe80::/64 with the EUI-64 interface identifier of the
// port's MAC address. It reports false if mac is not a 6-byte MAC.
func DefaultGID(mac net.HardwareAddr) (GID, bool) {
	var g GID
	if len(mac) != 6 {
		return g, false
	}
	g[0], g[1] = 0xfe, 0x80
	g[8], g[9], g[10] = mac[0]^0x02, mac[1], mac[2]
	g[11], g[12] = 0xff, 0xfe
	g[13], g[14], g[15] = mac[3], mac[4], mac[5]
	return g, true
}

// GIDEntry is one entry of a port's GID table.
type GIDEntry struct {
	Index   int
	GID     GID
	Default bool   // the default GID (from the MAC), index 0
	Type    string // always "RoCE v2": rxe offers no RoCE v1 GIDs
}

// buildGIDTable lays out a GID table as ib_core does for rxe (a RoCEv2-only
// port): the default GID at index 0 (none without a 6-byte MAC, as on lo),
// then one entry per IPv4 address in the
// interface's order, then one per IPv6 address, skipping any GID already in
// the table (the EUI-64 link-local address is the default GID).
func buildGIDTable(mac net.HardwareAddr, v4, v6 []netip.Addr) []GIDEntry {
	var t []GIDEntry
	add := func(g GID, def bool) {
		for _, e := range t {
			if e.GID == g {
				return
			}
		}
		t = append(t, GIDEntry{Index: len(t), GID: g, Default: def, Type: "RoCE v2"})
	}
	if g, ok := DefaultGID(mac); ok {
		add(g, true)
	}
	for _, a := range v4 {
		add(GIDFromAddr(a), false)
	}
	for _, a := range v6 {
		add(GIDFromAddr(a), false)
	}
	return t
}
