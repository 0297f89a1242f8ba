package ibudp

import (
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rnicd/rnicd/internal/looptest"
	"github.com/rnicd/rnicd/wire/bth"
)

// sendTo sends one packet to qpn at peer and returns its PSN.
func sendTo(t *testing.T, p Port, peer Port, qpn, psn uint32) uint32 {
	t.Helper()
	b := NewBuf()
	fillPacket(t, b, qpn, psn, 64)
	b.Peer = peer.Addr()
	if err := p.Send([]*Buf{b}); err != nil {
		t.Fatal(err)
	}
	return psn
}

// gotQPN checks that r receives exactly one packet, to qpn with psn.
func gotQPN(t *testing.T, r *receiver, what string, qpn, psn uint32) {
	t.Helper()
	g := r.get(t, 1, 3*time.Second)[0]
	h := bth.BTH(g.roce)
	if h.DestQP() != qpn || h.PSN() != psn {
		t.Fatalf("%s: got a packet to QP %#x PSN %d, want QP %#x PSN %d", what, h.DestQP(), h.PSN(), qpn, psn)
	}
}

// The kernel steers each datagram to the socket of its destination QP's
// block: a lent block's to the lent socket, every other to the port's,
// and a released block's to the port's again.
func TestSteering(t *testing.T) {
	ipA, ipB := looptest.Get(t), looptest.Get(t)
	needRoot(t)
	port := openPort(t, Config{Addr: ipA, Mode: ModeUDP, Steered: true})
	s := SteeringOf(port)
	if s == nil {
		t.Fatal("a Steered port has no Steering")
	}
	block, fd, err := s.Lend()
	if err != nil {
		t.Fatal(err)
	}
	if block != 1 {
		t.Fatalf("first lent block %d, want 1", block)
	}
	lent := openPort(t, Config{Addr: ipA, Mode: ModeUDP, SocketFD: fd})
	if SteeringOf(lent) != nil {
		t.Fatal("a lent socket's port has a Steering")
	}
	peer := openPort(t, Config{Addr: ipB, Mode: ModeUDP})
	rPort, rLent := startReceiver(port), startReceiver(lent)

	first, last := SteerBlockQPNs(block)
	for i, qpn := range []uint32{first, first | 0x1234, last} {
		gotQPN(t, rLent, "lent block", qpn, sendTo(t, peer, port, qpn, uint32(100+i)))
	}
	for i, qpn := range []uint32{0x11, 0xffff, 9<<16 | 5, bth.QPNMask} {
		gotQPN(t, rPort, "port's own or unlent block", qpn, sendTo(t, peer, port, qpn, uint32(200+i)))
	}
	rLent.none(t, 50*time.Millisecond)

	block2, fd2, err := s.Lend()
	if err != nil || block2 != 2 {
		t.Fatalf("second Lend: block %d, %v; want 2", block2, err)
	}
	lent2 := openPort(t, Config{Addr: ipA, Mode: ModeUDP, SocketFD: fd2})
	rLent2 := startReceiver(lent2)
	first2, _ := SteerBlockQPNs(block2)
	gotQPN(t, rLent2, "second lent block", first2|7, sendTo(t, peer, port, first2|7, 300))

	if err := s.Release(block); err != nil {
		t.Fatal(err)
	}
	gotQPN(t, rPort, "released block", first|0x1234, sendTo(t, peer, port, first|0x1234, 400))
	gotQPN(t, rLent2, "block lent still", first2|7, sendTo(t, peer, port, first2|7, 401))
	rLent.none(t, 50*time.Millisecond)
	if err := s.Release(block); err == nil {
		t.Fatal("a second Release of a block succeeded")
	}
	if b, fd3, err := s.Lend(); err != nil || b != block {
		t.Fatalf("Lend after Release: block %d, %v; want the released %d", b, err, block)
	} else {
		openPort(t, Config{Addr: ipA, Mode: ModeUDP, SocketFD: fd3})
	}
}

// A port keeps UDP 4791 on its address to itself, steered or not: a
// second port there fails, whichever kind. The steering options need
// ModeUDP.
func TestSteeringConfig(t *testing.T) {
	ipA, ipB, ipC := looptest.Get(t), looptest.Get(t), looptest.Get(t)
	openPort(t, Config{Addr: ipA, Mode: ModeUDP})
	for _, steered := range []bool{false, true} {
		if _, err := Open(Config{Addr: ipA, Mode: ModeUDP, Steered: steered}); err == nil {
			t.Fatalf("a second port (steered %v) bound the address of an unsteered one", steered)
		}
	}
	if os.Geteuid() == 0 {
		openPort(t, Config{Addr: ipB, Mode: ModeUDP, Steered: true})
		for _, steered := range []bool{false, true} {
			if _, err := Open(Config{Addr: ipB, Mode: ModeUDP, Steered: steered}); err == nil {
				t.Fatalf("a second port (steered %v) bound the address of a steered one", steered)
			}
		}
	}
	if _, err := Open(Config{Addr: ipC, Mode: ModePacket, Steered: true}); err == nil {
		t.Fatal("a Steered ModePacket port opened")
	}
	// (A lent socket that Open refuses is closed: see the next test.)
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(Config{Addr: ipC, Mode: ModeUDP, Steered: true, SocketFD: fd}); err == nil {
		t.Fatal("a Steered port on a lent socket opened")
	}
}

// A lent socket is the port's from Open on: a failed Open closes it.
func TestSocketFDClosedOnFailure(t *testing.T) {
	ipA := looptest.Get(t)
	for _, cfg := range []Config{
		{Addr: ipA, Mode: ModeUDP, MTU: 1234},    // refused by the config check
		{Addr: ipA, Mode: ModePacket, MTU: 1024}, // packet mode cannot take one
		{Addr: addr("192.0.2.1"), Mode: ModeUDP}, // no interface, no MTU given
	} {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		cfg.SocketFD = fd
		if p, err := Open(cfg); err == nil {
			p.Close()
			t.Fatalf("Open(%+v) succeeded", cfg)
		}
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != unix.EBADF {
			unix.Close(fd)
			t.Fatalf("Open(%+v) failed and left the socket open (%v)", cfg, err)
		}
	}
}
