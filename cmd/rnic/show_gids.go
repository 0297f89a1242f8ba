package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"

	"github.com/rnicd/rnicd/wire/netif"
)

// runShowGIDs is show_gids (the script RoCE users run to find the GID
// index to give -x and -g): one line per non-zero GID of each device's
// port, with its index, the IPv4 address of an IPv4-mapped GID, the RoCE
// version and the network interface that holds the address, in the
// script's tab layout, then n_gids_found. The one argument, as the
// script's, names the device.
func runShowGIDs(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("show_gids", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var dev devFlags
	dev.register(fs)
	pos, err := parseAnywhere(fs, args)
	if err != nil {
		return parseExit(err)
	}
	if len(pos) > 1 {
		fs.Usage()
		return 2
	}
	if len(pos) == 1 {
		dev.name = pos[0]
	}
	ctxs, err := dev.deviceList()
	if err != nil {
		fmt.Fprintf(stderr, "show_gids: %v\n", err)
		return 1
	}
	defer ibvCloseAll(ctxs)
	fmt.Fprintf(stdout, "DEV\tPORT\tINDEX\tGID\t\t\t\t\tIPv4 \t\tVER\tDEV\n")
	fmt.Fprintf(stdout, "---\t----\t-----\t---\t\t\t\t\t------------ \t---\t---\n")
	found := 0
	for _, c := range ctxs {
		p, err := c.QueryPort()
		if err != nil {
			fmt.Fprintf(stderr, "show_gids: %s: %v\n", c.Name(), err)
			return 1
		}
		ndev := interfaceOf(p.Addr)
		for i, g := range p.GIDs {
			gid := netif.GID(g)
			// The script leaves out empty entries and the bare fe80:: prefix.
			if gid.IsZero() || gid == (netif.GID{0: 0xfe, 1: 0x80}) {
				continue
			}
			a := gid.Addr()
			if a.Is4() {
				fmt.Fprintf(stdout, "%s\t1\t%d\t%s\t%s \tv2\t%s\n", c.Name(), i, gid, a, ndev)
			} else {
				fmt.Fprintf(stdout, "%s\t1\t%d\t%s\t\t\tv2\t%s\n", c.Name(), i, gid, ndev)
			}
			found++
		}
	}
	fmt.Fprintf(stdout, "n_gids_found=%d\n", found)
	return 0
}

// interfaceOf names the interface of this host that holds a, as sysfs's
// gid_attrs/ndevs does; "-" when none does (a daemon in another network
// namespace).
func interfaceOf(a netip.Addr) string {
	ifs, err := net.Interfaces()
	if err != nil {
		return "-"
	}
	for _, ifc := range ifs {
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, x := range addrs {
			n, ok := x.(*net.IPNet)
			if !ok {
				continue
			}
			// lo holds all of 127.0.0.0/8, not only 127.0.0.1.
			if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap() == a.Unmap() ||
				ifc.Flags&net.FlagLoopback != 0 && n.Contains(a.Unmap().AsSlice()) {
				return ifc.Name
			}
		}
	}
	return "-"
}
