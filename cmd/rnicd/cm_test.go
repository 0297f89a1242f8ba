package main

import (
	"net/netip"
	"testing"
)

// Loopback has no MAC: the GUID is built from the address, so two
// daemons on 127.0.0.1 and 127.0.0.2 send different CA GUIDs.
func TestCAGUIDLoopback(t *testing.T) {
	for _, tc := range []struct {
		addr string
		want uint64
	}{{"127.0.0.1", 0x0200_00ff_7f00_0001}, {"127.0.0.2", 0x0200_00ff_7f00_0002}} {
		if got := caGUID(netip.MustParseAddr(tc.addr)); got != tc.want {
			t.Errorf("caGUID(%s) = %#x, want %#x", tc.addr, got, tc.want)
		}
	}
}
