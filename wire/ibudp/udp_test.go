//go:build linux

package ibudp

import (
	"errors"
	"net"
	"testing"
	"time"

	"github.com/rnicd/rnicd/internal/looptest"
	"github.com/rnicd/rnicd/wire/bth"
)

var testSizes = []int{0, 1, 2, 3, 256, 1024, 1500, 4096}

// Two ModeUDP ports exchange batches both ways; every packet arrives byte
// for byte, with its ICRC verified, the peer's address and port, and TOS.
func TestUDPExchange(t *testing.T) { eachWait(t, testUDPExchange) }

func testUDPExchange(t *testing.T, waitInKernel bool) {
	ipA, ipB := looptest.Get(t), looptest.Get(t)
	a := openPort(t, Config{Addr: ipA, Mode: ModeUDP, WaitInKernel: waitInKernel})
	b := openPort(t, Config{Addr: ipB, Mode: ModeUDP, WaitInKernel: waitInKernel})
	if a.MTU() != 4096 {
		t.Errorf("MTU on lo = %d, want 4096", a.MTU())
	}
	ra, rb := startReceiver(a), startReceiver(b)

	sent := sendBatch(t, a, b.Addr(), 64, 1000, testSizes, 0, 0x02) // ECT(0)
	got := rb.get(t, 64, 3*time.Second)
	matchAll(t, sent, got)
	for _, g := range got {
		// Packets behind the first of a run (equal sizes in a row) carry
		// IDs 1, 2, ...: the socket does not show them, so they are checked
		// for any ID.
		icrc := ICRCVerified
		if g.ipid != 0 {
			icrc = ICRCVerifiedAnyID
		}
		if g.peer != a.Addr() || g.peerPort != bth.UDPPort || g.tos != 0x02 || g.icrc != icrc {
			t.Fatalf("metadata: peer %v:%d tos %#x icrc %v (ID %d)", g.peer, g.peerPort, g.tos, g.icrc, g.ipid)
		}
	}

	sent = sendBatch(t, b, a.Addr(), 200, 5000, testSizes, 0, 0xb8) // DSCP EF, two sendmmsg chunks and more
	got = ra.get(t, 200, 3*time.Second)
	matchAll(t, sent, got)
	for _, g := range got {
		if g.tos != 0xb8 {
			t.Fatalf("tos %#x, want 0xb8", g.tos)
		}
	}
	ra.none(t, 50*time.Millisecond)
	sa, sb := a.Stats(), b.Stats()
	if sa.TxPackets != 64 || sa.RxPackets != 200 || sb.TxPackets != 200 || sb.RxPackets != 64 || sa.RxDropped()+sb.RxDropped() != 0 {
		t.Fatalf("stats a: %v; b: %v", sa, sb)
	}
	if sa.TxBatches < 1 || sb.TxBatches < 4 || sa.RxBatches < 1 {
		t.Fatalf("batches a: %v; b: %v", sa, sb)
	}
}

// IPv6: two ports on ::1 (different UDP ports, RemotePort crosses them).
func TestUDPExchangeIPv6(t *testing.T) {
	// Ports of this test's own: ::1 is the one IPv6 loopback address.
	pa, pb := uint16(looptest.Port(t)), uint16(looptest.Port(t))
	a, err := Open(Config{Addr: addr("::1"), Port: pa, RemotePort: pb, Mode: ModeUDP})
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	defer a.Close()
	b := openPort(t, Config{Addr: addr("::1"), Port: pb, RemotePort: pa, Mode: ModeUDP})
	ra, rb := startReceiver(a), startReceiver(b)
	sent := sendBatch(t, a, addr("::1"), 64, 10, testSizes, 0, 0x01)
	got := rb.get(t, 64, 3*time.Second)
	matchAll(t, sent, got)
	if g := got[0]; g.peerPort != pa || g.tos != 0x01 || g.icrc != ICRCVerified {
		t.Fatalf("metadata %+v", g)
	}
	sent = sendBatch(t, b, addr("::1"), 64, 20, testSizes, 0, 0)
	matchAll(t, sent, ra.get(t, 64, 3*time.Second))
}

// Recv returns net.ErrClosed promptly after Close, and Send fails after it.
func TestUDPCloseUnblocksRecv(t *testing.T) { eachWait(t, testUDPCloseUnblocksRecv) }

func testUDPCloseUnblocksRecv(t *testing.T, waitInKernel bool) {
	ipA := looptest.Get(t)
	p := openPort(t, Config{Addr: ipA, Mode: ModeUDP, WaitInKernel: waitInKernel})
	testCloseUnblocks(t, p)
}

func testCloseUnblocks(t *testing.T, p Port) {
	ipA := looptest.Get(t)
	t.Helper()
	done := make(chan error, 1)
	go func() {
		bufs := []*Buf{NewBuf(), NewBuf()}
		_, err := p.Recv(bufs)
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case err := <-done:
		if !isClosed(err) {
			t.Fatalf("Recv after Close: %v, want net.ErrClosed", err)
		}
		if d := time.Since(start); d > 500*time.Millisecond {
			t.Fatalf("Recv took %v to return after Close", d)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Recv still blocked 2s after Close")
	}
	b := NewBuf()
	fillPacket(t, b, 1, 1, 8)
	b.Peer = ipA
	if err := p.Send([]*Buf{b}); !isClosed(err) {
		t.Fatalf("Send after Close: %v, want net.ErrClosed", err)
	}
	if _, err := p.Recv([]*Buf{NewBuf()}); !isClosed(err) {
		t.Fatalf("Recv after Close: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// Garbage sent to a ModeUDP port from an ordinary socket is counted and
// dropped; a good packet after it still arrives.
func TestUDPDropsGarbage(t *testing.T) {
	ipA, ipB := looptest.Get(t), looptest.Get(t)
	p := openPort(t, Config{Addr: ipA, Mode: ModeUDP})
	r := startReceiver(p)
	c, err := net.DialUDP("udp4", &net.UDPAddr{IP: ipB.AsSlice()}, &net.UDPAddr{IP: ipA.AsSlice(), Port: 4791})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	good := NewBuf()
	fillPacket(t, good, 3, 77, 100)
	env := bth.Envelope{Src: ipB, Dst: ipA, SrcPort: uint16(c.LocalAddr().(*net.UDPAddr).Port), DstPort: 4791}
	sealEnvelope(&env, good.RoCE())
	badICRC := append([]byte(nil), good.RoCE()...)
	badICRC[20] ^= 0x40
	badOpcode := append([]byte(nil), good.RoCE()...)
	badOpcode[0] = 0x1f // reserved RC opcode
	sealEnvelope(&env, badOpcode)
	for _, d := range [][]byte{{}, {1, 2, 3}, make([]byte, 15), badICRC, badOpcode, make([]byte, MaxRoCELen+1)} {
		if _, err := c.Write(d); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Write(good.RoCE()); err != nil {
		t.Fatal(err)
	}
	got := r.get(t, 1, 2*time.Second)
	if bth.BTH(got[0].roce).PSN() != 77 || got[0].icrc != ICRCVerified {
		t.Fatalf("got %+v", got[0])
	}
	s := p.Stats()
	if s.RxShort != 3 || s.RxICRCErrors != 1 || s.RxMalformed != 1 || s.RxTooLong != 1 || s.RxPackets != 1 {
		t.Fatalf("stats %v", s)
	}
}

// Send refuses, and counts, Bufs it cannot send, and sends the rest.
func TestSendInvalid(t *testing.T) {
	ipA, ipB := looptest.Get(t), looptest.Get(t)
	a := openPort(t, Config{Addr: ipA, Mode: ModeUDP})
	b := openPort(t, Config{Addr: ipB, Mode: ModeUDP})
	r := startReceiver(b)
	bufs := []*Buf{NewBuf(), NewBuf(), NewBuf(), NewBuf(), {Data: make([]byte, 10)}, nil}
	for i, x := range bufs[:4] {
		fillPacket(t, x, 1, uint32(i), 16)
		x.Peer = b.Addr()
	}
	bufs[1].N = 3              // too short
	bufs[2].Peer = addr("::1") // wrong family
	bufs[3].Peer = ipB         // fine
	if err := a.Send(bufs); err != nil {
		t.Fatal(err)
	}
	r.get(t, 2, 2*time.Second)
	if s := a.Stats(); s.TxInvalid != 4 || s.TxPackets != 2 {
		t.Fatalf("stats %v", s)
	}
}

// A packet too big for the path is refused by the kernel (DF), counted as
// a send error, and does not stop the rest of the batch.
func TestSendErrorCounted(t *testing.T) {
	ipA := looptest.Get(t)
	needRoot(t) // sets an MTU on a namespace's loopback
	withNetns(t, func(ns *testNetns) {
		ns.run(t, ns.a, func() error {
			if err := setLoMTU(1280); err != nil {
				return err
			}
			// Without GSO: a run the kernel refuses is refused whole.
			p, err := Open(Config{Addr: ipA, Mode: ModeUDP, NoGSO: true})
			if err != nil {
				return err
			}
			defer p.Close()
			bufs := []*Buf{NewBuf(), NewBuf(), NewBuf()}
			fillPacket(t, bufs[0], 1, 1, 64)
			fillPacket(t, bufs[1], 1, 2, 4096) // > 1280
			fillPacket(t, bufs[2], 1, 3, 64)
			for _, b := range bufs {
				b.Peer = ipA
			}
			if err := p.Send(bufs); err != nil {
				return err
			}
			s := p.Stats()
			if s.TxPackets != 2 || s.TxErrors != 1 || !errors.Is(s.TxLastErrno, errMsgSize) {
				t.Errorf("stats %v", s)
			}
			if p.MTU() != 1024 {
				t.Errorf("MTU %d with lo at 1280, want 1024", p.MTU())
			}
			return nil
		})
	})
}
