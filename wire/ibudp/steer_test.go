package ibudp

import (
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rnicd/rnicd/internal/looptest"
	"github.com/rnicd/rnicd/wire/bth"
	"github.com/rnicd/rnicd/wire/steer"
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
// queue (the QPN's low byte modulo the queues); a socket of the same uid
// that joins the group gets none of them, and a queue whose socket closed
// gets its packets dropped, not handed to another member.
func TestSteering(t *testing.T) {
	ipA, ipB := looptest.Get(t), looptest.Get(t)
	needRoot(t)
	const queues = 3
	port := openPort(t, Config{Addr: ipA, Mode: ModeUDP, Queues: queues})
	s := SteeringOf(port)
	if s == nil || s.Queues() != queues {
		t.Fatalf("a port of %d queues has Steering %v", queues, s)
	}
	ports := []Port{port}
	for q := 1; q < queues; q++ {
		fd, err := s.Queue(q)
		if err != nil {
			t.Fatal(err)
		}
		qp := openPort(t, Config{Addr: ipA, Mode: ModeUDP, SocketFD: fd})
		if SteeringOf(qp) != nil {
			t.Fatal("a queue's port has a Steering")
		}
		ports = append(ports, qp)
	}
	if _, err := s.Queue(1); err == nil {
		t.Fatal("queue 1 opened twice")
	}
	for _, q := range []int{0, queues} {
		if _, err := s.Queue(q); err == nil {
			t.Fatalf("queue %d of %d opened", q, queues)
		}
	}
	// A socket of the daemon's uid joins the group: the kernel lets it.
	joiner, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(joiner)
	if err := unix.SetsockoptInt(joiner, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); err != nil {
		t.Fatal(err)
	}
	sa := &unix.SockaddrInet4{Port: int(defaultLocalPort), Addr: ipA.As4()}
	if err := unix.Bind(joiner, sa); err != nil {
		t.Fatalf("a socket of the same uid could not join the group: %v", err)
	}
	peer := openPort(t, Config{Addr: ipB, Mode: ModeUDP})
	recv := make([]*receiver, queues)
	for q, p := range ports {
		recv[q] = startReceiver(p)
	}
	psn := uint32(100)
	for _, qpn := range []uint32{0x11, 0x12, 0x13, 0xff, 0x100, 0x1234, 9<<16 | 5, bth.QPNMask, 1} {
		q := steer.QueueOf(qpn, queues)
		if want := int(qpn&0xff) % queues; q != want {
			t.Fatalf("steer.QueueOf(%#x, %d) = %d, want %d", qpn, queues, q, want)
		}
		psn++
		gotQPN(t, recv[q], fmt.Sprintf("queue %d", q), qpn, sendTo(t, peer, port, qpn, psn))
	}
	for q := range recv {
		recv[q].none(t, 20*time.Millisecond)
	}
	if n, _, err := unix.Recvfrom(joiner, make([]byte, 64), unix.MSG_DONTWAIT); !errors.Is(err, unix.EAGAIN) {
		t.Fatalf("the socket that joined the group received %d bytes (%v)", n, err)
	}
	// Queue 2's socket goes: its QPNs' packets are dropped, not steered
	// to the joiner or another queue.
	ports[2].Close()
	for i := range 8 {
		sendTo(t, peer, port, 2+uint32(i)*3, psn+1)
	}
	gotQPN(t, recv[1], "queue 1 after queue 2 closed", 0x13, sendTo(t, peer, port, 0x13, psn+2))
	recv[0].none(t, 50*time.Millisecond)
	recv[1].none(t, 0)
	if n, _, err := unix.Recvfrom(joiner, make([]byte, 64), unix.MSG_DONTWAIT); !errors.Is(err, unix.EAGAIN) {
		t.Fatalf("the socket that joined the group received %d bytes (%v) once a queue closed", n, err)
	}
}

// A port keeps UDP 4791 on its address to itself, steered or not: a
// second port there fails, whichever kind. The steering options need
// ModeUDP.
func TestSteeringConfig(t *testing.T) {
	ipA, ipB, ipC := looptest.Get(t), looptest.Get(t), looptest.Get(t)
	openPort(t, Config{Addr: ipA, Mode: ModeUDP})
	for _, queues := range []int{0, 2} {
		if _, err := Open(Config{Addr: ipA, Mode: ModeUDP, Queues: queues}); err == nil {
			t.Fatalf("a second port (%d queues) bound the address of an unsteered one", queues)
		}
	}
	if os.Geteuid() == 0 {
		openPort(t, Config{Addr: ipB, Mode: ModeUDP, Queues: 2})
		for _, queues := range []int{0, 2} {
			if _, err := Open(Config{Addr: ipB, Mode: ModeUDP, Queues: queues}); err == nil {
				t.Fatalf("a second port (%d queues) bound the address of a steered one", queues)
			}
		}
	}
	if _, err := Open(Config{Addr: ipC, Mode: ModePacket, Queues: 2}); err == nil {
		t.Fatal("a steered ModePacket port opened")
	}
	for _, queues := range []int{-1, steer.MaxQueues + 1} {
		if _, err := Open(Config{Addr: ipC, Mode: ModeUDP, Queues: queues}); err == nil {
			t.Fatalf("a port of %d queues opened", queues)
		}
	}
	// (A lent socket that Open refuses is closed: see the next test.)
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(Config{Addr: ipC, Mode: ModeUDP, Queues: 2, SocketFD: fd}); err == nil {
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
