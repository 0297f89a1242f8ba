//go:build linux

// The port's test helpers that the injector's tests need, written over
// ibudp's exported API: package ibudp's own tests keep theirs, since a
// test of package ibudp cannot import a package that imports ibudp.

package fault

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/rnicd/rnicd/internal/looptest"
	"github.com/rnicd/rnicd/wire/bth"
	"github.com/rnicd/rnicd/wire/ibudp"
)

// openPort opens a port and closes it when the test ends.
func openPort(t testing.TB, cfg ibudp.Config) ibudp.Port {
	t.Helper()
	p, err := ibudp.Open(cfg)
	if err != nil {
		t.Fatalf("ibudp.Open(%+v): %v", cfg, err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// fillPacket builds an RC SEND MIDDLE (or, with payload 0, an ACK) to qpn
// with psn and a payload pattern derived from psn in b.
func fillPacket(t testing.TB, b *ibudp.Buf, qpn, psn uint32, payload int) {
	t.Helper()
	op := bth.RCSendMiddle
	if payload == 0 {
		op = bth.RCAcknowledge
	}
	p, err := bth.Build(b.Room(), op, payload)
	if err != nil {
		t.Fatalf("bth.Build: %v", err)
	}
	p.BTH().Encode(&bth.BTHFields{Opcode: op, PadCount: bth.PadFor(payload), PKey: bth.DefaultPKey, DestQP: qpn, PSN: psn})
	if op == bth.RCAcknowledge {
		p.AETH().Encode(bth.ACK(bth.CreditsInvalid), psn)
	}
	pl := p.Payload()
	for i := range pl {
		pl[i] = byte(psn*7 + uint32(i))
	}
	b.N = p.Len()
}

// sentPacket is what a test sent, to compare with what arrives.
type sentPacket struct {
	roce []byte
	tos  uint8
}

// received is a copy of a received Buf.
type received struct {
	roce     []byte
	peer     netip.Addr
	peerPort uint16
	tos      uint8
	icrc     ibudp.ICRCStatus
	ipid     uint16
}

// receiver reads a port from a goroutine until it is closed.
type receiver struct {
	ch   chan received
	done chan error
}

func startReceiver(p ibudp.Port) *receiver {
	r := &receiver{ch: make(chan received, 100000), done: make(chan error, 1)}
	go func() {
		bufs := make([]*ibudp.Buf, 64)
		for i := range bufs {
			bufs[i] = ibudp.NewBuf()
		}
		for {
			n, err := p.Recv(bufs)
			if err != nil {
				r.done <- err
				return
			}
			for _, b := range bufs[:n] {
				r.ch <- received{
					roce: bytes.Clone(b.RoCE()), peer: b.Peer, peerPort: b.PeerPort,
					tos: b.TOS, icrc: b.ICRC, ipid: b.IPID,
				}
			}
		}
	}()
	return r
}

// get waits for n packets.
func (r *receiver) get(t testing.TB, n int, timeout time.Duration) []received {
	t.Helper()
	out, err := r.upTo(n, timeout)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// upTo receives until n packets have come; it stops early, with what
// came and why, if the receiver ends or timeout passes.
func (r *receiver) upTo(n int, timeout time.Duration) ([]received, error) {
	var out []received
	deadline := time.After(timeout)
	for len(out) < n {
		select {
		case p := <-r.ch:
			out = append(out, p)
		case err := <-r.done:
			return out, fmt.Errorf("receiver ended after %d of %d packets: %v", len(out), n, err)
		case <-deadline:
			return out, fmt.Errorf("got %d of %d packets in %v", len(out), n, timeout)
		}
	}
	return out, nil
}

// none checks that no packet arrives for a while.
func (r *receiver) none(t testing.TB, wait time.Duration) {
	t.Helper()
	select {
	case p := <-r.ch:
		t.Fatalf("unexpected packet: % x", p.roce)
	case <-time.After(wait):
	}
}

// collect receives until want packets have come, or limit has passed,
// then for a short quiet gap more, to see any beyond want. A quiet gap
// alone is no sign that all have come: beside CPU hogs the receiving
// goroutine may not run for longer than any gap (a 200 ms one ended a
// run of TestFaultRates with 8,349 of 18,830).
func collect(r *receiver, want int, limit time.Duration) []received {
	out, err := r.upTo(want, limit)
	if err != nil {
		return out
	}
	return append(out, drain(r, 50*time.Millisecond)...)
}

// drain receives until nothing has come for quiet.
func drain(r *receiver, quiet time.Duration) []received {
	var out []received
	for {
		select {
		case p := <-r.ch:
			out = append(out, p)
		case <-time.After(quiet):
			return out
		}
	}
}

// sendBatch builds n packets to peer (sizes cycling through sizes) and
// sends them in one call, returning what was sent (sealed).
func sendBatch(t testing.TB, p ibudp.Port, peer netip.Addr, n int, psn0 uint32, sizes []int, srcPort uint16, tos uint8) []sentPacket {
	t.Helper()
	bufs := make([]*ibudp.Buf, n)
	for i := range bufs {
		bufs[i] = ibudp.NewBuf()
		fillPacket(t, bufs[i], 0x11, psn0+uint32(i), sizes[i%len(sizes)])
		bufs[i].Peer, bufs[i].SrcPort, bufs[i].TOS = peer, srcPort, tos
	}
	if err := p.Send(bufs); err != nil {
		t.Fatalf("Send: %v", err)
	}
	out := make([]sentPacket, n)
	for i, b := range bufs {
		out[i] = sentPacket{roce: bytes.Clone(b.RoCE()), tos: tos}
	}
	return out
}

// matchAll checks that got holds exactly the packets of sent (by PSN),
// byte for byte.
func matchAll(t testing.TB, sent []sentPacket, got []received) {
	t.Helper()
	byPSN := map[uint32][]byte{}
	for _, s := range sent {
		byPSN[bth.BTH(s.roce).PSN()] = s.roce
	}
	for _, g := range got {
		psn := bth.BTH(g.roce).PSN()
		want, ok := byPSN[psn]
		if !ok {
			t.Fatalf("unexpected or duplicate packet PSN %d", psn)
		}
		if !bytes.Equal(want, g.roce) {
			t.Fatalf("PSN %d: got\n% x\nwant\n% x", psn, g.roce, want)
		}
		delete(byPSN, psn)
	}
	if len(byPSN) != 0 {
		t.Fatalf("%d packets missing", len(byPSN))
	}
}

func isClosed(err error) bool { return errors.Is(err, net.ErrClosed) }

// waitStats polls a port's counters until cond holds.
func waitStats(t testing.TB, p ibudp.Port, what string, cond func(ibudp.Stats) bool) ibudp.Stats {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for {
		s := p.Stats()
		if cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; stats %+v", what, s)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }

// canRaw reports whether the test may open raw and packet sockets.
func canRaw() bool { return os.Geteuid() == 0 }

// testCloseUnblocks checks that Close wakes a Recv blocked on p, and
// that Send fails after it.
func testCloseUnblocks(t *testing.T, p ibudp.Port) {
	ipA := looptest.Get(t)
	t.Helper()
	done := make(chan error, 1)
	go func() {
		bufs := []*ibudp.Buf{ibudp.NewBuf(), ibudp.NewBuf()}
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
	b := ibudp.NewBuf()
	fillPacket(t, b, 1, 1, 8)
	b.Peer = ipA
	if err := p.Send([]*ibudp.Buf{b}); !isClosed(err) {
		t.Fatalf("Send after Close: %v, want net.ErrClosed", err)
	}
	if _, err := p.Recv([]*ibudp.Buf{ibudp.NewBuf()}); !isClosed(err) {
		t.Fatalf("Recv after Close: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}
