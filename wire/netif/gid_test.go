//go:build linux

package netif

import (
	"net"
	"net/netip"
	"testing"
)

func TestActiveMTU(t *testing.T) {
	for _, c := range []struct{ ifMTU, want int }{
		{65536, 4096}, {9000, 4096}, {4176, 4096}, {4175, 2048}, {1500, 1024},
		{1280, 1024}, {1104, 1024}, {1103, 512}, {600, 512}, {576, 256}, {68, 256}, {0, 256},
	} {
		if got := ActiveMTU(c.ifMTU); got != c.want {
			t.Errorf("ActiveMTU(%d) = %d, want %d", c.ifMTU, got, c.want)
		}
	}
	for m, e := range map[int]int{256: 1, 512: 2, 1024: 3, 2048: 4, 4096: 5, 1500: 0} {
		if MTUEnum(m) != e {
			t.Errorf("MTUEnum(%d) = %d, want %d", m, MTUEnum(m), e)
		}
	}
}

func TestGIDText(t *testing.T) {
	g := GIDFromAddr(addr("198.18.0.2"))
	if s := g.String(); s != "0000:0000:0000:0000:0000:ffff:c612:0002" {
		t.Fatalf("String = %s", s)
	}
	if g.Addr() != addr("198.18.0.2") {
		t.Fatalf("Addr = %v", g.Addr())
	}
	for _, s := range []string{
		"0000:0000:0000:0000:0000:ffff:c612:0002", "::ffff:198.18.0.2",
		"00000000000000000000ffffc6120002", "198.18.0.2",
	} {
		got, err := ParseGID(s)
		if err != nil || got != g {
			t.Errorf("ParseGID(%q) = %v, %v", s, got, err)
		}
	}
	for _, s := range []string{"", "fe80::1%eth0", "0000000000000000000000000000000g", "1:2:3"} {
		if _, err := ParseGID(s); err == nil {
			t.Errorf("ParseGID(%q) succeeded", s)
		}
	}
	var u GID
	if err := u.UnmarshalText([]byte("fe80::5054:ff:fe12:3456")); err != nil || u.String() != "fe80:0000:0000:0000:5054:00ff:fe12:3456" {
		t.Fatalf("UnmarshalText: %v %v", u, err)
	}
}

func TestDefaultGID(t *testing.T) {
	mac, _ := net.ParseMAC("52:54:00:12:34:56")
	g, ok := DefaultGID(mac)
	if !ok || g.Addr() != addr("fe80::5054:ff:fe12:3456") {
		t.Fatalf("DefaultGID = %v %v", g.Addr(), ok)
	}
	if _, ok := DefaultGID(mac[:4]); ok {
		t.Fatal("DefaultGID accepted a 4-byte address")
	}
}

// The table is laid out as ib_core does for rxe: default GID, IPv4 mapped,
// IPv6, no repeats (the EUI-64 link-local address is the default GID).
func TestBuildGIDTable(t *testing.T) {
	mac, _ := net.ParseMAC("52:54:00:12:34:56")
	tab := buildGIDTable(mac,
		[]netip.Addr{addr("198.18.0.2"), addr("10.0.0.1")},
		[]netip.Addr{addr("2001:db8::1"), addr("fe80::5054:ff:fe12:3456"), addr("2001:db8::1")})
	want := []string{"fe80::5054:ff:fe12:3456", "198.18.0.2", "10.0.0.1", "2001:db8::1"}
	if len(tab) != len(want) {
		t.Fatalf("table %v", tab)
	}
	for i, w := range want {
		if tab[i].Index != i || tab[i].GID.Addr() != addr(w) || tab[i].Default != (i == 0) || tab[i].Type != "RoCE v2" {
			t.Errorf("entry %d = %+v, want %s", i, tab[i], w)
		}
	}
}

func TestInterfaceOfLoopback(t *testing.T) {
	for _, a := range []string{"127.0.0.1", "127.0.0.2", "::1"} {
		ifc, err := InterfaceOf(addr(a))
		if err != nil {
			if a == "::1" {
				continue // no IPv6 here
			}
			t.Fatalf("InterfaceOf(%s): %v", a, err)
		}
		if !ifc.Loopback || ifc.ActiveMTU() != ActiveMTU(ifc.MTU) || ifc.Index == 0 {
			t.Errorf("InterfaceOf(%s) = %+v", a, ifc)
		}
	}
	if _, err := InterfaceOf(addr("192.0.2.77")); err == nil {
		t.Error("InterfaceOf found an interface for an address nobody holds")
	}
	tab, err := GIDTable("lo")
	if err != nil {
		t.Fatal(err)
	}
	// lo has no MAC, so no default GID: its first GID is 127.0.0.1's.
	if len(tab) < 1 || tab[0].Default || tab[0].GID.Addr() != addr("127.0.0.1") {
		t.Fatalf("GID table of lo: %+v", tab)
	}
}

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }
