//go:build linux

package ibudp

import (
	"net/netip"
	"testing"
	"time"

	"github.com/rnicd/rnicd/wire/netif"
)

// rxe's UDP source ports, as in the golden captures: QP 17 to QP 17 after
// RTR sends from 49441; UD QP 17 and QP1 from 57236 and 55410.
func TestSourcePorts(t *testing.T) {
	if p := SourcePortFlow(0, 17, 17); p != 49441 {
		t.Errorf("SourcePortFlow(0, 17, 17) = %d, want 49441", p)
	}
	if p := SourcePortQPN(17); p != 57236 {
		t.Errorf("SourcePortQPN(17) = %d, want 57236", p)
	}
	if p := SourcePortQPN(1); p != 55410 {
		t.Errorf("SourcePortQPN(1) = %d, want 55410", p)
	}
	for q := uint32(0); q < 5000; q += 7 {
		if p := SourcePortFlow(0, q, q+1); p < 0xc000 {
			t.Fatalf("port %d below 0xC000", p)
		}
	}
}

// On a veth pair in namespaces: the interface that holds an address, its
// MTU and active MTU at 1500 and 9000, the GID table with the default GID
// from the veth's MAC at 0, ::ffff:198.18.0.1 at 1 (as the golden captures
// show for rxe0) and 2001:db8::1 at 2; ports opened there report the active
// MTU and exchange packets over the veth in both modes and both families.
func TestNetnsVeth(t *testing.T) {
	withNetns(t, func(ns *testNetns) {
		ns.run(t, ns.a, func() error {
			ifc, err := netif.InterfaceOf(addr(nsAddrA))
			if err != nil {
				return err
			}
			if ifc.Name != vethA || ifc.MTU != 1500 || ifc.ActiveMTU() != 1024 || ifc.Loopback {
				t.Errorf("netif.InterfaceOf(%s) = %+v", nsAddrA, ifc)
			}
			mac, err := macOf(vethA)
			if err != nil {
				return err
			}
			tab, err := netif.GIDTable(vethA)
			if err != nil {
				return err
			}
			def, _ := netif.DefaultGID(mac)
			if len(tab) < 2 || tab[0].GID != def || tab[1].GID.Addr() != addr(nsAddrA) || tab[1].GID.String() != "0000:0000:0000:0000:0000:ffff:c612:0001" {
				t.Errorf("GID table %+v", tab)
			}
			if len(tab) < 3 || tab[2].GID.Addr() != addr(nsAddr6A) || tab[2].GID.String() != "2001:0db8:0000:0000:0000:0000:0000:0001" {
				t.Errorf("GID table %+v: want %s at index 2", tab, nsAddr6A)
			}
			if ll, ok := linkLocal(vethA); ok && netif.GIDFromAddr(ll) == def && len(tab) != 3 {
				t.Errorf("the EUI-64 link-local address is the default GID, yet the table is %+v", tab)
			}
			seen := map[netif.GID]bool{}
			for _, e := range tab {
				if seen[e.GID] {
					t.Errorf("GID %v twice", e.GID)
				}
				seen[e.GID] = true
			}
			return nil
		})
		for _, mode := range []Mode{ModeUDP, ModePacket} {
			t.Run(mode.String()+"-1500", func(t *testing.T) { vethExchange(t, ns, mode, 1024) })
			t.Run(mode.String()+"-1500-ipv6", func(t *testing.T) {
				vethExchangeAddrs(t, ns, mode, 1024, addr(nsAddr6A), addr(nsAddr6B))
			})
		}
		ns.run(t, ns.a, func() error { return setMTU(vethA, 9000) })
		ns.run(t, ns.b, func() error { return setMTU(vethB, 9000) })
		ns.run(t, ns.a, func() error {
			ifc, err := netif.InterfaceOf(addr(nsAddrA))
			if err == nil && (ifc.MTU != 9000 || ifc.ActiveMTU() != 4096) {
				t.Errorf("after MTU 9000: %+v", ifc)
			}
			return err
		})
		for _, mode := range []Mode{ModeUDP, ModePacket} {
			t.Run(mode.String()+"-9000", func(t *testing.T) { vethExchange(t, ns, mode, 4096) })
		}
		var llA, llB netip.Addr
		var okA, okB bool
		ns.run(t, ns.a, func() error { llA, okA = linkLocal(vethA); return nil })
		ns.run(t, ns.b, func() error { llB, okB = linkLocal(vethB); return nil })
		if !okA || !okB {
			t.Log("no IPv6 link-local addresses on the veth pair; IPv6 over veth not tested")
			return
		}
		for _, mode := range []Mode{ModeUDP, ModePacket} {
			t.Run(mode.String()+"-ipv6-link-local", func(t *testing.T) { vethExchangeAddrs(t, ns, mode, 4096, llA, llB) })
		}
	})
}

// vethExchange opens a port in each namespace and sends a batch each way
// over the veth.
func vethExchange(t *testing.T, ns *testNetns, mode Mode, wantMTU int) {
	vethExchangeAddrs(t, ns, mode, wantMTU, addr(nsAddrA), addr(nsAddrB))
}

func vethExchangeAddrs(t *testing.T, ns *testNetns, mode Mode, wantMTU int, addrA, addrB netip.Addr) {
	var a, b Port
	var err error
	ns.run(t, ns.a, func() error { a, err = Open(Config{Addr: addrA, Mode: mode}); return err })
	ns.run(t, ns.b, func() error { b, err = Open(Config{Addr: addrB, Mode: mode}); return err })
	if t.Failed() {
		t.FailNow()
	}
	defer a.Close()
	defer b.Close()
	if a.MTU() != wantMTU || b.MTU() != wantMTU {
		t.Errorf("MTU %d/%d, want %d", a.MTU(), b.MTU(), wantMTU)
	}
	sizes := []int{0, 100, wantMTU}
	ra, rb := startReceiver(a), startReceiver(b)
	sent := sendBatch(t, a, addrB, 64, 1, sizes, 0xc100, 0)
	matchAll(t, sent, rb.get(t, 64, 5*time.Second))
	sent = sendBatch(t, b, addrA, 64, 1000, sizes, 0xc200, 0)
	got := ra.get(t, 64, 5*time.Second)
	matchAll(t, sent, got)
	if got[0].peer != addrB {
		t.Errorf("peer %v", got[0].peer)
	}
	if mode == ModePacket && got[0].peerPort != 0xc200 {
		t.Errorf("peer port %d", got[0].peerPort)
	}
}
