//go:build linux

package ibudp

import (
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rnicd/rnicd/internal/looptest"
)

// Packets per second through a loopback pair, for each mode and for a plain
// net.UDPConn loop, with the same datagrams: RC SEND MIDDLE packets of 1024
// and 4096 bytes of payload, whose Ethernet frames would be 1082 and 4154
// bytes (UDP payloads of 1040 and 4112). The sender keeps at most 16
// batches of 64 ahead of the receiver, so that the socket buffers do not
// overflow; pkts/s counts packets received. allocs/op is per packet.

var benchPayloads = []int{1024, 4096}

const (
	benchBatch  = 64
	benchWindow = 16 // batches in flight
)

func BenchmarkPort(b *testing.B) {
	for _, mode := range []Mode{ModeUDP, ModePacket} {
		for _, payload := range benchPayloads {
			name := fmt.Sprintf("%v/%dB", mode, payload+58)
			b.Run(name, func(b *testing.B) {
				if mode == ModePacket {
					needRoot(b)
				}
				a := openPort(b, Config{Addr: looptest.Get(b), Mode: mode})
				z := openPort(b, Config{Addr: looptest.Get(b), Mode: mode})
				benchPort(b, a, z, payload, NotECT)
			})
		}
	}
	// IPv6 on ::1, two UDP ports crossed: the kernel's checksum in
	// ModeUDP, the port's own in ModePacket (csum.go).
	for _, mode := range []Mode{ModeUDP, ModePacket} {
		for _, payload := range benchPayloads {
			b.Run(fmt.Sprintf("%v6/%dB", mode, payload+78), func(b *testing.B) {
				if mode == ModePacket {
					needRoot(b)
				}
				pa, pz := uint16(looptest.Port(b)), uint16(looptest.Port(b))
				a := openPort(b, Config{Addr: addr("::1"), Port: pa, RemotePort: pz, Mode: mode})
				z := openPort(b, Config{Addr: addr("::1"), Port: pz, RemotePort: pa, Mode: mode})
				benchPort(b, a, z, payload, NotECT)
			})
		}
	}
	// Every packet ECT(0), as data leaves with DCQCN on: a TOS control
	// message per sendmmsg message, which the default (TOS 0) goes without.
	for _, payload := range benchPayloads {
		b.Run(fmt.Sprintf("udp-ect0/%dB", payload+58), func(b *testing.B) {
			a := openPort(b, Config{Addr: looptest.Get(b), Mode: ModeUDP})
			z := openPort(b, Config{Addr: looptest.Get(b), Mode: ModeUDP})
			benchPort(b, a, z, payload, ECT0)
		})
	}
	for _, payload := range benchPayloads {
		b.Run(fmt.Sprintf("plainUDP/%dB", payload+58), func(b *testing.B) { benchPlainUDP(b, payload) })
	}
}

// flow is the credit scheme that keeps the sender at most benchWindow
// batches ahead of the receiver.
type flow struct {
	credits chan struct{}
	timer   *time.Timer
	stalls  int
}

func newFlow() *flow {
	f := &flow{credits: make(chan struct{}, benchWindow), timer: time.NewTimer(time.Hour)}
	for range benchWindow {
		f.credits <- struct{}{}
	}
	return f
}

// wait takes a credit, or gives up after a while (a packet was lost).
func (f *flow) wait() {
	select {
	case <-f.credits:
		return
	default:
	}
	f.timer.Reset(20 * time.Millisecond)
	select {
	case <-f.credits:
	case <-f.timer.C:
		f.stalls++
	}
}

// give returns the credits for packets received.
func (f *flow) give(got, credited *int) {
	for *got-*credited >= benchBatch {
		select {
		case f.credits <- struct{}{}:
		default:
		}
		*credited += benchBatch
	}
}

func benchPort(b *testing.B, a, z Port, payload int, ecn ECN) {
	bufs := make([]*Buf, benchBatch)
	for i := range bufs {
		bufs[i] = NewBuf()
		fillPacket(b, bufs[i], 0x11, uint32(i), payload)
		bufs[i].Peer = z.Addr()
		bufs[i].SrcPort = 0xc121
		bufs[i].SetECN(ecn)
	}
	f := newFlow()
	var received atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		rb := make([]*Buf, benchBatch)
		for i := range rb {
			rb[i] = NewBuf()
		}
		got, credited := 0, 0
		for {
			n, err := z.Recv(rb)
			if err != nil {
				return
			}
			got += n
			received.Store(int64(got))
			f.give(&got, &credited)
		}
	}()
	b.SetBytes(int64(bufs[0].N))
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	sent := 0
	for sent < b.N {
		f.wait()
		if err := a.Send(bufs); err != nil {
			b.Fatal(err)
		}
		sent += len(bufs)
	}
	waitReceived(&received, sent)
	elapsed := time.Since(start)
	b.StopTimer()
	report(b, int(received.Load()), sent, elapsed, f.stalls)
	z.Close()
	<-done
}

func waitReceived(received *atomic.Int64, sent int) {
	last, lastChange := received.Load(), time.Now()
	for received.Load() < int64(sent) && time.Since(lastChange) < 100*time.Millisecond {
		time.Sleep(100 * time.Microsecond)
		if r := received.Load(); r != last {
			last, lastChange = r, time.Now()
		}
	}
}

func report(b *testing.B, received, sent int, elapsed time.Duration, stalls int) {
	b.ReportMetric(float64(received)/elapsed.Seconds(), "pkts/s")
	b.ReportMetric(float64(sent-received)/float64(sent), "loss")
	if stalls > 0 {
		b.Logf("%d stalls waiting for credits (lost packets)", stalls)
	}
}

// benchPlainUDP is the same loop on two net.UDPConns, one datagram per
// system call.
func benchPlainUDP(b *testing.B, payload int) {
	la := &net.UDPAddr{IP: looptest.Get(b).AsSlice(), Port: 4791}
	lz := &net.UDPAddr{IP: looptest.Get(b).AsSlice(), Port: 4791}
	a, err := net.ListenUDP("udp4", la)
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	z, err := net.ListenUDP("udp4", lz)
	if err != nil {
		b.Fatal(err)
	}
	defer z.Close()
	for _, c := range []*net.UDPConn{a, z} {
		rc, _ := c.SyscallConn()
		rc.Control(func(fd uintptr) { setBuffers(int(fd), DefaultRcvBuf, DefaultSndBuf) })
	}
	pkt := NewBuf()
	fillPacket(b, pkt, 0x11, 1, payload)
	data := pkt.RoCE()
	f := newFlow()
	var received atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, MaxRoCELen)
		got, credited := 0, 0
		for {
			if _, _, err := z.ReadFromUDP(buf); err != nil {
				return
			}
			got++
			received.Store(int64(got))
			f.give(&got, &credited)
		}
	}()
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	sent := 0
	for sent < b.N {
		f.wait()
		for range benchBatch {
			if _, err := a.WriteToUDP(data, lz); err != nil {
				b.Fatal(err)
			}
		}
		sent += benchBatch
	}
	waitReceived(&received, sent)
	elapsed := time.Since(start)
	b.StopTimer()
	report(b, int(received.Load()), sent, elapsed, f.stalls)
	z.Close()
	<-done
}

// The port path allocates nothing per packet: Send, Recv, sealing and
// checking the ICRC included.
func TestPortPathAllocs(t *testing.T) {
	modes := []Mode{ModeUDP}
	if canRaw() {
		modes = append(modes, ModePacket)
	}
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			a := openPort(t, Config{Addr: looptest.Get(t), Mode: mode})
			z := openPort(t, Config{Addr: looptest.Get(t), Mode: mode})
			pool := NewPool(2*benchBatch, 0)
			bufs, rb := make([]*Buf, benchBatch), make([]*Buf, benchBatch)
			pool.GetBatch(rb)
			run := func() {
				pool.GetBatch(bufs)
				for j, x := range bufs {
					fillPacket(t, x, 1, uint32(j), 1024)
					x.Peer, x.TOS = z.Addr(), 0x02
				}
				if err := a.Send(bufs); err != nil {
					t.Fatal(err)
				}
				pool.PutBatch(bufs)
				for got := 0; got < benchBatch; {
					n, err := z.Recv(rb)
					if err != nil {
						t.Fatal(err)
					}
					got += n
				}
			}
			run() // warm up (AllocsPerRun runs it once more before measuring)
			if avg := testing.AllocsPerRun(50, run); avg != 0 {
				t.Fatalf("%.1f allocations per batch of %d", avg, benchBatch)
			}
			if s := z.Stats(); s.RxPackets != 52*benchBatch || s.RxDropped() != 0 {
				t.Fatalf("stats %v", s)
			}
		})
	}
}

// BenchmarkTryRecvEmpty is the cost of the polling engine's look at a
// port with nothing waiting, which it makes at every empty pass: the
// recvmmsg that finds nothing and what the port does around it.
func BenchmarkTryRecvEmpty(b *testing.B) {
	p := openPort(b, Config{Addr: looptest.Get(b), Mode: ModeUDP})
	poller, ok := p.(Poller)
	if !ok {
		b.Skip("the UDP port is not a Poller here")
	}
	bufs := make([]*Buf, DefaultBatch)
	for i := range bufs {
		bufs[i] = NewBuf()
	}
	b.ResetTimer()
	for range b.N {
		if n, err := poller.TryRecv(bufs); n != 0 || err != nil {
			b.Fatalf("TryRecv on an idle port: %d, %v", n, err)
		}
	}
}
