package rdmacm

import (
	"net/netip"
	"testing"
)

// TestRoute: an unbound ID leaves from the rnicd that owns dst, else from
// the one that owns the source address the routing table gives for dst
// (the subnet's primary address, not the closest to dst), else, where no
// rnicd owns that source, from the one closest to dst.
func TestRoute(t *testing.T) {
	a := netip.MustParseAddr
	ch := &EventChannel{devs: []*device{{addr: a("198.18.5.1")}, {addr: a("198.18.5.3")}, {addr: a("198.18.9.1")}}}
	table := map[netip.Addr]netip.Addr{
		a("198.18.5.2"):   a("198.18.5.1"), // .3 shares 31 bits with .2, .1 only 30
		a("198.18.6.7"):   a("198.18.9.1"), // a gateway's route
		a("198.18.9.200"): a("10.1.2.3"),   // a source no rnicd owns
	}
	var asked []netip.Addr
	ch.source = func(dst netip.Addr) (netip.Addr, bool) {
		asked = append(asked, dst)
		src, ok := table[dst]
		return src, ok
	}
	for _, c := range []struct{ dst, want string }{
		{"198.18.5.3", "198.18.5.3"},        // owned: the loopback route
		{"::ffff:198.18.5.3", "198.18.5.3"}, // IPv4-mapped, as rdma_cm's GIDs
		{"198.18.5.2", "198.18.5.1"},        // the routing table's source
		{"198.18.6.7", "198.18.9.1"},        // even far from dst
		{"198.18.9.200", "198.18.9.1"},      // nobody's source: the closest (24 bits)
		{"198.18.200.1", "198.18.5.1"},      // no route: the closest, the first of equals
		{"::ffff:198.18.5.2", "198.18.5.1"}, // mapped, routed
	} {
		if got := ch.route(a(c.dst)).addr; got != a(c.want) {
			t.Errorf("route(%s) = %s, want %s", c.dst, got, c.want)
		}
	}
	if len(asked) != 5 || asked[0] != a("198.18.5.2") || asked[4] != a("198.18.5.2") {
		t.Errorf("the routing table was asked for %v; want the five unowned destinations, unmapped", asked)
	}
}

// TestKernelSource: the routing table's answer for a loopback peer is
// the loopback route's source.
func TestKernelSource(t *testing.T) {
	src, ok := kernelSource(netip.MustParseAddr("127.0.0.1"))
	if !ok || src != netip.MustParseAddr("127.0.0.1") {
		t.Errorf("kernelSource(127.0.0.1) = %v, %v; want 127.0.0.1", src, ok)
	}
}
