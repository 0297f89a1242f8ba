package fault

import (
	"testing"
	"time"

	"github.com/rnicd/rnicd/internal/looptest"
	"github.com/rnicd/rnicd/wire/bth"
	"github.com/rnicd/rnicd/wire/ibudp"
)

// pollAll takes packets off p by polling, as a busy-polling NIC does
// (WaitRecv, then TryRecv until empty), until n arrived or a second
// passed with none, and returns their PSNs.
func pollAll(t *testing.T, p ibudp.Poller, n int) []uint32 {
	t.Helper()
	bufs := []*ibudp.Buf{ibudp.NewBuf(), ibudp.NewBuf(), ibudp.NewBuf(), ibudp.NewBuf()}
	var psns []uint32
	idle := time.Now()
	for len(psns) < n && time.Since(idle) < time.Second {
		got, err := p.TryRecv(bufs)
		if err != nil {
			t.Fatalf("TryRecv: %v", err)
		}
		for _, b := range bufs[:got] {
			psns = append(psns, bth.BTH(b.RoCE()).PSN())
		}
		if got > 0 {
			idle = time.Now()
		} else if !p.Pending() {
			time.Sleep(time.Millisecond) // WaitRecv would block: a test must not
		}
	}
	return psns
}

// A Poller is an ibudp.Poller: without receive impairments it is the
// port's own polling; with them, its TryRecv hands out what the injector
// let through (DropNth 3 loses exactly the third packet), and once they
// are off it is a pass-through again. WaitRecv wakes for a packet in
// either state.
func TestPoller(t *testing.T) {
	a := openPort(t, ibudp.Config{Addr: looptest.Get(t), Mode: ibudp.ModeUDP})
	b := openPort(t, ibudp.Config{Addr: looptest.Get(t), Mode: ibudp.ModeUDP})
	f := NewPoller(b.(ibudp.Poller), 1)
	defer f.Close()

	sendBatch(t, a, b.Addr(), 5, 100, []int{64}, 0, 0)
	got := pollAll(t, f, 5)
	if len(got) != 5 || got[0] != 100 || got[4] != 104 {
		t.Fatalf("pass-through: PSNs %v, want 100..104", got)
	}

	f.SetRX(Faults{DropNth: 3})
	woke := make(chan error, 1)
	go func() { woke <- f.WaitRecv() }()
	sendBatch(t, a, b.Addr(), 5, 200, []int{64}, 0, 0)
	select {
	case err := <-woke:
		if err != nil {
			t.Fatalf("WaitRecv: %v", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("WaitRecv did not wake with receive impairments set")
	}
	got = pollAll(t, f, 4)
	if want := []uint32{200, 201, 203, 204}; len(got) != 4 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] || got[3] != want[3] {
		t.Fatalf("with DropNth 3: PSNs %v, want %v", got, want)
	}
	if st := f.FaultStats(); st.RX.Packets != 10 || st.RX.Dropped != 1 {
		t.Fatalf("RX counts %+v: want 10 packets, 1 dropped", st.RX)
	}

	f.SetRX(Faults{})
	sendBatch(t, a, b.Addr(), 3, 300, []int{64}, 0, 0)
	got = pollAll(t, f, 3)
	if len(got) != 3 || got[0] != 300 || got[2] != 302 {
		t.Fatalf("after the impairments: PSNs %v, want 300..302", got)
	}
	// The injector's reader stops at its next packet; the poll after
	// that takes the fast path again.
	for deadline := time.Now().Add(time.Second); f.rxSet.Load() && time.Now().Before(deadline); {
		if n, err := f.TryRecv([]*ibudp.Buf{ibudp.NewBuf()}); n != 0 || err != nil {
			t.Fatalf("TryRecv with nothing sent: %d, %v", n, err)
		}
	}
	if d := f.FaultStats().RX.Dropped; d != 1 || f.rxSet.Load() {
		t.Fatalf("after the impairments: %d dropped in all, fast path %v", d, !f.rxSet.Load())
	}
	f.Close()
	if _, err := f.TryRecv([]*ibudp.Buf{ibudp.NewBuf()}); !isClosed(err) {
		t.Fatalf("TryRecv after Close: %v", err)
	}
}
