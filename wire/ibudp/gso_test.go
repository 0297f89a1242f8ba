package ibudp

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/rnicd/rnicd/internal/looptest"
	"github.com/rnicd/rnicd/wire/bth"
)

// A run is what the kernel may send as one UDP_SEGMENT message: packets of
// one size to one peer with one TOS behind a first that carries a full IB
// MTU, a shorter last one ending it.
func TestGSORun(t *testing.T) {
	ipA, ipB := looptest.Get(t), looptest.Get(t)
	p1, p2 := ipA, ipB
	mk := func(payload int, peer netip.Addr, tos uint8) *Buf {
		b := NewBuf()
		fillPacket(t, b, 0x11, 1, payload)
		b.Peer, b.TOS = peer, tos
		return b
	}
	many := func(k, payload int) []*Buf {
		var out []*Buf
		for range k {
			out = append(out, mk(payload, p1, 0))
		}
		return out
	}
	cases := []struct {
		name string
		bufs []*Buf
		want int
	}{
		{"alone", many(1, 1024), 1},
		{"equal", many(10, 1024), 10},
		{"shorter last ends it", append(append(many(5, 1024), mk(100, p1, 0)), many(3, 1024)...), 6},
		{"not a full MTU", many(10, 1000), 1},
		{"other peer", append(many(3, 1024), mk(1024, p2, 0)), 3},
		{"other TOS", append(many(3, 1024), mk(1024, p1, 2)), 3},
		{"at most 64", many(70, 256), 64},
		{"at most 64 KiB", many(20, 4096), 15}, // 15 x 4112 bytes
		{"longer first goes alone", append([]*Buf{mk(2048, p1, 0)}, many(4, 1024)...), 1},
		{"invalid ends it", append(many(3, 1024), &Buf{}), 3},
	}
	for _, c := range cases {
		if got := gsoRun(c.bufs, false); got != c.want {
			t.Errorf("%s: run of %d, want %d", c.name, got, c.want)
		}
	}
	// By default (small) a first packet of any size starts a run; the
	// rest of the rules hold.
	for _, c := range []struct {
		name string
		bufs []*Buf
		want int
	}{
		{"64 B WRITEs", many(10, 64), 10},
		{"not a full MTU", many(10, 1000), 10},
		{"shorter last ends it", append(append(many(5, 64), mk(8, p1, 0)), many(3, 64)...), 6},
		{"other peer", append(many(3, 64), mk(64, p2, 0)), 3},
		{"other TOS", append(many(3, 64), mk(64, p1, 2)), 3},
		{"at most 64", many(70, 64), 64},
		{"longer one ends it", append(many(3, 64), mk(128, p1, 0)), 3},
	} {
		if got := gsoRun(c.bufs, true); got != c.want {
			t.Errorf("small runs, %s: run of %d, want %d", c.name, got, c.want)
		}
	}
}

// A ModeUDP port sends a run as one message; a ModePacket receiver, which
// sees the run before the kernel cuts it, cuts it itself and checks every
// packet's ICRC with its own IPv4 ID (0, 1, 2, ...); a ModeUDP receiver
// gets packets the kernel cut and finds the same IDs. So for runs of
// full-MTU packets and of small ones (64-byte WRITEs, the smallest packets,
// odd sizes with a shorter last one), and with only full-MTU runs sent
// (Config.FullMTURunsOnly), where the small packets go one a message.
func TestGSORunReceived(t *testing.T) {
	ipA, ipB, ipC, ipD := looptest.Get(t), looptest.Get(t), looptest.Get(t), looptest.Get(t)
	needRoot(t)
	u := openPort(t, Config{Addr: ipA, Mode: ModeUDP})
	if !u.(*udpPort).gso {
		t.Fatal("kernel without UDP_SEGMENT: this test needs Linux 4.18")
	}
	full := openPort(t, Config{Addr: ipD, Mode: ModeUDP, FullMTURunsOnly: true})
	pk := openPort(t, Config{Addr: ipB, Mode: ModePacket})
	ud := openPort(t, Config{Addr: ipC, Mode: ModeUDP})
	rp, ru := startReceiver(pk), startReceiver(ud)
	repeat := func(n, size, last int) []int {
		s := make([]int, n)
		for i := range s {
			s[i] = size
		}
		if last > 0 {
			s[n-1] = last
		}
		return s
	}
	psn := uint32(100)
	for _, c := range []struct {
		name    string
		from    Port
		sizes   []int
		batches uint64 // sendmmsg calls per receiver
	}{
		{"full MTU", u, repeat(41, 1024, 300), 1},
		{"64 B", u, repeat(48, 64, 0), 1},
		{"1 B", u, repeat(64, 1, 0), 1},
		{"37 B, shorter last", u, repeat(30, 37, 5), 1},
		{"64 B, full-MTU runs only", full, repeat(48, 64, 0), 1},
	} {
		n := len(c.sizes)
		for _, r := range []struct {
			to     Port
			r      *receiver
			status func(id uint16) ICRCStatus
		}{
			{pk, rp, func(uint16) ICRCStatus { return ICRCVerified }},
			{ud, ru, func(id uint16) ICRCStatus {
				if id == 0 || c.from == full {
					return ICRCVerified
				}
				return ICRCVerifiedAnyID
			}},
		} {
			before, rbefore := c.from.Stats(), r.to.Stats()
			sent := sendBatch(t, c.from, r.to.Addr(), n, psn, c.sizes, 0, 0)
			got := r.r.get(t, n, 3*time.Second)
			matchAll(t, sent, got)
			for _, g := range got {
				k := uint16(bth.BTH(g.roce).PSN() - psn)
				wantID := k
				if c.from == full {
					wantID = 0 // one datagram each, from an unconnected socket
				}
				if g.ipid != wantID || g.icrc != r.status(k) {
					t.Errorf("%s: packet %d at %v: IPv4 ID %d, ICRC %v", c.name, k, r.to.Addr(), g.ipid, g.icrc)
				}
			}
			psn += uint32(n)
			after, rafter := c.from.Stats(), r.to.Stats()
			if tx, b := after.TxPackets-before.TxPackets, after.TxBatches-before.TxBatches; tx != uint64(n) || b != c.batches || after.TxErrors != 0 {
				t.Errorf("%s: sender sent %d packets in %d sendmmsg calls, want %d in %d", c.name, tx, b, n, c.batches)
			}
			if rx := rafter.RxPackets - rbefore.RxPackets; rx != uint64(n) || rafter.RxICRCErrors != 0 {
				t.Errorf("%s: receiver %v took %d packets, want %d; stats %v", c.name, r.to.Addr(), rx, n, rafter)
			}
		}
	}
}

// By default, 64-byte WRITEs to one peer leave as one message: one
// frame on lo holding them all, which a ModeUDP receiver gets cut by the
// kernel, every packet byte for byte with its own IPv4 ID.
func TestGSOSmallRuns(t *testing.T) {
	src, dst := looptest.Get(t), looptest.Get(t)
	needRoot(t)
	capt := openCapture(t, dst)
	u := openPort(t, Config{Addr: src, Mode: ModeUDP})
	if !u.(*udpPort).gso {
		t.Fatal("kernel without UDP_SEGMENT: this test needs Linux 4.18")
	}
	ud := openPort(t, Config{Addr: dst, Mode: ModeUDP})
	r := startReceiver(ud)
	sizes := make([]int, 10)
	for i := range sizes {
		sizes[i] = 64
	}
	sent := sendBatch(t, u, dst, 10, 500, sizes, 0, 0)
	frame := capt.next(t, func(b []byte) bool {
		return len(b) >= 28 && b[0]>>4 == 4 && netip.AddrFrom4([4]byte(b[12:16])) == src && b[9] == 17
	})
	if want := 28 + 10*len(sent[0].roce); len(frame) != want {
		t.Fatalf("captured %d bytes, want the whole run of 10 in one frame (%d)", len(frame), want)
	}
	got := r.get(t, 10, 3*time.Second)
	matchAll(t, sent, got)
	for _, g := range got {
		k := uint16(bth.BTH(g.roce).PSN() - 500)
		want := ICRCVerifiedAnyID
		if k == 0 {
			want = ICRCVerified
		}
		if g.ipid != k || g.icrc != want {
			t.Errorf("packet %d: IPv4 ID %d, ICRC %v", k, g.ipid, g.icrc)
		}
	}
	if s := ud.Stats(); s.RxPackets != 10 || s.RxICRCErrors != 0 {
		t.Errorf("receiver stats %v: want 10 packets, no ICRC error", s)
	}
}

// Off the wire, a run on lo is one frame; cut as the kernel cuts it, every
// packet's ICRC is right by bth.ParseIP, which knows nothing of runs.
func TestGSOOnTheWire(t *testing.T) {
	ipA, ipB := looptest.Get(t), looptest.Get(t)
	needRoot(t)
	src, dst := ipA, ipB
	capt := openCapture(t, dst)
	u := openPort(t, Config{Addr: src, Mode: ModeUDP})
	openPort(t, Config{Addr: dst, Mode: ModeUDP})
	sizes := []int{1024, 1024, 1024, 40}
	sent := sendBatch(t, u, dst, 4, 7, sizes, 0, 0)
	frame := capt.next(t, func(b []byte) bool {
		return len(b) >= 28 && b[0]>>4 == 4 && netip.AddrFrom4([4]byte(b[12:16])) == src && b[9] == 17
	})
	run := frame[28:]
	if len(frame) != 28+3*len(sent[0].roce)+len(sent[3].roce) {
		t.Fatalf("captured %d bytes, want the whole run in one frame", len(frame))
	}
	for k, s := range sent {
		seg := run[:len(s.roce)]
		run = run[len(s.roce):]
		pkt := append(append([]byte(nil), frame[:28]...), seg...)
		binary.BigEndian.PutUint16(pkt[2:], uint16(len(pkt)))
		binary.BigEndian.PutUint16(pkt[4:], uint16(k))
		binary.BigEndian.PutUint16(pkt[24:], uint16(8+len(seg)))
		binary.BigEndian.PutUint16(pkt[10:], 0)
		binary.BigEndian.PutUint16(pkt[10:], ^refOnesSum(pkt[:20]))
		if _, err := bth.ParseIP(pkt); err != nil {
			t.Errorf("packet %d of the run: %v", k, err)
		}
	}
}

// refOnesSum is the 16-bit ones' complement sum of b, word by word as RFC
// 1071 writes it: the reference for the port's own sums.
func refOnesSum(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	for s > 0xffff {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}

// GRO: a run arrives as one datagram; its packets reach the caller through
// Recv calls with few Bufs (the rest held between calls), a corrupted one
// is dropped and counted, and a corrupted first packet does not take the
// others with it.
func TestGRORunThroughFewBufs(t *testing.T) {
	ipA, ipB := looptest.Get(t), looptest.Get(t)
	u := openPort(t, Config{Addr: ipA, Mode: ModeUDP})
	r := openPort(t, Config{Addr: ipB, Mode: ModeUDP})
	if !r.(*udpPort).gro {
		t.Fatal("kernel without UDP_GRO: this test needs Linux 5.0")
	}
	for _, bad := range []int{-1, 0, 5} {
		bufs := make([]*Buf, 20)
		var want [][]byte
		for i := range bufs {
			bufs[i] = NewBuf()
			n := 1024
			if i == len(bufs)-1 {
				n = 500
			}
			fillPacket(t, bufs[i], 0x11, uint32(1000*(bad+2)+i), n)
			bufs[i].Peer = r.Addr()
			if i == bad {
				bufs[i].Flip = 8*200 + 1 // a payload bit, after sealing
			}
		}
		before := r.Stats()
		if err := u.Send(bufs); err != nil {
			t.Fatal(err)
		}
		for i, b := range bufs {
			if i != bad {
				want = append(want, append([]byte(nil), b.RoCE()...))
			}
		}
		var got [][]byte
		small := []*Buf{NewBuf(), NewBuf(), NewBuf()}
		for len(got) < len(want) {
			n, err := r.Recv(small)
			if err != nil {
				t.Fatal(err)
			}
			for _, b := range small[:n] {
				got = append(got, append([]byte(nil), b.RoCE()...))
			}
		}
		for i := range want {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("bad packet %d: packet %d differs", bad, i)
			}
		}
		after := r.Stats()
		errs := after.RxICRCErrors - before.RxICRCErrors
		if wantErrs := uint64(0); bad >= 0 && errs != 1 || bad < 0 && errs != wantErrs {
			t.Fatalf("bad packet %d: %d ICRC errors counted", bad, errs)
		}
		if after.RxPackets-before.RxPackets != uint64(len(want)) {
			t.Fatalf("bad packet %d: %d packets counted, want %d", bad, after.RxPackets-before.RxPackets, len(want))
		}
	}
}

// Two runs in one batch come out in the order they were sent, each run
// whole before the next, with enough Bufs and with too few, and the tap
// (the trace's port receive, a capture) is shown them in that order: it
// was shown each datagram's first packet, then the rest of each.
func TestGROOrderAcrossRuns(t *testing.T) {
	ipA, ipB := looptest.Get(t), looptest.Get(t)
	u := openPort(t, Config{Addr: ipA, Mode: ModeUDP})
	r := openPort(t, Config{Addr: ipB, Mode: ModeUDP})
	for _, nbufs := range []int{64, 5} {
		tap := &recvTap{}
		if !SetTap(r, tap) {
			t.Fatal("SetTap refused")
		}
		bufs := make([]*Buf, 24)
		for i := range bufs {
			bufs[i] = NewBuf()
			fillPacket(t, bufs[i], 0x11, uint32(i), 1024)
			bufs[i].Peer = r.Addr()
			if i >= 12 {
				bufs[i].TOS = 2 // a second run
			}
		}
		if err := u.Send(bufs); err != nil {
			t.Fatal(err)
		}
		rb := make([]*Buf, nbufs)
		for i := range rb {
			rb[i] = NewBuf()
		}
		var psns []uint32
		for len(psns) < len(bufs) {
			n, err := r.Recv(rb)
			if err != nil {
				t.Fatal(err)
			}
			for _, b := range rb[:n] {
				psns = append(psns, bth.BTH(b.RoCE()).PSN())
			}
		}
		for i, p := range psns {
			if p != uint32(i) {
				t.Fatalf("with %d Bufs: PSNs in the order %v", nbufs, psns)
			}
		}
		if shown := tap.taken(); fmt.Sprint(shown) != fmt.Sprint(psns) {
			t.Fatalf("with %d Bufs: the tap was shown PSNs %v, the caller got %v", nbufs, shown, psns)
		}
	}
}

// recvTap records the PSNs of the packets a tap is shown received.
type recvTap struct {
	mu   sync.Mutex
	psns []uint32
}

func (r *recvTap) Packet(at TapPoint, _, roce []byte, _ ICRCStatus, _ uint32) {
	if at == TapReceived {
		r.mu.Lock()
		r.psns = append(r.psns, bth.BTH(roce).PSN())
		r.mu.Unlock()
	}
}

func (r *recvTap) taken() []uint32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.psns)
}

// The same over IPv6 on ::1: a ModePacket receiver cuts runs of full-MTU
// and of 64-byte packets (whose UDP checksum the kernel leaves to the
// offload, so the frame's is partial) and checks every ICRC fully.
func TestGSORunReceivedIPv6(t *testing.T) {
	needRoot(t)
	pa, pb := uint16(looptest.Port(t)), uint16(looptest.Port(t))
	u, err := Open(Config{Addr: addr("::1"), Port: pa, RemotePort: pb, Mode: ModeUDP})
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	defer u.Close()
	pk := openPort(t, Config{Addr: addr("::1"), Port: pb, RemotePort: pa, Mode: ModePacket})
	r := startReceiver(pk)
	psn := uint32(10)
	for _, size := range []int{64, 1024} {
		before := u.Stats()
		sent := sendBatch(t, u, addr("::1"), 40, psn, []int{size}, 0, 0)
		got := r.get(t, 40, 3*time.Second)
		matchAll(t, sent, got)
		for _, g := range got {
			if g.icrc != ICRCVerified || g.ipid != 0 {
				t.Errorf("size %d: PSN %d: ICRC %v, ID %d", size, bth.BTH(g.roce).PSN(), g.icrc, g.ipid)
			}
		}
		if b := u.Stats().TxBatches - before.TxBatches; b != 1 {
			t.Errorf("size %d: %d sendmmsg calls, want the run in one", size, b)
		}
		psn += 40
	}
	if s := pk.Stats(); s.RxPackets != 80 || s.RxDropped() != 0 {
		t.Errorf("receiver stats %v", s)
	}
}
