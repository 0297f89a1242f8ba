package netif

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Interface is the network interface a port runs on.
type Interface struct {
	Name         string
	Index        int
	MTU          int // the interface's MTU (link layer payload)
	HardwareAddr net.HardwareAddr
	Loopback     bool
}

// ActiveMTU is the IB MTU of a port on the interface.
func (i Interface) ActiveMTU() int { return ActiveMTU(i.MTU) }

// InterfaceOf finds the interface that holds addr. An address inside a
// prefix of a loopback interface (127.0.0.2 in 127.0.0.0/8) counts as held
// by it, since Linux answers for the whole prefix. A link-local IPv6 address
// with a zone is looked up on that interface only.
func InterfaceOf(addr netip.Addr) (Interface, error) {
	addr = addr.Unmap()
	zone := addr.Zone()
	ip := addr.WithZone("")
	family := netlink.FAMILY_V6
	if ip.Is4() {
		family = netlink.FAMILY_V4
	}
	addrs, err := addrList(nil, family)
	if err != nil {
		return Interface{}, fmt.Errorf("netif: listing addresses: %w", err)
	}
	for i := range addrs {
		a := &addrs[i]
		got, ok := netip.AddrFromSlice(a.IP)
		if !ok {
			continue
		}
		if got.Unmap() == ip {
			ifc, err := interfaceByIndex(a.LinkIndex)
			if err != nil {
				return Interface{}, err
			}
			if zone != "" && zone != ifc.Name {
				continue
			}
			return ifc, nil
		}
	}
	for _, a := range addrs {
		if a.IPNet == nil || !a.Contains(ip.AsSlice()) {
			continue
		}
		if ifc, err := interfaceByIndex(a.LinkIndex); err == nil && ifc.Loopback {
			return ifc, nil
		}
	}
	return Interface{}, fmt.Errorf("netif: no interface holds %v", addr)
}

// InterfaceByName returns the interface called name.
func InterfaceByName(name string) (Interface, error) {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return Interface{}, fmt.Errorf("netif: interface %q: %w", name, err)
	}
	return fromLink(l), nil
}

func interfaceByIndex(index int) (Interface, error) {
	l, err := netlink.LinkByIndex(index)
	if err != nil {
		return Interface{}, fmt.Errorf("netif: interface %d: %w", index, err)
	}
	return fromLink(l), nil
}

func fromLink(l netlink.Link) Interface {
	a := l.Attrs()
	return Interface{
		Name:         a.Name,
		Index:        a.Index,
		MTU:          a.MTU,
		HardwareAddr: a.HardwareAddr,
		Loopback:     a.Flags&net.FlagLoopback != 0,
	}
}

// GIDTable returns the GID table rxe would build for a port on the
// interface called name: the default GID (fe80:: from the MAC) at index 0,
// then the interface's IPv4 addresses as ::ffff:a.b.c.d, then its IPv6
// addresses, without repeats. (On a running system rxe's table also depends
// on the order addresses came and went in.)
func GIDTable(name string) ([]GIDEntry, error) {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return nil, fmt.Errorf("netif: GID table of %q: %w", name, err)
	}
	v4, err := addrsOf(l, netlink.FAMILY_V4)
	if err != nil {
		return nil, fmt.Errorf("netif: GID table of %q: %w", name, err)
	}
	v6, err := addrsOf(l, netlink.FAMILY_V6)
	if err != nil {
		return nil, fmt.Errorf("netif: GID table of %q: %w", name, err)
	}
	return buildGIDTable(l.Attrs().HardwareAddr, v4, v6), nil
}

// addrsOf lists a link's addresses of one family in the kernel's order,
// leaving out IPv6 addresses that failed duplicate address detection.
func addrsOf(l netlink.Link, family int) ([]netip.Addr, error) {
	list, err := addrList(l, family)
	if err != nil {
		return nil, err
	}
	var out []netip.Addr
	for _, a := range list {
		if a.Flags&unix.IFA_F_DADFAILED != 0 {
			continue
		}
		if ip, ok := netip.AddrFromSlice(a.IP); ok {
			out = append(out, ip.Unmap())
		}
	}
	return out, nil
}

// addrList is netlink.AddrList, retried when the kernel reports that the
// dump was interrupted by a change.
func addrList(l netlink.Link, family int) ([]netlink.Addr, error) {
	var err error
	for range 5 {
		var list []netlink.Addr
		list, err = netlink.AddrList(l, family)
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			return list, err
		}
	}
	return nil, err
}

// LoopbackIndex returns the index of the loopback interface.
func LoopbackIndex() (int, error) {
	links, err := netlink.LinkList()
	if err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
		return 0, fmt.Errorf("netif: listing interfaces: %w", err)
	}
	for _, l := range links {
		if a := l.Attrs(); a.Flags&net.FlagLoopback != 0 {
			return a.Index, nil
		}
	}
	return 0, errors.New("netif: no loopback interface")
}
