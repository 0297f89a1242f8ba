//go:build linux

package ibudp

import (
	"bytes"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rnicd/rnicd/internal/looptest"
	"github.com/rnicd/rnicd/wire/bth"
)

// groupFor is a multicast group no concurrent test uses: 239.x.y.z from
// the test's own loopback address 127.x.y.z.
func groupFor(a netip.Addr) netip.Addr {
	b := a.As4()
	return netip.AddrFrom4([4]byte{239, b[1], b[2], b[3]})
}

// A datagram sent to a group reaches every port of the host that joined
// it on lo, the sender's own included (multicast loops back, as rxe's
// does), with its ICRC verified under the group's address; a port that
// left the group gets no more.
func TestMulticastJoinSendRecv(t *testing.T) {
	ipA, ipB := looptest.Get(t), looptest.Get(t)
	a := openPort(t, Config{Addr: ipA, Mode: ModeUDP})
	b := openPort(t, Config{Addr: ipB, Mode: ModeUDP})
	group := groupFor(ipB)
	for _, p := range []Port{a, b} {
		if err := p.(Multicaster).JoinMulticast(group); err != nil {
			t.Fatal(err)
		}
	}
	ra, rb := startMcastReceiver(a.(Multicaster)), startMcastReceiver(b.(Multicaster))

	sent := sendBatch(t, a, group, 3, 500, []int{0, 256, 1024}, 0, 0)
	for name, r := range map[string]*mcastReceiver{"receiver": rb, "sender": ra} {
		for i := range 3 {
			g := r.get(t)
			if !bytes.Equal(g.roce, sent[i].roce) {
				t.Fatalf("%s: packet %d differs", name, i)
			}
			if g.peer != ipA || g.dst != group || g.icrc != ICRCVerified {
				t.Fatalf("%s: peer %v dst %v icrc %v, want %v %v verified", name, g.peer, g.dst, g.icrc, ipA, group)
			}
		}
	}
	if s := b.Stats(); s.RxPackets != 3 || s.RxDropped() != 0 {
		t.Fatalf("receiver's stats: %v", s)
	}

	if err := b.(Multicaster).LeaveMulticast(group); err != nil {
		t.Fatal(err)
	}
	sendBatch(t, a, group, 1, 600, []int{64}, 0, 0)
	ra.get(t) // the sender, still a member, has it: b had time to get it too
	rb.none(t, 100*time.Millisecond)

	// A datagram whose ICRC was sealed for another destination is dropped
	// and counted.
	buf := NewBuf()
	fillPacket(t, buf, 0xffffff, 1, 8)
	sealEnvelope(&bth.Envelope{Src: ipA, Dst: ipB, SrcPort: bth.UDPPort, DstPort: bth.UDPPort, TTL: 64}, buf.RoCE())
	rawSend(t, ipA, group, buf.RoCE())
	waitStats(t, a, "icrc_err", func(s Stats) bool { return s.RxICRCErrors == 1 })
	ra.none(t, 50*time.Millisecond)
}

// Bad joins are refused with their reason; Close ends RecvMulticast.
func TestMulticastRefusals(t *testing.T) {
	ip := looptest.Get(t)
	p := openPort(t, Config{Addr: ip, Mode: ModeUDP})
	m := p.(Multicaster)
	group := groupFor(ip)
	for _, c := range []struct {
		g    netip.Addr
		want string
	}{
		{ip, "not a multicast address"},
		{netip.MustParseAddr("ff02::1"), "other address family"},
	} {
		if err := m.JoinMulticast(c.g); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("join %v: %v, want %q", c.g, err, c.want)
		}
	}
	if err := m.LeaveMulticast(group); err == nil || !strings.Contains(err.Error(), "not joined") {
		t.Errorf("leave before join: %v", err)
	}
	g4 := group.As4()
	for i := range MaxMcastGroups {
		g4[3] = byte(i)
		if err := m.JoinMulticast(netip.AddrFrom4(g4)); err != nil {
			t.Fatalf("join %d: %v", i, err)
		}
	}
	if err := m.JoinMulticast(netip.AddrFrom4(g4)); err == nil || !strings.Contains(err.Error(), "joined already") {
		t.Errorf("second join: %v", err)
	}
	g4[2]++
	if err := m.JoinMulticast(netip.AddrFrom4(g4)); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("joined %d groups", MaxMcastGroups)) {
		t.Errorf("join past the limit: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := m.RecvMulticast([]*Buf{NewBuf()})
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	p.Close()
	select {
	case err := <-done:
		if !isClosed(err) {
			t.Fatalf("RecvMulticast after Close: %v", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("RecvMulticast still waits after Close")
	}
	if err := m.JoinMulticast(group); err == nil {
		t.Fatal("join on a closed port")
	}
}

func TestMulticastGroup(t *testing.T) {
	for _, c := range []struct {
		gid  string
		want string // "" refused
	}{
		{"::ffff:239.1.1.1", "239.1.1.1"},
		{"::ffff:224.0.0.1", "224.0.0.1"},
		{"ff0e::1", "ff0e::1"},
		{"::ffff:10.0.0.1", ""},
		{"fe80::1", ""},
		{"::", ""},
	} {
		g, err := MulticastGroup(netip.MustParseAddr(c.gid).As16())
		if c.want == "" {
			if err == nil || !strings.Contains(err.Error(), "not a multicast GID") {
				t.Errorf("%s: %v %v, want refused", c.gid, g, err)
			}
			continue
		}
		if err != nil || g.String() != c.want {
			t.Errorf("%s: %v %v, want %s", c.gid, g, err, c.want)
		}
	}
}

type mcastReceived struct {
	received
	dst netip.Addr
}

type mcastReceiver struct{ ch chan mcastReceived }

func startMcastReceiver(m Multicaster) *mcastReceiver {
	r := &mcastReceiver{ch: make(chan mcastReceived, 1000)}
	go func() {
		bufs := []*Buf{NewBuf(), NewBuf()}
		for {
			n, err := m.RecvMulticast(bufs)
			if err != nil {
				close(r.ch)
				return
			}
			for _, b := range bufs[:n] {
				r.ch <- mcastReceived{received{roce: bytes.Clone(b.RoCE()), peer: b.Peer, peerPort: b.PeerPort,
					tos: b.TOS, icrc: b.ICRC, ipid: b.IPID}, b.Dst}
			}
		}
	}()
	return r
}

func (r *mcastReceiver) get(t *testing.T) mcastReceived {
	t.Helper()
	select {
	case g, ok := <-r.ch:
		if !ok {
			t.Fatal("receiver ended")
		}
		return g
	case <-time.After(3 * time.Second):
		t.Fatal("no multicast datagram in 3 s")
	}
	return mcastReceived{}
}

func (r *mcastReceiver) none(t *testing.T, wait time.Duration) {
	t.Helper()
	select {
	case g, ok := <-r.ch:
		if ok {
			t.Fatalf("unexpected datagram from %v to %v", g.peer, g.dst)
		}
	case <-time.After(wait):
	}
}

// rawSend sends roce to group:4791 from a plain socket bound to src on
// another UDP port, out of lo.
func rawSend(t *testing.T, src, group netip.Addr, roce []byte) {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: src.As4()}); err != nil {
		t.Fatal(err)
	}
	if err := unix.SetsockoptIPMreqn(fd, unix.IPPROTO_IP, unix.IP_MULTICAST_IF, &unix.IPMreqn{Address: src.As4(), Ifindex: 1}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Sendto(fd, roce, 0, &unix.SockaddrInet4{Addr: group.As4(), Port: bth.UDPPort}); err != nil {
		t.Fatal(err)
	}
}

// Over a veth pair between two namespaces (lo carries no IPv6
// multicast: a send to ff0e:: there is ENETUNREACH), in both families: a
// port in one namespace sends to a group that the port in the other
// joined on its veth; the datagram arrives with its ICRC verified under
// the group's address.
func TestMulticastVeth(t *testing.T) {
	withNetns(t, func(ns *testNetns) {
		for _, c := range []struct{ a, b, group string }{
			{nsAddrA, nsAddrB, "239.1.2.3"},
			{nsAddr6A, nsAddr6B, "ff0e::91"},
		} {
			var a, b Port
			var err error
			ns.run(t, ns.a, func() error { a, err = Open(Config{Addr: addr(c.a), Mode: ModeUDP}); return err })
			ns.run(t, ns.b, func() error {
				if b, err = Open(Config{Addr: addr(c.b), Mode: ModeUDP}); err != nil {
					return err
				}
				return b.(Multicaster).JoinMulticast(addr(c.group))
			})
			if t.Failed() {
				t.FailNow()
			}
			rb := startMcastReceiver(b.(Multicaster))
			sent := sendBatch(t, a, addr(c.group), 2, 7, []int{100, 1024}, 0, 0)
			for i := range 2 {
				g := rb.get(t)
				if !bytes.Equal(g.roce, sent[i].roce) || g.dst != addr(c.group) || g.peer != addr(c.a) || g.icrc != ICRCVerified {
					t.Fatalf("%s: got peer %v dst %v icrc %v", c.group, g.peer, g.dst, g.icrc)
				}
			}
			a.Close()
			b.Close()
		}
	})
}
