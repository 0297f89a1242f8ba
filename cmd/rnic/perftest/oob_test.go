package perftest

import (
	"net"
	"strconv"
	"testing"
)

// The server's listener takes clients of both families, as perftest's
// does on a dual-stack host, and Dial reaches it by an IPv4 or an IPv6
// literal: each pair swaps versions and sees the other's address family.
func TestExchangeBothFamilies(t *testing.T) {
	for _, host := range []string{"127.0.0.1", "::1"} {
		t.Run(host, func(t *testing.T) {
			ln, err := Listen(0)
			if err != nil {
				t.Fatal(err)
			}
			port := ln.Addr().(*net.TCPAddr).Port
			type result struct {
				c   *Conn
				err error
			}
			accepted := make(chan result, 1)
			go func() {
				c, err := Accept(ln)
				if err == nil {
					err = c.ExchangeVersions()
				}
				accepted <- result{c, err}
			}()
			cli, err := Dial(net.JoinHostPort(host, strconv.Itoa(port)))
			if err != nil {
				if host == "::1" {
					if _, lerr := net.Listen("tcp6", "[::1]:0"); lerr != nil {
						t.Skipf("no IPv6 loopback: %v", lerr)
					}
				}
				t.Fatal(err)
			}
			defer cli.Close()
			if err := cli.ExchangeVersions(); err != nil {
				t.Fatal(err)
			}
			srv := <-accepted
			if srv.err != nil {
				t.Fatal(srv.err)
			}
			defer srv.c.Close()
			if cli.PeerVersion != Version || srv.c.PeerVersion != Version {
				t.Fatalf("versions %q / %q", cli.PeerVersion, srv.c.PeerVersion)
			}
			from := srv.c.p.(tcpPipe).c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr()
			if from.Unmap().String() != host {
				t.Fatalf("server sees the client at %v, want %s", from, host)
			}
		})
	}
}
