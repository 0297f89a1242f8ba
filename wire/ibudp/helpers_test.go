//go:build linux

package ibudp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/rnicd/rnicd/wire/bth"
)

// needRoot skips a test that needs CAP_NET_RAW or CAP_NET_ADMIN.
func needRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipped: needs root (CAP_NET_RAW / CAP_NET_ADMIN for AF_PACKET, raw sockets or namespaces); CI runs as root")
	}
}

// openPort opens a port and closes it when the test ends.
func openPort(t testing.TB, cfg Config) Port {
	t.Helper()
	p, err := Open(cfg)
	if err != nil {
		t.Fatalf("Open(%+v): %v", cfg, err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// fillPacket builds an RC SEND MIDDLE (or, with payload 0, an ACK) to qpn
// with psn and a payload pattern derived from psn in b.
func fillPacket(t testing.TB, b *Buf, qpn, psn uint32, payload int) {
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
	icrc     ICRCStatus
	ipid     uint16
}

// receiver reads a port from a goroutine until it is closed.
type receiver struct {
	ch   chan received
	done chan error
}

func startReceiver(p Port) *receiver {
	r := &receiver{ch: make(chan received, 100000), done: make(chan error, 1)}
	go func() {
		bufs := make([]*Buf, 64)
		for i := range bufs {
			bufs[i] = NewBuf()
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
	var out []received
	deadline := time.After(timeout)
	for len(out) < n {
		select {
		case p := <-r.ch:
			out = append(out, p)
		case err := <-r.done:
			t.Fatalf("receiver ended after %d of %d packets: %v", len(out), n, err)
		case <-deadline:
			t.Fatalf("got %d of %d packets in %v", len(out), n, timeout)
		}
	}
	return out
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
func sendBatch(t testing.TB, p Port, peer netip.Addr, n int, psn0 uint32, sizes []int, srcPort uint16, tos uint8) []sentPacket {
	t.Helper()
	bufs := make([]*Buf, n)
	for i := range bufs {
		bufs[i] = NewBuf()
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
func waitStats(t testing.TB, p Port, what string, cond func(Stats) bool) Stats {
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

// sealICRC and sealEnvelope seal test packets with bth's own ICRC code, the
// independent reference for the port's.
func sealICRC(hdr, roce []byte) {
	crc, err := bth.ComputeICRC(hdr, roce[:len(roce)-bth.ICRCLen])
	if err != nil {
		panic(err)
	}
	binary.LittleEndian.PutUint32(roce[len(roce)-bth.ICRCLen:], crc)
}

func sealEnvelope(e *bth.Envelope, roce []byte) {
	var h [bth.MaxEnvelopeLen]byte
	sealICRC(h[:e.Put(h[:], len(roce))], roce)
}

// eachWait runs test with the port waiting in the runtime's poller and
// in poll(2) (Config.WaitInKernel), one after the other.
func eachWait(t *testing.T, test func(t *testing.T, waitInKernel bool)) {
	t.Helper()
	t.Run("poller", func(t *testing.T) { test(t, false) })
	t.Run("kernel", func(t *testing.T) { test(t, true) })
}
