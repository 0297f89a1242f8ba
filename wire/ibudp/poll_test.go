package ibudp

import (
	"bytes"
	"testing"
	"time"

	"github.com/rnicd/rnicd/internal/looptest"
)

// A polled port: TryRecv never waits, WaitRecv wakes for a packet without
// taking it, and both end with the port; in both wait modes.
func TestPoller(t *testing.T) { eachWait(t, testPoller) }

func testPoller(t *testing.T, waitInKernel bool) {
	ipA, ipB := looptest.Get(t), looptest.Get(t)
	a := openPort(t, Config{Addr: ipA, Mode: ModeUDP, WaitInKernel: waitInKernel})
	b := openPort(t, Config{Addr: ipB, Mode: ModeUDP, WaitInKernel: waitInKernel})
	p, ok := b.(Poller)
	if !ok {
		t.Fatal("a ModeUDP port is not a Poller")
	}
	bufs := []*Buf{NewBuf(), NewBuf(), NewBuf(), NewBuf()}
	if n, err := p.TryRecv(bufs); n != 0 || err != nil {
		t.Fatalf("TryRecv on an empty port = %d, %v", n, err)
	}

	woke := make(chan error, 1)
	go func() { woke <- p.WaitRecv() }()
	select {
	case err := <-woke:
		t.Fatalf("WaitRecv returned %v with nothing sent", err)
	case <-time.After(50 * time.Millisecond):
	}
	sent := sendBatch(t, a, b.Addr(), 3, 700, []int{100, 1024, 0}, 0, 0)
	select {
	case err := <-woke:
		if err != nil {
			t.Fatalf("WaitRecv: %v", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("WaitRecv did not wake for a packet")
	}
	// WaitRecv left the packets there, for TryRecv (which may see the
	// first datagrams before the last has arrived).
	var got [][]byte
	for deadline := time.Now().Add(3 * time.Second); len(got) < len(sent) && time.Now().Before(deadline); {
		n, err := p.TryRecv(bufs)
		if err != nil {
			t.Fatalf("TryRecv: %v", err)
		}
		for _, b := range bufs[:n] {
			got = append(got, bytes.Clone(b.RoCE()))
		}
	}
	inOrder(t, got, sent)
	if n, err := p.TryRecv(bufs); n != 0 || err != nil || p.Pending() {
		t.Fatalf("TryRecv after all = %d, %v; pending %v", n, err, p.Pending())
	}

	go func() { woke <- p.WaitRecv() }()
	time.Sleep(20 * time.Millisecond)
	b.Close()
	select {
	case err := <-woke:
		if !isClosed(err) {
			t.Fatalf("WaitRecv after Close: %v", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("Close did not wake WaitRecv")
	}
	if _, err := p.TryRecv(bufs); !isClosed(err) {
		t.Fatalf("TryRecv after Close: %v", err)
	}
}

// The rest of a GRO datagram that did not fit is Pending, and the next
// TryRecv hands it out before reading the socket again.
func TestPollerPending(t *testing.T) {
	ipA, ipB := looptest.Get(t), looptest.Get(t)
	u := openPort(t, Config{Addr: ipA, Mode: ModeUDP})
	r := openPort(t, Config{Addr: ipB, Mode: ModeUDP})
	if !r.(*udpPort).gro {
		t.Fatal("kernel without UDP_GRO: this test needs Linux 5.0")
	}
	p := r.(Poller)
	sent := sendBatch(t, u, r.Addr(), 10, 100, []int{1024}, 0, 0) // one GSO run
	small := []*Buf{NewBuf(), NewBuf(), NewBuf()}
	var got [][]byte
	for deadline := time.Now().Add(3 * time.Second); len(got) == 0 && time.Now().Before(deadline); {
		n, err := p.TryRecv(small)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range small[:n] {
			got = append(got, bytes.Clone(b.RoCE()))
		}
	}
	if len(got) != 3 || !p.Pending() {
		t.Fatalf("first TryRecv: %d packets, pending %v; want 3 of a coalesced run, the rest pending", len(got), p.Pending())
	}
	for p.Pending() {
		n, err := p.TryRecv(small)
		if err != nil || n == 0 {
			t.Fatalf("TryRecv with packets pending = %d, %v", n, err)
		}
		for _, b := range small[:n] {
			got = append(got, bytes.Clone(b.RoCE()))
		}
	}
	inOrder(t, got, sent)
}

// inOrder checks that got is sent, packet by packet, byte for byte.
func inOrder(t *testing.T, got [][]byte, sent []sentPacket) {
	t.Helper()
	if len(got) != len(sent) {
		t.Fatalf("got %d packets, want %d", len(got), len(sent))
	}
	for i := range sent {
		if !bytes.Equal(got[i], sent[i].roce) {
			t.Fatalf("packet %d differs", i)
		}
	}
}
