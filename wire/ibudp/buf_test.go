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
			// The kernel reports its drops (SO_RXQ_OVFL) with the next
			// datagram it delivers, so the count is whole only once a
			// 16-byte one, sent after every drop, has been read. It is
			// sent again until one is: while the reader has not yet
			// emptied the 1-byte buffer (a loaded host may not run it for
			// a while) the kernel drops it too, and counts that.
			for seen, k := false, uint32(0); !seen; k++ {
				if k == 100 {
					t.Fatalf("none of %d 16-byte datagrams arrived", k)
				}
				sendBatch(t, a, z.Addr(), 1, 1000+k, []int{16}, 0, 0)
				for _, p := range drain(r, 100*time.Millisecond) {
					seen = seen || len(p.roce) < 100
				}
			}
			if s := z.Stats(); s.RxKernelDrops == 0 || s.RxPackets+s.RxKernelDrops < 201 {
				t.Fatalf("stats %v", s)
			}
		})
	}
}
