//go:build linux

package ibudp

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/rnicd/rnicd/wire/bth"
)

func TestECNBuf(t *testing.T) {
	b := NewBuf()
	b.TOS = 0x68 // DSCP AF31, Not-ECT
	for _, e := range []ECN{ECT0, CE, ECT1, NotECT} {
		b.SetECN(e)
		if b.ECN() != e || b.TOS>>2 != 0x68>>2 {
			t.Fatalf("SetECN(%v): TOS %#x, ECN %v", e, b.TOS, b.ECN())
		}
	}
	if s := fmt.Sprint(NotECT, ECT1, ECT0, CE); s != "Not-ECT ECT(1) ECT(0) CE" {
		t.Fatalf("names %q", s)
	}
}

// open opens a port inside namespace h; it is closed when the test ends.
func (ns *testNetns) open(t *testing.T, h netns.NsHandle, cfg Config) Port {
	t.Helper()
	var p Port
	var err error
	ns.run(t, h, func() error { p, err = Open(cfg); return err })
	if t.Failed() {
		t.FailNow()
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// family is one address family of the namespaces: a's and b's address.
type family struct {
	name string
	a, b netip.Addr
}

// inEachModeAndFamily runs test in namespaces created for it, once per
// port mode and address family.
func inEachModeAndFamily(t *testing.T, test func(t *testing.T, ns *testNetns, mode Mode, fam family)) {
	withNetns(t, func(ns *testNetns) {
		for _, mode := range []Mode{ModeUDP, ModePacket} {
			for _, fam := range []family{{"ipv4", addr(nsAddrA), addr(nsAddrB)}, {"ipv6", addr(nsAddr6A), addr(nsAddr6B)}} {
				t.Run(mode.String()+"-"+fam.name, func(t *testing.T) { test(t, ns, mode, fam) })
			}
		}
	})
}

// A sender's per-packet ECN codepoint arrives in the receiver's Buf, next
// to the DSCP it left alone, across a veth between two namespaces, in both
// modes and both families, and every ICRC verifies: a run of ECT(0) data
// (one GSO message in ModeUDP), a Not-ECT ACK, CE and ECT(1) packets.
// Packets of one GSO message share a TOS (gsoRun), so a change of
// codepoint starts a new message; the receiving kernel's GRO does not merge
// packets whose TOS differs either.
func TestECNEndToEnd(t *testing.T) {
	inEachModeAndFamily(t, func(t *testing.T, ns *testNetns, mode Mode, fam family) {
		a := ns.open(t, ns.a, Config{Addr: fam.a, Mode: mode})
		b := ns.open(t, ns.b, Config{Addr: fam.b, Mode: mode})
		rb := startReceiver(b)
		type pkt struct {
			payload int
			ecn     ECN
		}
		var plan []pkt
		for range 8 {
			plan = append(plan, pkt{1024, ECT0})
		}
		plan = append(plan, pkt{0, NotECT}, pkt{100, CE}, pkt{1024, CE}, pkt{1024, CE}, pkt{7, ECT1}, pkt{1024, ECT0})
		bufs := make([]*Buf, len(plan))
		want := map[uint32]ECN{}
		for i, p := range plan {
			bufs[i] = NewBuf()
			fillPacket(t, bufs[i], 0x11, uint32(i), p.payload)
			bufs[i].Peer, bufs[i].TOS = fam.b, 0x68 // DSCP AF31
			bufs[i].SetECN(p.ecn)
			want[uint32(i)] = p.ecn
		}
		if err := a.Send(bufs); err != nil {
			t.Fatal(err)
		}
		for _, g := range rb.get(t, len(plan), 5*time.Second) {
			psn := bth.BTH(g.roce).PSN()
			if got := ECN(g.tos & ecnMask); got != want[psn] || g.tos>>2 != 0x68>>2 {
				t.Errorf("PSN %d: TOS %#x (%v), want DSCP AF31 and %v", psn, g.tos, got, want[psn])
			}
			// Over IPv4 the kernel numbers the packets of a GSO
			// run 0, 1, ... and a ModeUDP receiver that gets them
			// one by one cannot see the ID: a 16-bit check.
			anyID := mode == ModeUDP && fam.a.Is4() && g.icrc == ICRCVerifiedAnyID
			if (g.icrc != ICRCVerified && !anyID) || g.peer != fam.a {
				t.Errorf("PSN %d: ICRC %v from %v", psn, g.icrc, g.peer)
			}
		}
		if s := b.Stats(); s.RxDropped() != 0 || s.RxPackets != uint64(len(plan)) {
			t.Errorf("receiver stats %v", s)
		}
	})
}

// The ICRC masks what a router or switch may change on the way (IPv4 TOS
// and TTL; IPv6 traffic class, flow label and hop limit): a packet sealed
// as ECT(0) with hop limit 64 that arrives marked CE, with another DSCP, a
// smaller hop limit and (IPv6) a flow label still verifies in both modes,
// and the receiver sees the header it arrived with. A header that differs
// in a covered field (the UDP source port) fails and is counted.
func TestECNRemarkedInFlight(t *testing.T) {
	inEachModeAndFamily(t, func(t *testing.T, ns *testNetns, mode Mode, fam family) {
		b := ns.open(t, ns.b, Config{Addr: fam.b, Mode: mode})
		rb := startReceiver(b)
		sealed := bth.Envelope{Src: fam.a, Dst: fam.b, SrcPort: 0xc0de, DstPort: bth.UDPPort, TOS: 0x68 | uint8(ECT0), TTL: defaultTTL}
		wire := sealed
		wire.TOS, wire.TTL, wire.FlowLabel = 0xb8|uint8(CE), 7, 0x5eed5
		if fam.a.Is4() {
			wire.FlowLabel = 0
		}
		pkt := NewBuf()
		fillPacket(t, pkt, 0x11, 42, 200)
		sealEnvelope(&sealed, pkt.RoCE())
		ns.run(t, ns.a, func() error { return sendRaw(&wire, pkt.RoCE()) })
		g := rb.get(t, 1, 3*time.Second)[0]
		if g.icrc != ICRCVerified || g.tos != wire.TOS || bth.BTH(g.roce).PSN() != 42 {
			t.Fatalf("remarked packet: ICRC %v, TOS %#x, want verified and %#x", g.icrc, g.tos, wire.TOS)
		}
		wire.SrcPort++
		ns.run(t, ns.a, func() error { return sendRaw(&wire, pkt.RoCE()) })
		waitStats(t, b, "an ICRC error", func(s Stats) bool { return s.RxICRCErrors == 1 })
		rb.none(t, 20*time.Millisecond)
	})
}

// sendRaw sends roce under exactly the IP and UDP headers e describes
// (UDP checksum 0), from a raw socket of the calling thread's namespace.
func sendRaw(e *bth.Envelope, roce []byte) error { return sendRawSum(e, roce, 0) }

// sendRawSum is sendRaw with UDP checksum sum.
func sendRawSum(e *bth.Envelope, roce []byte, sum uint16) error {
	var hdr [bth.MaxEnvelopeLen]byte
	n := e.Put(hdr[:], len(roce))
	binary.BigEndian.PutUint16(hdr[n-2:], sum)
	frame := append(hdr[:n:n], roce...)
	family, level, opt := unix.AF_INET6, unix.IPPROTO_IPV6, unix.IPV6_HDRINCL
	var sa unix.Sockaddr = &unix.SockaddrInet6{Addr: e.Dst.As16()}
	if e.IsIPv4() {
		family, level, opt = unix.AF_INET, unix.IPPROTO_IP, unix.IP_HDRINCL
		sa = &unix.SockaddrInet4{Addr: e.Dst.As4()}
	}
	fd, err := unix.Socket(family, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW)
	if err != nil {
		return os.NewSyscallError("socket", err)
	}
	defer unix.Close(fd)
	if err := unix.SetsockoptInt(fd, level, opt, 1); err != nil {
		return os.NewSyscallError("setsockopt", err)
	}
	return os.NewSyscallError("sendto", unix.Sendto(fd, frame, 0, sa))
}
