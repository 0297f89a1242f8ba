//go:build linux

package ibudp

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

var errMsgSize = unix.EMSGSIZE

// testNetns is a pair of network namespaces joined by a veth pair:
// va 198.18.0.1/24 and 2001:db8::1/64 in a, vb 198.18.0.2/24 and
// 2001:db8::2/64 in b, MTU 1500, both up.
type testNetns struct {
	a, b netns.NsHandle
}

const (
	vethA    = "ibudp-va"
	vethB    = "ibudp-vb"
	nsAddrA  = "198.18.0.1"
	nsAddrB  = "198.18.0.2"
	nsAddr6A = "2001:db8::1"
	nsAddr6B = "2001:db8::2"
)

// withNetns creates the namespaces, runs f and removes them.
func withNetns(t *testing.T, f func(ns *testNetns)) {
	t.Helper()
	needRoot(t)
	var ns testNetns
	var err error
	if ns.a, err = newNetns(); err != nil {
		t.Skipf("cannot create a network namespace: %v", err)
	}
	defer ns.a.Close()
	if ns.b, err = newNetns(); err != nil {
		t.Fatalf("creating a network namespace: %v", err)
	}
	defer ns.b.Close()
	ns.run(t, ns.a, func() error {
		veth := &netlink.Veth{
			LinkAttrs:     netlink.LinkAttrs{Name: vethA, MTU: 1500},
			PeerName:      vethB,
			PeerNamespace: netlink.NsFd(int(ns.b)),
		}
		if err := netlink.LinkAdd(veth); err != nil {
			return fmt.Errorf("adding veth: %w", err)
		}
		return upWithAddr(vethA, nsAddrA+"/24", nsAddr6A+"/64")
	})
	ns.run(t, ns.b, func() error { return upWithAddr(vethB, nsAddrB+"/24", nsAddr6B+"/64") })
	// Until the kernel's link watcher has run for a link, its queue is
	// noop_qdisc, which drops every packet, IPv6's neighbour
	// solicitations included; on a loaded machine that took long enough
	// for a test's first IPv6 packets to die unresolved (3 s read
	// timeout). So the test starts once both links are operationally up.
	ns.run(t, ns.a, func() error { return waitOperUp(vethA) })
	ns.run(t, ns.b, func() error { return waitOperUp(vethB) })
	if t.Failed() {
		t.FailNow()
	}
	f(&ns)
}

// newNetns creates a network namespace from a thread that is then thrown
// away, leaving the test's threads where they were.
func newNetns() (netns.NsHandle, error) {
	type result struct {
		h   netns.NsHandle
		err error
	}
	ch := make(chan result)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		h, err := netns.New()
		ch <- result{h, err}
	}()
	r := <-ch
	return r.h, r.err
}

// run calls f on a thread inside namespace h and reports its error.
func (ns *testNetns) run(t *testing.T, h netns.NsHandle, f func() error) {
	t.Helper()
	ch := make(chan error)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		if err := netns.Set(h); err != nil {
			ch <- fmt.Errorf("entering namespace: %w", err)
			return
		}
		ch <- f()
	}()
	if err := <-ch; err != nil {
		t.Error(err)
	}
}

// upWithAddr brings lo and the link up and gives the link its addresses.
// DAD is off, so that IPv6 addresses are usable at once.
func upWithAddr(name string, cidrs ...string) error {
	if err := os.WriteFile("/proc/sys/net/ipv6/conf/"+name+"/accept_dad", []byte("0"), 0); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("turning DAD off: %w", err)
	}
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return err
	}
	if err := netlink.LinkSetUp(lo); err != nil {
		return err
	}
	l, err := netlink.LinkByName(name)
	if err != nil {
		return err
	}
	for _, cidr := range cidrs {
		a, err := netlink.ParseAddr(cidr)
		if err != nil {
			return err
		}
		a.Flags |= unix.IFA_F_NODAD
		if err := netlink.AddrAdd(l, a); err != nil {
			return fmt.Errorf("adding %s to %s: %w", cidr, name, err)
		}
	}
	return netlink.LinkSetUp(l)
}

// waitOperUp waits until the link's operational state is up: the link
// watcher has given it a real queue.
func waitOperUp(name string) error {
	deadline := time.Now().Add(20 * time.Second)
	for {
		l, err := netlink.LinkByName(name)
		if err != nil {
			return err
		}
		if l.Attrs().OperState == netlink.OperUp {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s still %v after 20 s", name, l.Attrs().OperState)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func setMTU(name string, mtu int) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return err
	}
	return netlink.LinkSetMTU(l, mtu)
}

func setLoMTU(mtu int) error { return setMTU("lo", mtu) }

func macOf(name string) (net.HardwareAddr, error) {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return nil, err
	}
	return l.Attrs().HardwareAddr, nil
}

// linkLocal returns the IPv6 link-local address of an interface, if it has
// one (the kernel has IPv6).
func linkLocal(name string) (netip.Addr, bool) {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return netip.Addr{}, false
	}
	list, err := netlink.AddrList(l, netlink.FAMILY_V6)
	if err != nil {
		return netip.Addr{}, false
	}
	for _, a := range list {
		if ip, ok := netip.AddrFromSlice(a.IP); ok && ip.IsLinkLocalUnicast() && a.Flags&unix.IFA_F_TENTATIVE == 0 {
			return ip, true
		}
	}
	return netip.Addr{}, false
}
