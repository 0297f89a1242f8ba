package tests

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/rnicd/rnicd/tests/icrcref"
	"github.com/rnicd/rnicd/verbs"
)

// The addresses of the two hosts TestToolsOverIPv6 makes: the daemons'
// IPv6 ones, and IPv4 ones for the exchanges of tools that cannot make
// theirs over IPv6.
var (
	v6A = netip.MustParseAddr("2001:db8::1")
	v6B = netip.MustParseAddr("2001:db8::2")
	v4A = netip.MustParseAddr("198.18.6.1")
	v4B = netip.MustParseAddr("198.18.6.2")
)

// TestToolsOverIPv6 runs every tool pair the IPv4 tests run (perftest's
// at each size and with several QPs, and every
// ibv_*_pingpong, --chk checking the data) between two rnicd on
// 2001:db8::1 and 2001:db8::2, each in a network namespace of its own,
// joined by a veth pair of MTU 1500, as on two hosts: the tools' TCP
// exchange and the RoCE packets go over IPv6. Both port modes. The daemons
// capture every packet, and the suites' own checker (icrcref) verifies
// the ICRC of each, and its UDP checksum where one was written; rnic res
// and the daemon's ready line show the IPv6 peer and address.
func TestToolsOverIPv6(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipped: needs root to make network namespaces; CI runs as root")
	}
	hosts := newHosts6(t)
	for _, mode := range []string{"udp", "packet"} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			pcapA, pcapB := filepath.Join(dir, "a.pcap"), filepath.Join(dir, "b.pcap")
			a, err := startDaemonIn(hosts.path(hosts.a), dir, "rnic6a", v6A.String(), "-mode", mode, "-pcap", pcapA,
				"-http", "[2001:db8::1]:0")
			if err != nil {
				t.Fatal(err)
			}
			b, err := startDaemonIn(hosts.path(hosts.b), dir, "rnic6b", v6B.String(), "-mode", mode, "-pcap", pcapB)
			if err != nil {
				a.stop()
				t.Fatal(err)
			}
			stop := stopper(t, a, b)
			want := fmt.Sprintf(" addr=2001:db8::1 mode=%s gid=2001:0db8:0000:0000:0000:0000:0000:0001 active_mtu=1024 ", mode)
			if !strings.Contains(a.ready, want) || !strings.Contains(a.ready, " http=[2001:db8::1]:") {
				t.Errorf("ready line %q, want it to hold %q and http=[2001:db8::1]:PORT", a.ready, want)
			}
			t.Setenv("RNICD_DIR", dir)
			tb := &toolBench{a: a, b: b, ca: open(t, "rnic6a"), cb: open(t, "rnic6b"), host: v6A.String()}
			runA, runB := hosts.rnicIn(hosts.a), hosts.rnicIn(hosts.b)

			const iters = "100"
			for _, c := range perftestCases {
				for _, size := range c.sizes {
					t.Run(fmt.Sprintf("%s/%s/%s", c.tool, c.flags[1], size), func(t *testing.T) {
						args := append([]string{"-n", iters}, c.flags...)
						if c.tool != "ib_atomic_bw" {
							args = append(args, "-s", size)
						}
						srv, cli := tb.pairRun(t, runA, runB, "rnic6a", "rnic6b", c.tool, args...)
						checkPerftest(t, "client", cli, "rnic6b", perftestGID(v6B), perftestGID(v6A), size, iters)
						if c.tool != "ib_read_lat" {
							checkPerftest(t, "server", srv, "rnic6a", perftestGID(v6A), perftestGID(v6B), size, iters)
						}
					})
				}
			}
			// Several QPs.
			extra := [][]string{{"ib_write_bw", "-q", "4"}, {"ib_read_bw", "-q", "4"}}
			for _, x := range extra {
				t.Run(strings.Join(x, " "), func(t *testing.T) {
					args := append([]string{"-s", "4096", "-n", iters}, x[1:]...)
					srv, cli := tb.pairRun(t, runA, runB, "rnic6a", "rnic6b", x[0], args...)
					n := iters
					if x[1] == "-q" {
						n = "400"
					}
					checkPerftest(t, "client", cli, "rnic6b", perftestGID(v6B), perftestGID(v6A), "4096", n)
					if x[0] != "ib_read_lat" {
						checkPerftest(t, "server", srv, "rnic6a", perftestGID(v6A), perftestGID(v6B), "4096", n)
					}
				})
			}
			for _, tc := range pingpongCases {
				t.Run(tc.tool+" "+strings.Join(tc.flags, " "), func(t *testing.T) {
					// The GID of the port's address is at index 1, as
					// rxe's first RoCE v2 GID of an interface.
					srv, cli := tb.pairRun(t, runA, runB, "rnic6a", "rnic6b", tc.tool, append([]string{"-g", "1"}, tc.flags...)...)
					checkPingpongGIDs(t, v6A.String(), v6B.String(), tc.qps, tc.size, tc.flags, srv, cli)
				})
			}
			if mode == "udp" {
				t.Run("clib", func(t *testing.T) { clibOverIPv6(t, hosts, tb) })
			}
			checkResShowsIPv6(t, tb.ca)

			stop() // flushes the captures
			for _, p := range []struct {
				path     string
				from, to netip.Addr
			}{{pcapA, v6A, v6B}, {pcapB, v6B, v6A}} {
				st := checkCapture6(t, p.path)
				if st.bad != 0 || st.badSum != 0 || st.good[p.from] == 0 || st.good[p.to] == 0 || len(st.good) != 2 {
					t.Errorf("%s: %+v, want packets both ways between %v and %v, every ICRC and UDP checksum good", p.path, st, p.from, p.to)
				}
			}
		})
	}
}

// hosts6 are two network namespaces joined by a veth pair, a with
// 2001:db8::1/64 and b with 2001:db8::2/64, both up, DAD off.
type hosts6 struct{ a, b netns.NsHandle }

func newHosts6(t *testing.T) *hosts6 {
	t.Helper()
	var h hosts6
	var err error
	if h.a, err = newNetns(); err != nil {
		t.Fatalf("creating a network namespace: %v", err)
	}
	t.Cleanup(func() { h.a.Close() })
	if h.b, err = newNetns(); err != nil {
		t.Fatalf("creating a network namespace: %v", err)
	}
	t.Cleanup(func() { h.b.Close() })
	err = inNetns(h.a, func() error {
		veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "v6a", MTU: 1500}, PeerName: "v6b", PeerNamespace: netlink.NsFd(int(h.b))}
		if err := netlink.LinkAdd(veth); err != nil {
			return fmt.Errorf("adding veth: %w", err)
		}
		return linkUp("v6a", v6A, v4A)
	})
	if err == nil {
		err = inNetns(h.b, func() error { return linkUp("v6b", v6B, v4B) })
	}
	if err != nil {
		t.Fatal(err)
	}
	return &h
}

// path names namespace h for nsenter --net, through this process's fd.
func (h *hosts6) path(ns netns.NsHandle) string {
	return fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), int(ns))
}

// rnicIn runs rnic's tools inside namespace ns.
func (h *hosts6) rnicIn(ns netns.NsHandle) runner {
	return func(ctx context.Context, tool string, args ...string) *exec.Cmd {
		return exec.CommandContext(ctx, "nsenter", append([]string{"--net=" + h.path(ns), "--", filepath.Join(binDir, "rnic"), tool}, args...)...)
	}
}

// newNetns creates a network namespace from a thread that is thrown away,
// leaving the test's threads where they were.
func newNetns() (netns.NsHandle, error) {
	var h netns.NsHandle
	err := inThread(func() (err error) { h, err = netns.New(); return err })
	return h, err
}

// inNetns runs f on a thread inside namespace ns.
func inNetns(ns netns.NsHandle, f func() error) error {
	return inThread(func() error {
		if err := netns.Set(ns); err != nil {
			return fmt.Errorf("entering namespace: %w", err)
		}
		return f()
	})
}

// inThread runs f on a thread of its own, which ends with it.
func inThread(f func() error) error {
	ch := make(chan error)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		ch <- f()
	}()
	return <-ch
}

// linkUp brings lo and the link up and gives the link addr6/64, usable at
// once (no duplicate address detection), and addr4/24.
func linkUp(name string, addr6, addr4 netip.Addr) error {
	for _, n := range []string{"lo", name} {
		l, err := netlink.LinkByName(n)
		if err != nil {
			return err
		}
		if n == name {
			for _, cidr := range []string{addr6.String() + "/64", addr4.String() + "/24"} {
				a, err := netlink.ParseAddr(cidr)
				if err != nil {
					return err
				}
				a.Flags = unix.IFA_F_NODAD
				if err := netlink.AddrAdd(l, a); err != nil {
					return fmt.Errorf("adding %s to %s: %w", cidr, n, err)
				}
			}
		}
		if err := netlink.LinkSetUp(l); err != nil {
			return err
		}
	}
	return nil
}

// clibOverIPv6 runs Debian's own perftest and ibverbs-utils, on the
// daemons through the C library, against themselves and against rnic's
// clones in both roles, RoCE over the IPv6 GIDs. Debian's perftest (4.5)
// resolves its exchange with AF_INET only (its --ipv6 picks a GID), and
// rdma-core's pingpong server binds the first passive address glibc
// gives, 0.0.0.0: those exchanges go to the server's IPv4 address, as a
// user pairing with them must; rnic's servers take IPv6 clients.
func clibOverIPv6(t *testing.T, hosts *hosts6, tb *toolBench) {
	defer func(h string) { tb.host = h }(tb.host)
	rnicA, rnicB := hosts.rnicIn(hosts.a), hosts.rnicIn(hosts.b)
	type pair struct {
		name     string
		srv, cli runner
		realSrv  bool
	}
	pairs := func(tool, pkg string) []pair {
		real := debianTool(t, tool, pkg)
		realA, realB := hosts.in(hosts.a, real), hosts.in(hosts.b, real)
		return []pair{{"real-real", realA, realB, true}, {"real-rnic", realA, rnicB, true}, {"rnic-real", rnicA, realB, false}}
	}
	const iters = "100"
	for _, c := range perftestCases {
		size := c.sizes[len(c.sizes)-1]
		for _, p := range pairs(c.tool, "perftest") {
			t.Run(fmt.Sprintf("%s/%s/%s/%s", c.tool, c.flags[1], size, p.name), func(t *testing.T) {
				tb.host = v4A.String()
				args := append([]string{"-n", iters, "-x", "1"}, c.flags...)
				if c.tool != "ib_atomic_bw" {
					args = append(args, "-s", size)
				}
				srv, cli := tb.pairRun(t, p.srv, p.cli, "rnic6a", "rnic6b", c.tool, args...)
				checkPerftest(t, "client", cli, "rnic6b", perftestGID(v6B), perftestGID(v6A), size, iters)
				if c.tool != "ib_read_lat" {
					checkPerftest(t, "server", srv, "rnic6a", perftestGID(v6A), perftestGID(v6B), size, iters)
				}
			})
		}
	}
	for _, tc := range pingpongCases {
		for _, p := range pairs(tc.tool, "ibverbs-utils") {
			t.Run(tc.tool+" "+strings.Join(tc.flags, " ")+"/"+p.name, func(t *testing.T) {
				tb.host = v6A.String()
				if p.realSrv {
					tb.host = v4A.String()
				}
				srv, cli := tb.pairRun(t, p.srv, p.cli, "rnic6a", "rnic6b", tc.tool, append([]string{"-g", "1"}, tc.flags...)...)
				checkPingpongGIDs(t, v6A.String(), v6B.String(), tc.qps, tc.size, tc.flags, srv, cli)
			})
		}
	}
}

// in runs r's commands inside namespace ns, with their environment.
func (h *hosts6) in(ns netns.NsHandle, r runner) runner {
	return func(ctx context.Context, tool string, args ...string) *exec.Cmd {
		c := r(ctx, tool, args...)
		w := exec.CommandContext(ctx, "nsenter", append([]string{"--net=" + h.path(ns), "--", c.Path}, c.Args[1:]...)...)
		w.Env = c.Env
		return w
	}
}

// perftestGID is a GID as perftest prints it: sixteen decimal bytes.
func perftestGID(a netip.Addr) string {
	var s []string
	for _, b := range a.As16() {
		s = append(s, fmt.Sprintf("%02d", b))
	}
	return strings.Join(s, ":")
}

// checkResShowsIPv6 connects a QP of c's device to an IPv6 peer and finds
// it in rnic res, and the peer's address, as netip prints it, in rnic stat.
func checkResShowsIPv6(t *testing.T, c *verbs.Context) {
	t.Helper()
	pd := must[*verbs.PD](t)(c.AllocPD())
	defer pd.Dealloc()
	cq := must[*verbs.CQ](t)(c.CreateCQ(4, nil))
	defer cq.Destroy()
	qp := must[*verbs.QP](t)(pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}))
	defer qp.Destroy()
	steps := []struct {
		a    verbs.QPAttr
		mask verbs.AttrMask
	}{
		{verbs.QPAttr{State: verbs.QPSInit, PortNum: 1}, verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrAccessFlags},
		{verbs.QPAttr{State: verbs.QPSRTR, PathMTU: verbs.MTU1024, DestQPN: 0x99, RQPSN: 1, MaxDestRdAtomic: 1, MinRNRTimer: 1,
			AH: verbs.AH{DGID: v6B.As16(), SGIDIndex: 1, HopLimit: 64}},
			verbs.AttrState | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN | verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer},
	}
	for _, s := range steps {
		if err := qp.Modify(&s.a, s.mask); err != nil {
			t.Fatal(err)
		}
	}
	if out, want := rnicOutput(t, "res", "-d", c.Name()), fmt.Sprintf("link rnic6a/1 lqpn %d rqpn 153 type RC state RTR ", qp.QPN); !strings.Contains(out, want) {
		t.Errorf("rnic res shows no %q:\n%s", want, out)
	}
	out := rnicOutput(t, "stat", "-d", c.Name())
	if want := fmt.Sprintf("qp rnic6a %#x RC RTR ", qp.QPN); !strings.Contains(out, want) || !strings.Contains(out, " dest 2001:db8::2 dest_qpn 0x99 ") {
		t.Errorf("rnic stat shows no QP %#x to 2001:db8::2:\n%s", qp.QPN, out)
	}
}

// capture6Stats are the RoCE packets of a capture by source and verdict.
type capture6Stats struct {
	good   map[netip.Addr]int
	bad    int // ICRC wrong
	badSum int // IPv6 UDP checksum nonzero and wrong
	other  int // not RoCEv2 over IPv6
}

// checkCapture6 checks every packet of a daemon's capture: RoCEv2 over
// IPv6, its ICRC and its UDP checksum, if it has one, right.
func checkCapture6(t *testing.T, path string) capture6Stats {
	t.Helper()
	st := capture6Stats{good: map[netip.Addr]int{}}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	for {
		data, _, err := r.ReadPacketData()
		if errors.Is(err, io.EOF) {
			return st
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		p := gopacket.NewPacket(data, layers.LayerTypeEthernet, gopacket.Default)
		ip6, _ := p.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
		udp, _ := p.Layer(layers.LayerTypeUDP).(*layers.UDP)
		if ip6 == nil || udp == nil || udp.DstPort != 4791 || len(udp.Payload) < 12+4 {
			st.other++
			continue
		}
		whole := append(append([]byte(nil), udp.Contents...), udp.Payload...)
		if !icrcref.OK(ip6.Contents, whole) {
			st.bad++
			continue
		}
		if !icrcref.UDP6OK(ip6.Contents, whole) {
			st.badSum++
			continue
		}
		src, _ := netip.AddrFromSlice(ip6.SrcIP)
		st.good[src]++
	}
}
