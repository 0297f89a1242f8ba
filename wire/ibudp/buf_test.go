//go:build linux

package ibudp

import (
	"testing"
	"time"

	"github.com/rnicd/rnicd/internal/looptest"
)

func TestPool(t *testing.T) {
	p := NewPool(4, 8)
	if p.Allocated() != 4 {
		t.Fatalf("allocated %d", p.Allocated())
	}
	bufs := make([]*Buf, 6)
	p.GetBatch(bufs)
	if p.Allocated() != 6 {
		t.Fatalf("allocated %d after taking 6", p.Allocated())
	}
	bufs[0].N, bufs[0].TOS, bufs[0].Flip = 100, 3, 9
	p.PutBatch(bufs)
	if bufs[0] != nil {
		t.Fatal("PutBatch did not clear the slice")
	}
	b := p.Get()
	if b.N != 0 || b.TOS != 0 || b.Flip != 0 || len(b.Data) != Headroom+MaxRoCELen {
		t.Fatalf("Get returned a dirty Buf: %+v", b)
	}
	p.Put(&Buf{Data: make([]byte, 10)}) // not ours: let go
	p.Put(nil)
	p.Put(b)
	if avg := testing.AllocsPerRun(100, func() { p.Put(p.Get()) }); avg != 0 {
		t.Fatalf("Get/Put allocates %.1f", avg)
	}
	for range 20 {
		p.Put(NewBuf())
	}
	if n := len(p.free); n != 8 {
		t.Fatalf("pool keeps %d Bufs, limit 8", n)
	}
	var zero Pool
	zero.Put(zero.Get())
	if len(zero.free) != 1 {
		t.Fatal("zero Pool does not keep Bufs")
	}
}

func TestBufRoCE(t *testing.T) {
	b := NewBuf()
	if !b.SetRoCE([]byte{1, 2, 3}) || b.N != 3 || b.RoCE()[2] != 3 || b.Data[Headroom] != 1 {
		t.Fatal("SetRoCE")
	}
	if b.SetRoCE(make([]byte, MaxRoCELen+1)) || b.N != 3 {
		t.Fatal("SetRoCE accepted an oversize packet")
	}
	if len(b.Room()) != MaxRoCELen {
		t.Fatal("Room")
	}
}

// When the socket buffer overflows, the kernel's drop count reaches
// Stats.RxKernelDrops. Without GSO/GRO, so that the kernel counts packets
// and not runs.
func TestKernelDropsCounted(t *testing.T) {
	ipA := looptest.Get(t)
	modes := []Mode{ModeUDP}
	if canRaw() {
		modes = append(modes, ModePacket)
	}
	for i, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			a := openPort(t, Config{Addr: ipA, Port: uint16(4800 + 2*i), RemotePort: uint16(4801 + 2*i), Mode: mode, NoGSO: true})
			z := openPort(t, Config{Addr: ipA, Port: uint16(4801 + 2*i), Mode: mode, RcvBuf: 1, NoGSO: true})
			sendBatch(t, a, z.Addr(), 200, 0, []int{1024}, 0, 0)
			r := startReceiver(z)
			drain(r, 50*time.Millisecond)
			sendBatch(t, a, z.Addr(), 1, 1000, []int{16}, 0, 0)
			r.get(t, 1, 2*time.Second)
			if s := z.Stats(); s.RxKernelDrops == 0 || s.RxPackets+s.RxKernelDrops < 201 {
				t.Fatalf("stats %v", s)
			}
		})
	}
}
