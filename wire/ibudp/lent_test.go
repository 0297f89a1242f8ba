package ibudp

import (
	"bytes"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/rnicd/rnicd/internal/looptest"
	"github.com/rnicd/rnicd/wire/bth"
)

// lendPayloads moves the payload of each of bufs (RC SEND MIDDLEs from
// fillPacket, payload right after the BTH) out to a slice of its own, lent
// by reference, and scribbles over the Buf's copy: a port that sent Data's
// bytes instead of the lent ones would send 0xee.
func lendPayloads(t *testing.T, bufs []*Buf) {
	t.Helper()
	for _, b := range bufs {
		n := b.N - bth.BTHLen - bth.ICRCLen - int(bth.BTH(b.Data[Headroom:]).PadCount())
		if n == 0 {
			continue
		}
		pl := b.Data[Headroom+bth.BTHLen : Headroom+bth.BTHLen+n]
		lent := bytes.Clone(pl)
		for i := range pl {
			pl[i] = 0xee
		}
		if !b.SetPayloadRef(bth.BTHLen, lent) {
			t.Fatalf("SetPayloadRef(%d, %d bytes) refused", bth.BTHLen, n)
		}
	}
}

// Packets whose payload is lent by reference (the requester sending from
// registered memory) arrive byte for byte with their ICRC verified, in
// runs (UDP_SEGMENT) and alone, mixed with ordinary ones; afterwards the
// Bufs read back as the whole packet, lent payload included.
func TestUDPSendLentPayload(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"gso", Config{Mode: ModeUDP}},
		{"gso-full-mtu-runs", Config{Mode: ModeUDP, FullMTURunsOnly: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ca, cb := tc.cfg, tc.cfg
			ca.Addr, cb.Addr = looptest.Get(t), looptest.Get(t)
			a, b := openPort(t, ca), openPort(t, cb)
			rb := startReceiver(b)
			sizes := []int{4096, 4096, 4096, 1, 4096, 0, 3, 256, 256, 256, 4096}
			const n = 150 // more than one sendmmsg of DefaultBatch
			bufs := make([]*Buf, n)
			for i := range bufs {
				bufs[i] = NewBuf()
				fillPacket(t, bufs[i], 0x11, 7000+uint32(i), sizes[i%len(sizes)])
				bufs[i].Peer = b.Addr()
			}
			want := make([][]byte, n)
			for i, buf := range bufs {
				want[i] = bytes.Clone(buf.Data[Headroom : Headroom+buf.N])
			}
			lendPayloads(t, bufs[:n-10]) // the last ten go as before
			if err := a.Send(bufs); err != nil {
				t.Fatalf("Send: %v", err)
			}
			sent := make([]sentPacket, n)
			for i, buf := range bufs {
				roce := buf.RoCE() // copies the lent payload back in
				if !bytes.Equal(roce[:len(roce)-bth.ICRCLen], want[i][:len(roce)-bth.ICRCLen]) {
					t.Fatalf("packet %d after Send: got\n% x\nwant\n% x", i, roce, want[i])
				}
				sent[i] = sentPacket{roce: bytes.Clone(roce)}
			}
			got := rb.get(t, n, 3*time.Second)
			matchAll(t, sent, got)
			for _, g := range got {
				if g.icrc != ICRCVerified && g.icrc != ICRCVerifiedAnyID {
					t.Fatalf("PSN %d: icrc %v", bth.BTH(g.roce).PSN(), g.icrc)
				}
			}
			if s := a.Stats(); s.TxPackets != n {
				t.Fatalf("stats: %v", s)
			}
		})
	}
}

// SetPayloadRef refuses a place outside the RoCE part and RoCE copies a
// lent payload in exactly where it was said to go.
func TestSetPayloadRef(t *testing.T) {
	b := NewBuf()
	if b.SetPayloadRef(bth.BTHLen-1, []byte{1}) || b.SetPayloadRef(MaxRoCELen-1, []byte{1, 2}) || b.SetPayloadRef(-5, nil) {
		t.Fatal("SetPayloadRef took a range outside the RoCE part")
	}
	if b.ext != nil {
		t.Fatal("a refused SetPayloadRef changed the Buf")
	}
	b.N = bth.BTHLen + 3 + bth.ICRCLen
	if !b.SetPayloadRef(bth.BTHLen, []byte{0xa, 0xb, 0xc}) {
		t.Fatal("SetPayloadRef refused a payload inside the RoCE part")
	}
	r := b.RoCE()
	if !bytes.Equal(r[bth.BTHLen:bth.BTHLen+3], []byte{0xa, 0xb, 0xc}) || b.ext != nil {
		t.Fatalf("RoCE = % x, ext %v", r, b.ext)
	}
	if !bytes.Equal(r[:bth.BTHLen], make([]byte, bth.BTHLen)) || !bytes.Equal(r[bth.BTHLen+3:], make([]byte, bth.ICRCLen)) {
		t.Fatalf("RoCE wrote outside the payload: % x", r)
	}
}

// sentTap records what a tap is shown of sent packets; payload is what
// its WantsPayload says.
type sentTap struct {
	payload bool
	mu      sync.Mutex
	roce    [][]byte
	points  map[TapPoint]int
}

func (s *sentTap) Packet(at TapPoint, hdr, roce []byte, icrc ICRCStatus, _ uint32) {
	if at != TapSent && at != TapSentHeaders {
		return
	}
	s.mu.Lock()
	s.roce = append(s.roce, bytes.Clone(roce))
	if s.points == nil {
		s.points = map[TapPoint]int{}
	}
	s.points[at]++
	s.mu.Unlock()
}

func (s *sentTap) WantsPayload() bool { return s.payload }

// A tap that reads no payload (rnic's trace) leaves lent payloads where
// they lie and sees each packet's headers, length and ICRC; one that does
// (a capture) makes the port copy them in and sees the packets whole.
func TestUDPSendLentPayloadTap(t *testing.T) {
	for _, wants := range []bool{false, true} {
		a := openPort(t, Config{Addr: looptest.Get(t), Mode: ModeUDP})
		b := openPort(t, Config{Addr: looptest.Get(t), Mode: ModeUDP})
		rb := startReceiver(b)
		tap := &sentTap{payload: wants}
		if !SetTap(a, tap) {
			t.Fatal("SetTap refused")
		}
		const n = 8
		bufs := make([]*Buf, n)
		for i := range bufs {
			bufs[i] = NewBuf()
			fillPacket(t, bufs[i], 0x11, 100+uint32(i), 4096)
			bufs[i].Peer = b.Addr()
		}
		lendPayloads(t, bufs)
		if err := a.Send(bufs); err != nil {
			t.Fatal(err)
		}
		for i, buf := range bufs {
			if lent := buf.ext != nil; lent == wants {
				t.Fatalf("wants payload %v: packet %d still lent %v after Send", wants, i, lent)
			}
		}
		got := rb.get(t, n, 3*time.Second)
		byPSN := map[uint32][]byte{}
		for _, g := range got {
			byPSN[bth.BTH(g.roce).PSN()] = g.roce
		}
		if len(tap.roce) != n {
			t.Fatalf("tap saw %d packets, want %d", len(tap.roce), n)
		}
		// Without the payload copied in, the tap is told so: a capture
		// that starts meanwhile cannot record the stale bytes.
		want := map[TapPoint]int{TapSentHeaders: n}
		if wants {
			want = map[TapPoint]int{TapSent: n}
		}
		if !maps.Equal(tap.points, want) {
			t.Fatalf("wants payload %v: tap points %v, want %v", wants, tap.points, want)
		}
		for _, r := range tap.roce {
			w := byPSN[bth.BTH(r).PSN()]
			if len(r) != len(w) || !bytes.Equal(r[:bth.BTHLen], w[:bth.BTHLen]) || !bytes.Equal(r[len(r)-bth.ICRCLen:], w[len(w)-bth.ICRCLen:]) {
				t.Fatalf("wants payload %v: tap saw\n% x\nwire had\n% x", wants, r[:16], w[:16])
			}
			if wants && !bytes.Equal(r, w) {
				t.Fatalf("a tap that wants payloads saw a packet that differs from the wire's")
			}
		}
	}
}
