package fault

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/rnicd/rnicd/internal/looptest"
	"github.com/rnicd/rnicd/wire/bth"
	"github.com/rnicd/rnicd/wire/ibudp"
)

// eachLinkMode opens two loopback ports in each mode this user can, and
// an Injector with seed 7 over the first.
func eachLinkMode(t *testing.T, test func(t *testing.T, f *Injector, a, b ibudp.Port, r *receiver)) {
	modes := []ibudp.Mode{ibudp.ModeUDP}
	if canRaw() {
		modes = append(modes, ibudp.ModePacket)
	}
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			a := openPort(t, ibudp.Config{Addr: looptest.Get(t), Mode: mode})
			b := openPort(t, ibudp.Config{Addr: looptest.Get(t), Mode: mode})
			f := New(a, 7)
			t.Cleanup(func() { f.Close() })
			test(t, f, a, b, startReceiver(b))
		})
	}
}

// linkTap records the link's marks and drops with the depth they met.
type linkTap struct {
	marks, drops []int // depths
}

func (*linkTap) Packet(ibudp.TapPoint, []byte, []byte, ibudp.ICRCStatus, uint32) {}
func (l *linkTap) LinkPacket(at ibudp.TapPoint, roce []byte, depth int, _ uint32) {
	switch at {
	case ibudp.TapLinkMarkTX:
		l.marks = append(l.marks, depth)
	case ibudp.TapLinkDropTX:
		l.drops = append(l.drops, depth)
	}
}

// A burst of 100 packets into a 50 KB queue: 48 fit, 52 are dropped at
// the tail; the ECT(0) ones that meet a queue of 10 KB or more leave
// marked CE, the Not-ECT ones never are; they arrive no faster than the
// link's 80 Mb/s, and the counters and the tap say exactly that. One
// batch is one instant to the injector, so the queue does not drain
// during it and every figure is exact.
func TestLinkTailDropAndMark(t *testing.T) {
	eachLinkMode(t, func(t *testing.T, f *Injector, a, b ibudp.Port, r *receiver) {
		tap := &linkTap{}
		ibudp.SetTap(f, tap)
		f.SetTX(Faults{Link: Link{Rate: 80_000_000, Queue: 50 << 10, KMin: 10 << 10, KMax: 10 << 10, PMax: 1}})
		const frame = 12 + 1000 + 4 + 20 + 8 + 14 + 4 // RoCE part, IPv4, UDP, Ethernet header and FCS
		bufs := make([]*ibudp.Buf, 100)
		for i := range bufs {
			bufs[i] = ibudp.NewBuf()
			fillPacket(t, bufs[i], 0x11, uint32(i), 1000)
			bufs[i].Peer, bufs[i].TOS = b.Addr(), 0x68
			if i%2 == 0 {
				bufs[i].SetECN(ibudp.ECT0)
			}
		}
		start := time.Now()
		if err := f.Send(bufs); err != nil {
			t.Fatal(err)
		}
		got := r.get(t, 48, 5*time.Second)
		if el := time.Since(start); el < time.Duration(48*frame*8*1e9/80e6)-time.Millisecond {
			t.Errorf("48 frames of %d bytes through an 80 Mb/s link in %v", frame, el)
		}
		r.none(t, 20*time.Millisecond)
		for i, g := range got {
			psn := int(bth.BTH(g.roce).PSN())
			want := ibudp.NotECT
			switch {
			case psn%2 == 1:
			case psn*frame >= 10<<10:
				want = ibudp.CE
			default:
				want = ibudp.ECT0
			}
			if psn != i || ibudp.ECN(g.tos&0b11) != want || g.tos>>2 != 0x68>>2 {
				t.Errorf("packet %d: PSN %d TOS %#x, want PSN %d %v", i, psn, g.tos, i, want)
			}
		}
		st := f.FaultStats().TX
		if st.LinkPackets != 48 || st.LinkDropped != 52 || st.Marked != 19 || st.QueuePeak != 48*frame {
			t.Errorf("counts %+v, want 48 through, 52 dropped, 19 marked, peak %d", st, 48*frame)
		}
		if st.QueueDepth != 0 {
			t.Errorf("queue depth %d once everything arrived", st.QueueDepth)
		}
		if len(tap.marks) != 19 || tap.marks[0] != 10*frame || len(tap.drops) != 52 || tap.drops[0] != 48*frame {
			t.Errorf("tap: marks at %v, drops at %v", tap.marks, tap.drops)
		}
		// The bottleneck off: a pass-through again.
		f.SetTX(Faults{})
		sent := sendBatch(t, f, b.Addr(), 5, 100, []int{10}, 0, 0)
		matchAll(t, sent, r.get(t, 5, 2*time.Second))
	})
}

// RED between KMin and KMax marks with probability PMax*(d-KMin)/(KMax-KMin)
// on the depth d a packet meets: with the injector's seed, exactly the
// packets a replay of its random numbers picks.
func TestLinkRED(t *testing.T) {
	eachLinkMode(t, func(t *testing.T, f *Injector, a, b ibudp.Port, r *receiver) {
		l := NewLink(1_000_000_000)
		l.PMax = 0.5 // to mark enough of 240 packets to tell
		f.SetTX(Faults{Link: l})
		const n, frame = 240, 12 + 1000 + 4 + 20 + 8 + 14 + 4
		bufs := make([]*ibudp.Buf, n)
		for i := range bufs {
			bufs[i] = ibudp.NewBuf()
			fillPacket(t, bufs[i], 0x11, uint32(i), 1000)
			bufs[i].Peer = b.Addr()
			bufs[i].SetECN(ibudp.ECT0)
		}
		if err := f.Send(bufs); err != nil {
			t.Fatal(err)
		}
		// The replay: the same generator as New(_, 7), one draw
		// per packet whose probability is not 0.
		rng := rand.New(rand.NewPCG(7, 0x9e3779b97f4a7c15))
		want := map[uint32]bool{}
		for i := range n {
			d := float64(i * frame)
			var p float64
			switch {
			case d < 5<<10:
			case d >= 200<<10:
				p = 1
			default:
				p = 0.5 * (d - 5<<10) / (200<<10 - 5<<10)
			}
			if p > 0 && rng.Float64() < p {
				want[uint32(i)] = true
			}
		}
		got := r.get(t, n, 5*time.Second)
		marked := 0
		for _, g := range got {
			psn := bth.BTH(g.roce).PSN()
			if ce := ibudp.ECN(g.tos&0b11) == ibudp.CE; ce != want[psn] {
				t.Errorf("PSN %d (depth %d): ibudp.CE %v, want %v", psn, int(psn)*frame, ce, want[psn])
			}
			if ibudp.ECN(g.tos&0b11) == ibudp.CE {
				marked++
			}
		}
		// Past KMax (packets 193 on) every packet is marked.
		if st := f.FaultStats().TX; st.Marked != uint64(len(want)) || marked != len(want) || st.LinkDropped != 0 || len(want) < 60 {
			t.Errorf("%d marked (counter %d), replay says %d; %d dropped", marked, st.Marked, len(want), st.LinkDropped)
		}
	})
}

// The link on the RX side: the engine above the Injector sees what the far
// side sent, marked and thinned as the queue in front of it decides.
func TestLinkRX(t *testing.T) {
	a := openPort(t, ibudp.Config{Addr: looptest.Get(t)})
	b := openPort(t, ibudp.Config{Addr: looptest.Get(t)})
	f := New(b, 7)
	t.Cleanup(func() { f.Close() })
	f.SetRX(Faults{Link: Link{Rate: 800_000_000, Queue: 8 << 10, KMin: 0, KMax: 0}})
	r := startReceiver(f)
	bufs := make([]*ibudp.Buf, 20)
	for i := range bufs {
		bufs[i] = ibudp.NewBuf()
		fillPacket(t, bufs[i], 0x11, uint32(i), 1000)
		bufs[i].Peer = f.Addr()
		bufs[i].SetECN(ibudp.ECT0)
	}
	if err := a.Send(bufs); err != nil {
		t.Fatal(err)
	}
	// How many fit depends on how the kernel hands the packets up (one
	// read or several, the queue draining between them), but no mark
	// (KMax 0), and what the queue took and dropped adds up.
	var st Counts
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if st = f.FaultStats().RX; st.LinkPackets+st.LinkDropped == 20 {
			break
		}
	}
	got := collect(r, int(st.LinkPackets), 20*time.Second)
	if st.LinkPackets+st.LinkDropped != 20 || uint64(len(got)) != st.LinkPackets || st.Marked != 0 || st.LinkPackets < 7 {
		t.Fatalf("%d received; counts %+v", len(got), st)
	}
	for _, g := range got {
		if ibudp.ECN(g.tos&0b11) != ibudp.ECT0 {
			t.Fatalf("TOS %#x", g.tos)
		}
	}
}

// With Dequeue, a packet is marked on the queue it leaves behind: of a
// burst into a 400 kb/s link (a frame every 21.6 ms), the first ECT(0)
// packets, which leave 45 or more frames behind them, leave marked (a
// timer 0.8 s late would be needed to unmark them; at 2 Mb/s, PSN 2 left
// 8.6 ms after the first, before a loaded -race run had queued the rest
// of the burst, and left unmarked); the
// last ones, which leave less than 10 KB, never are (a late timer only
// drains the queue further, so it can unmark a packet, never mark one);
// the marks met at enqueue (TestLinkTailDropAndMark) are the other end
// of the burst.
func TestLinkMarkDequeue(t *testing.T) {
	eachLinkMode(t, func(t *testing.T, f *Injector, a, b ibudp.Port, r *receiver) {
		tap := &linkTap{}
		ibudp.SetTap(f, tap)
		l := Link{Rate: 400_000, Queue: 50 << 10, KMin: 10 << 10, KMax: 10 << 10, PMax: 1, Dequeue: true}
		f.SetTX(Faults{Link: l})
		const frame = 12 + 1000 + 4 + 20 + 8 + 14 + 4
		const n = 48 // what fits: 48 frames of 1082 bytes in 50 KB
		bufs := make([]*ibudp.Buf, n)
		for i := range bufs {
			bufs[i] = ibudp.NewBuf()
			fillPacket(t, bufs[i], 0x11, uint32(i), 1000)
			bufs[i].Peer = b.Addr()
			if i%2 == 0 {
				bufs[i].SetECN(ibudp.ECT0)
			}
		}
		if err := f.Send(bufs); err != nil {
			t.Fatal(err)
		}
		got := r.get(t, n, 10*time.Second)
		ce := 0
		for i, g := range got {
			psn := int(bth.BTH(g.roce).PSN())
			behind := (n - 1 - psn) * frame // the depth when it leaves, on time
			isCE := ibudp.ECN(g.tos&0b11) == ibudp.CE
			switch {
			case psn != i:
				t.Errorf("packet %d has PSN %d", i, psn)
			case isCE && (psn%2 == 1 || behind < 10<<10):
				t.Errorf("PSN %d (leaving %d bytes behind) marked ibudp.CE", psn, behind)
			case !isCE && psn%2 == 0 && psn < 3:
				t.Errorf("PSN %d left %d bytes behind unmarked", psn, behind)
			}
			if isCE {
				ce++
			}
		}
		st := f.FaultStats().TX
		if st.Marked != uint64(ce) || len(tap.marks) != ce || st.LinkDropped != 0 || st.LinkPackets != n {
			t.Errorf("counts %+v, tap marks %d; %d ibudp.CE received", st, len(tap.marks), ce)
		}
	})
}
