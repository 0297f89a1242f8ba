package verbs

import (
	"net/netip"

	"github.com/rnicd/rnicd/wire/netif"
)

// GID is a port's global identifier (union ibv_gid): for RoCEv2 an IP
// address, an IPv4 address mapped (::ffff:a.b.c.d). It goes into AH.DGID
// as it is.
type GID [16]byte

// GIDFromAddr is the RoCEv2 GID of an IP address.
func GIDFromAddr(a netip.Addr) GID { return GID(netif.GIDFromAddr(a)) }

// Addr is the IP address the GID stands for.
func (g GID) Addr() netip.Addr { return netif.GID(g).Addr() }

// IsZero reports whether g is all zeros (no GID).
func (g GID) IsZero() bool { return g == GID{} }

// String gives the GID as sysfs and show_gids do, e.g.
// 0000:0000:0000:0000:0000:ffff:c612:0002.
func (g GID) String() string { return netif.GID(g).String() }

// MarshalText is String, for JSON.
func (g GID) MarshalText() ([]byte, error) { return []byte(g.String()), nil }
