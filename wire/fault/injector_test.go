//go:build linux

package fault

import (
	"fmt"
	"math"
	"math/bits"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/rnicd/rnicd/internal/looptest"
	"github.com/rnicd/rnicd/wire/bth"
	"github.com/rnicd/rnicd/wire/ibudp"
)

// memNet is an in-memory wire between memPorts, for testing the fault
// injector without sockets: lossless, in order.
type memNet struct {
	mu    sync.Mutex
	ports map[netip.Addr]*memPort
}

type memPort struct {
	net    *memNet
	addr   netip.Addr
	cond   sync.Cond
	q      []*ibudp.Buf
	closed bool
	stats  ibudp.Stats // guarded by net.mu
}

func newMemPair(a, b netip.Addr) (*memPort, *memPort) {
	n := &memNet{ports: map[netip.Addr]*memPort{}}
	mk := func(x netip.Addr) *memPort {
		p := &memPort{net: n, addr: x}
		p.cond.L = &n.mu
		n.ports[x] = p
		return p
	}
	return mk(a), mk(b)
}

func (p *memPort) Send(bufs []*ibudp.Buf) error {
	p.net.mu.Lock()
	defer p.net.mu.Unlock()
	if p.closed {
		return fmt.Errorf("mem send: %w", net.ErrClosed)
	}
	for _, b := range bufs {
		dst := p.net.ports[b.Peer]
		if b == nil || len(b.Data) != ibudp.BufLen || b.N < bth.BTHLen+bth.ICRCLen || b.N > ibudp.MaxRoCELen || dst == nil {
			p.stats.TxInvalid++
			continue
		}
		b.ApplyFlip() // as a real port does
		c := ibudp.NewBuf()
		c.CopyFrom(b)
		c.Peer, c.ICRC = p.addr, ibudp.ICRCVerified
		dst.q = append(dst.q, c)
		dst.cond.Signal()
		p.stats.TxPackets++
	}
	return nil
}

func (p *memPort) Recv(bufs []*ibudp.Buf) (int, error) {
	p.net.mu.Lock()
	defer p.net.mu.Unlock()
	for len(p.q) == 0 && !p.closed {
		p.cond.Wait()
	}
	if p.closed {
		return 0, fmt.Errorf("mem recv: %w", net.ErrClosed)
	}
	n := 0
	for n < len(bufs) && n < len(p.q) {
		bufs[n].CopyFrom(p.q[n])
		n++
	}
	p.q = p.q[n:]
	p.stats.RxPackets += uint64(n)
	return n, nil
}

func (p *memPort) Addr() netip.Addr { return p.addr }
func (p *memPort) MTU() int         { return 4096 }
func (p *memPort) Stats() ibudp.Stats {
	p.net.mu.Lock()
	defer p.net.mu.Unlock()
	return p.stats
}
func (p *memPort) Close() error {
	p.net.mu.Lock()
	p.closed = true
	p.cond.Broadcast()
	p.net.mu.Unlock()
	return nil
}

var memA, memB = addr("10.0.0.1"), addr("10.0.0.2")

// sendSeq sends packets with PSNs from..to-1 to peer in batches of 50.
func sendSeq(t *testing.T, p ibudp.Port, peer netip.Addr, qpn uint32, from, to int) {
	t.Helper()
	bufs := make([]*ibudp.Buf, 0, 50)
	flush := func() {
		if err := p.Send(bufs); err != nil {
			t.Fatal(err)
		}
		bufs = bufs[:0]
	}
	for psn := from; psn < to; psn++ {
		b := ibudp.NewBuf()
		fillPacket(t, b, qpn, uint32(psn), 32)
		b.Peer = peer
		bufs = append(bufs, b)
		if len(bufs) == cap(bufs) {
			flush()
		}
	}
	flush()
}

// within checks that got is within 4.5 standard deviations of a binomial
// count of n trials at probability p.
func within(t *testing.T, what string, got uint64, n int, p float64) {
	t.Helper()
	mean := float64(n) * p
	sd := math.Sqrt(float64(n) * p * (1 - p))
	if math.Abs(float64(got)-mean) > 4.5*sd+1 {
		t.Errorf("%s: %d, want %.0f ± %.0f", what, got, mean, 4.5*sd)
	}
}

// Drop and duplicate rates are honoured, in each direction, and the
// receiver sees exactly what the counters say.
func TestFaultRates(t *testing.T) {
	for _, dir := range []string{"tx", "rx"} {
		t.Run(dir, func(t *testing.T) {
			pa, pb := newMemPair(memA, memB)
			var sender, recvPort ibudp.Port = pa, pb
			var f *Injector
			faults := Faults{Drop: 0.1, Duplicate: 0.05}
			if dir == "tx" {
				f = New(pa, 1)
				f.SetTX(faults)
				sender = f
			} else {
				f = New(pb, 2)
				f.SetRX(faults)
				recvPort = f
			}
			defer f.Close()
			defer pa.Close()
			r := startReceiver(recvPort)
			const n = 20000
			sendSeq(t, sender, memB, 1, 0, n)
			// Received, the injector counts on the receiving goroutine:
			// its counts are whole once it has taken all n.
			var c Counts
			for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(time.Millisecond) {
				fs := f.FaultStats()
				if c = fs.TX; dir == "rx" {
					c = fs.RX
				}
				if c.Packets == n || time.Now().After(deadline) {
					break
				}
			}
			if c.Packets != n || c.Matched != n {
				t.Fatalf("counts %+v", c)
			}
			within(t, "dropped", c.Dropped, n, 0.1)
			within(t, "duplicated", c.Duplicated, n-int(c.Dropped), 0.05)
			want := n - int(c.Dropped) + int(c.Duplicated)
			got := collect(r, want, 20*time.Second)
			if len(got) != want {
				t.Fatalf("received %d, counters say %d", len(got), want)
			}
			perPSN := map[uint32]int{}
			for _, g := range got {
				perPSN[bth.BTH(g.roce).PSN()]++
			}
			twice := 0
			for _, k := range perPSN {
				if k == 2 {
					twice++
				}
			}
			if twice != int(c.Duplicated) || n-len(perPSN) != int(c.Dropped) {
				t.Fatalf("%d PSNs twice, %d missing; counters %+v", twice, n-len(perPSN), c)
			}
		})
	}
}

// Reordering holds packets back by ReorderBy and loses none.
func TestFaultReorder(t *testing.T) {
	pa, pb := newMemPair(memA, memB)
	f := New(pa, 3)
	defer f.Close()
	f.SetTX(Faults{Reorder: 0.05, ReorderBy: 3})
	r := startReceiver(pb)
	const n = 4000
	sendSeq(t, f, memB, 1, 0, n)
	got := collect(r, n, 20*time.Second)
	if len(got) != n {
		t.Fatalf("received %d of %d", len(got), n)
	}
	late := 0
	maxPSN := -1
	for _, g := range got {
		psn := int(bth.BTH(g.roce).PSN())
		if psn < maxPSN {
			late++
		}
		maxPSN = max(maxPSN, psn)
	}
	c := f.FaultStats().TX
	within(t, "reordered", c.Reordered, n, 0.05)
	if late == 0 || late > int(c.Reordered) {
		t.Fatalf("%d packets arrived late, %d were held", late, c.Reordered)
	}
}

// A held packet with nothing behind it is released by the timeout.
func TestFaultReorderTimeout(t *testing.T) {
	pa, pb := newMemPair(memA, memB)
	f := New(pa, 4)
	defer f.Close()
	f.SetTX(Faults{Reorder: 1, ReorderBy: 5, ReorderTimeout: 30 * time.Millisecond})
	r := startReceiver(pb)
	start := time.Now()
	sendSeq(t, f, memB, 1, 0, 1)
	r.get(t, 1, time.Second)
	if d := time.Since(start); d < 25*time.Millisecond {
		t.Fatalf("released after %v, before the 30ms timeout", d)
	}
}

// Delay is delivered by the timer goroutine: Send returns at once, packets
// arrive after Delay (+ Jitter).
func TestFaultDelay(t *testing.T) {
	for _, dir := range []string{"tx", "rx"} {
		t.Run(dir, func(t *testing.T) {
			pa, pb := newMemPair(memA, memB)
			// Delays of 200-240 ms: far above what handing 100 packets over
			// takes even under -race on a loaded machine, so a Send that
			// waited for them stands out.
			faults := Faults{Delay: 200 * time.Millisecond, Jitter: 40 * time.Millisecond}
			var sender, rp ibudp.Port = pa, pb
			if dir == "tx" {
				f := New(pa, 5)
				defer f.Close()
				f.SetTX(faults)
				sender = f
			} else {
				f := New(pb, 5)
				defer f.Close()
				f.SetRX(faults)
				rp = f
			}
			r := startReceiver(rp)
			start := time.Now()
			sendSeq(t, sender, memB, 1, 0, 100)
			if d := time.Since(start); d > 150*time.Millisecond {
				t.Fatalf("Send blocked for %v", d)
			}
			got := r.get(t, 1, 2*time.Second)
			first := time.Since(start)
			got = append(got, r.get(t, 99, 2*time.Second)...)
			last := time.Since(start)
			if first < 198*time.Millisecond || last > time.Second || len(got) != 100 {
				t.Fatalf("first after %v, last after %v", first, last)
			}
		})
	}
}

// RX corruption flips exactly one bit, never in BTH byte 4, and says so.
func TestFaultCorruptRX(t *testing.T) {
	pa, pb := newMemPair(memA, memB)
	f := New(pb, 6)
	defer f.Close()
	f.SetRX(Faults{Corrupt: 1})
	r := startReceiver(f)
	bufs := make([]*ibudp.Buf, 200)
	want := map[uint32][]byte{}
	for i := range bufs {
		bufs[i] = ibudp.NewBuf()
		fillPacket(t, bufs[i], 1, uint32(i), 64)
		bufs[i].Peer = memB
		want[uint32(i)] = append([]byte(nil), bufs[i].RoCE()...)
	}
	if err := pa.Send(bufs); err != nil {
		t.Fatal(err)
	}
	for _, g := range r.get(t, 200, time.Second) {
		if g.icrc != ibudp.ICRCCorrupted {
			t.Fatalf("ICRC status %v", g.icrc)
		}
		var w []byte
		// The PSN itself may be the corrupted field: find the original by distance.
		for _, c := range want {
			if hamming(c, g.roce) == 1 {
				w = c
				break
			}
		}
		if w == nil {
			t.Fatalf("packet % x is not one bit away from any sent", g.roce[:16])
		}
		if w[4] != g.roce[4] {
			t.Fatal("BTH byte 4 was flipped; the ICRC does not cover it")
		}
	}
	if c := f.FaultStats().RX; c.Corrupted != 200 {
		t.Fatalf("counts %+v", c)
	}
}

func hamming(a, b []byte) int {
	if len(a) != len(b) {
		return -1
	}
	d := 0
	for i := range a {
		d += bits.OnesCount8(a[i] ^ b[i])
	}
	return d
}

// TX corruption happens after sealing: the peer port's ICRC check drops
// every corrupted packet; the caller's buffers keep no pending corruption.
func TestFaultCorruptTXRealPorts(t *testing.T) {
	modes := []ibudp.Mode{ibudp.ModeUDP}
	if canRaw() {
		modes = append(modes, ibudp.ModePacket)
	}
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			a := openPort(t, ibudp.Config{Addr: looptest.Get(t), Mode: mode})
			b := openPort(t, ibudp.Config{Addr: looptest.Get(t), Mode: mode})
			r := startReceiver(b)
			f := New(a, 7)
			defer f.Close()
			f.SetTX(Faults{Corrupt: 1})
			bufs := make([]*ibudp.Buf, 20)
			for j := range bufs {
				bufs[j] = ibudp.NewBuf()
				fillPacket(t, bufs[j], 1, uint32(j), 200)
				bufs[j].Peer = b.Addr()
			}
			if err := f.Send(bufs); err != nil {
				t.Fatal(err)
			}
			waitStats(t, b, "20 ICRC errors", func(s ibudp.Stats) bool { return s.RxICRCErrors == 20 })
			r.none(t, 20*time.Millisecond)
			for _, x := range bufs {
				if x.Flip != 0 {
					t.Fatal("a caller's buffer kept a pending flip")
				}
			}
			f.SetTX(Faults{})
			sent := sendBatch(t, f, b.Addr(), 5, 100, []int{10}, 0, 0)
			matchAll(t, sent, r.get(t, 5, 2*time.Second))
		})
	}
}

// With a QPN filter only that QP's packets are impaired.
func TestFaultQPNFilter(t *testing.T) {
	pa, pb := newMemPair(memA, memB)
	f := New(pa, 8)
	defer f.Close()
	f.SetTX(Faults{Drop: 1, FilterQPN: true, QPN: 5})
	r := startReceiver(pb)
	sendSeq(t, f, memB, 5, 0, 100)
	sendSeq(t, f, memB, 6, 100, 200)
	got := collect(r, 100, 20*time.Second)
	if len(got) != 100 {
		t.Fatalf("received %d, want QP 6's 100", len(got))
	}
	for _, g := range got {
		if bth.BTH(g.roce).DestQP() != 6 {
			t.Fatalf("QP %d got through", bth.BTH(g.roce).DestQP())
		}
	}
	if c := f.FaultStats().TX; c.Packets != 200 || c.Matched != 100 || c.Dropped != 100 {
		t.Fatalf("counts %+v", c)
	}
}

// Settings change while traffic flows in both directions (run with -race).
func TestFaultConcurrent(t *testing.T) {
	pa, pb := newMemPair(memA, memB)
	fa, fb := New(pa, 9), New(pb, 10)
	ra := startReceiver(fa)
	rb := startReceiver(fb)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			c := Faults{Drop: 0.1, Duplicate: 0.1, Reorder: 0.1, Corrupt: 0.1, Jitter: time.Duration(i%3) * time.Millisecond}
			fa.SetTX(c)
			fb.SetRX(c)
			_ = fa.FaultStats()
			time.Sleep(time.Millisecond)
		}
	}()
	for range 2 {
		wg.Add(2)
		go func() { defer wg.Done(); sendSeq(t, fa, memB, 1, 0, 2000) }()
		go func() { defer wg.Done(); sendSeq(t, fb, memA, 1, 0, 2000) }()
	}
	time.Sleep(50 * time.Millisecond)
	close(stop)
	wg.Wait()
	drain(ra, 50*time.Millisecond)
	drain(rb, 50*time.Millisecond)
	fa.Close()
	fb.Close()
}

func TestInjectorCloseUnblocksRecv(t *testing.T) {
	pa, _ := newMemPair(memA, memB)
	testCloseUnblocks(t, New(pa, 11))
}

// psns are the PSNs of received packets, in arrival order.
func psns(got []received) []int {
	out := make([]int, len(got))
	for i, g := range got {
		out[i] = int(bth.BTH(g.roce).PSN())
	}
	return out
}

// wantPSNs checks that got carries PSNs from..to-1 in order.
func wantPSNs(t *testing.T, got []received, from, to int) {
	t.Helper()
	for i, psn := range psns(got) {
		if psn != from+i {
			t.Fatalf("packet %d has PSN %d, want %d (all: %v)", i, psn, from+i, psns(got))
		}
	}
	if len(got) != to-from {
		t.Fatalf("got %d packets, want %d", len(got), to-from)
	}
}

// With nothing set, an injector passes batches straight through in both
// directions (the faults never see them: Matched stays 0); impairments set
// later act, and once they are off and nothing is held or delayed any
// more, it is a pass-through again.
func TestFaultPassThrough(t *testing.T) {
	pa, pb := newMemPair(memA, memB)
	fa, fb := New(pa, 12), New(pb, 13)
	defer fa.Close()
	defer fb.Close()
	r := startReceiver(fb)

	sendSeq(t, fa, memB, 1, 0, 100)
	wantPSNs(t, r.get(t, 100, time.Second), 0, 100)
	if tx, rx := fa.FaultStats().TX, fb.FaultStats().RX; tx.Packets != 100 || tx.Matched != 0 || rx.Packets != 100 || rx.Matched != 0 {
		t.Fatalf("pass-through counted TX %+v RX %+v", tx, rx)
	}

	fb.SetRX(Faults{Delay: 5 * time.Millisecond})
	fa.SetTX(Faults{DropNth: 3})
	sendSeq(t, fa, memB, 1, 100, 150)
	got := r.get(t, 49, time.Second)
	if tx, rx := fa.FaultStats().TX, fb.FaultStats().RX; tx.Matched != 50 || tx.Dropped != 1 || rx.Delayed != 49 {
		t.Fatalf("impairments on: TX %+v RX %+v", tx, rx)
	}
	if ps := psns(got); ps[1] != 101 || ps[2] != 103 {
		t.Fatalf("DropNth 3 should lose PSN 102: %v", ps)
	}

	// Off while a packet is still delayed: it arrives all the same.
	fb.SetRX(Faults{Delay: 20 * time.Millisecond})
	sendSeq(t, fa, memB, 1, 150, 151)
	fb.SetRX(Faults{})
	fa.SetTX(Faults{})
	sendSeq(t, fa, memB, 1, 151, 200)
	if got := r.get(t, 50, time.Second); len(got) != 50 {
		t.Fatalf("after off: %d packets", len(got))
	}
	// The injector's receive goroutine learns that RX is a pass-through
	// again only when its read of the port returns: it may be waiting in
	// that read now, and the first packets after the delayed one then
	// still go through the (empty) faults, counted as matched. A loaded
	// machine makes that likely (the delayed packet's timer fires after
	// the loop's last read). After that read the loop ends.
	sendSeq(t, fa, memB, 1, 200, 300)
	wantPSNs(t, r.get(t, 100, time.Second), 200, 300)
	rx0 := fb.FaultStats().RX
	tx0 := fa.FaultStats().TX
	sendSeq(t, fa, memB, 1, 300, 400)
	wantPSNs(t, r.get(t, 100, time.Second), 300, 400)
	rx1, tx1 := fb.FaultStats().RX, fa.FaultStats().TX
	if rx1.Packets != rx0.Packets+100 || rx1.Matched != rx0.Matched || tx1.Packets != tx0.Packets+100 || tx1.Matched != tx0.Matched {
		t.Fatalf("not a pass-through again: RX %+v then %+v, TX %+v then %+v", rx0, rx1, tx0, tx1)
	}
}
