package main

// rnic demo: the first command a newcomer runs. Two NICs start inside the
// process on two loopback addresses (no root, no daemon), connect one RC
// QP each, and run RDMA WRITE, RDMA READ, SEND and FETCH_AND_ADD between
// them with every byte checked; then one WRITE is followed through the
// blocks of both NICs by their counters.

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"time"

	"github.com/rnicd/rnicd/verbs"
)

// demoSide is one NIC of the demo with its one connected QP and a buffer
// laid out as [message area | second message area | 8-byte atomic word].
type demoSide struct {
	name string
	addr netip.Addr
	ctx  *verbs.Context
	pd   *verbs.PD
	mr   *verbs.MR
	cq   *verbs.CQ
	qp   *verbs.QP
	size int // bytes of one message area
}

func (s *demoSide) area(i int) []byte { return s.mr.Buf[i*s.size : (i+1)*s.size] }
func (s *demoSide) atomicOff() int    { return 2 * s.size }

// demoConfig is the demo's command line.
type demoConfig struct {
	addrA, addrB string
	size, iters  int
	mtu          int
	depth        int // WRs in flight in the bandwidth tests
	timeout      time.Duration
}

func runDemo(args []string, stdout, stderr io.Writer) int {
	cfg := demoConfig{addrA: "127.0.0.1", addrB: "127.0.0.2", size: 65536, iters: 200, mtu: 1024, depth: 16, timeout: time.Minute}
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.addrA, "a", cfg.addrA, "address of the first NIC (the requester)")
	fs.StringVar(&cfg.addrB, "b", cfg.addrB, "address of the second NIC (the responder)")
	fs.IntVar(&cfg.size, "s", cfg.size, "message size in bytes")
	fs.IntVar(&cfg.iters, "n", cfg.iters, "iterations of each test")
	fs.IntVar(&cfg.mtu, "m", cfg.mtu, "path MTU: 256, 512, 1024, 2048 or 4096")
	fs.IntVar(&cfg.depth, "t", cfg.depth, "work requests in flight (tx depth)")
	fs.DurationVar(&cfg.timeout, "timeout", cfg.timeout, "give up on a completion after this long")
	if err := fs.Parse(args); err != nil {
		return parseExit(err)
	}
	if err := demo(cfg, stdout); err != nil {
		fmt.Fprintf(stderr, "demo: %v\n", err)
		return 1
	}
	return 0
}

func demo(cfg demoConfig, w io.Writer) error {
	mtu := verbs.MTU(0)
	for m := verbs.MTU256; m <= verbs.MTU4096; m++ {
		if m.Bytes() == cfg.mtu {
			mtu = m
		}
	}
	switch {
	case mtu == 0:
		return fmt.Errorf("-m %d: not an IB MTU", cfg.mtu)
	case cfg.size < 8 || cfg.size > 1<<26 || cfg.size%8 != 0:
		return fmt.Errorf("-s %d: size must be a multiple of 8 from 8 to 64 MiB", cfg.size)
	case cfg.iters < 1 || cfg.depth < 1 || cfg.depth > 1024:
		return fmt.Errorf("-n %d -t %d: at least one iteration, 1..1024 in flight", cfg.iters, cfg.depth)
	}
	a, err := newDemoSide("A", cfg.addrA, cfg)
	if err != nil {
		return err
	}
	defer a.ctx.Close()
	b, err := newDemoSide("B", cfg.addrB, cfg)
	if err != nil {
		return err
	}
	defer b.ctx.Close()
	if err := demoConnect(a, b, mtu); err != nil {
		return err
	}
	if err := demoConnect(b, a, mtu); err != nil {
		return err
	}
	fmt.Fprintf(w, "Two NICs in this process: A on %s (QPN 0x%06x), B on %s (QPN 0x%06x), one RC QP each, path MTU %d.\n",
		cfg.addrA, a.qp.QPN, cfg.addrB, b.qp.QPN, mtu.Bytes())
	fmt.Fprintf(w, "A is the requester; every byte that moves is checked.\n\n")
	fmt.Fprintf(w, " %-22s %9s %12s %19s %14s %12s  %s\n", "#test", "#bytes", "#iterations", "BW average[MB/sec]", "MsgRate[Mpps]", "t_avg[usec]", "data")
	tests := []struct {
		name  string
		bytes int
		run   func(a, b *demoSide, cfg demoConfig) error
	}{
		{"RDMA_WRITE", cfg.size, demoWrite},
		{"RDMA_READ", cfg.size, demoRead},
		{"SEND", cfg.size, demoSend},
		{"ATOMIC_FETCH_AND_ADD", 8, demoFetchAdd},
	}
	for _, tc := range tests {
		start := time.Now()
		if err := tc.run(a, b, cfg); err != nil {
			return fmt.Errorf("%s: %w", tc.name, err)
		}
		el := time.Since(start).Seconds()
		mbs := float64(tc.bytes) * float64(cfg.iters) / el / 1e6
		fmt.Fprintf(w, " %-22s %9d %12d %19.2f %14.6f %12.2f  ok\n", tc.name, tc.bytes, cfg.iters, mbs,
			float64(cfg.iters)/el/1e6, el*1e6/float64(cfg.iters))
	}
	fmt.Fprintln(w)
	return explainOneMessage(w, a, b, cfg)
}

func newDemoSide(name, addr string, cfg demoConfig) (*demoSide, error) {
	ip, err := netip.ParseAddr(addr)
	if err != nil {
		return nil, fmt.Errorf("NIC %s: %w", name, err)
	}
	s := &demoSide{name: name, addr: ip, size: cfg.size}
	if s.ctx, err = verbs.OpenLocal(verbs.LocalConfig{Name: "rnic" + name, Addr: ip}); err != nil {
		return nil, fmt.Errorf("NIC %s: %w", name, err)
	}
	fail := func(err error) (*demoSide, error) {
		s.ctx.Close()
		return nil, fmt.Errorf("NIC %s: %w", name, err)
	}
	if s.pd, err = s.ctx.AllocPD(); err != nil {
		return fail(err)
	}
	buf, err := s.ctx.Alloc(2*cfg.size + 8)
	if err != nil {
		return fail(err)
	}
	if s.mr, err = s.pd.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic); err != nil {
		return fail(err)
	}
	if s.cq, err = s.ctx.CreateCQ(2*cfg.depth+2, nil); err != nil {
		return fail(err)
	}
	s.qp, err = s.pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: s.cq, RecvCQ: s.cq,
		Cap: verbs.QPCap{MaxSendWR: cfg.depth, MaxRecvWR: cfg.depth + 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return fail(err)
	}
	return s, nil
}

// demoConnect brings s's QP to RTS towards peer's, with the attributes
// ibv_rc_pingpong uses plus remote access for WRITE, READ and atomics.
func demoConnect(s, peer *demoSide, mtu verbs.MTU) error {
	pa, err := peer.ctx.QueryPort()
	if err != nil {
		return err
	}
	steps := []struct {
		a    verbs.QPAttr
		mask verbs.AttrMask
	}{
		{verbs.QPAttr{State: verbs.QPSInit, PortNum: 1, AccessFlags: verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic},
			verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrAccessFlags},
		{verbs.QPAttr{State: verbs.QPSRTR, PathMTU: mtu, DestQPN: peer.qp.QPN, RQPSN: 0, MaxDestRdAtomic: 16, MinRNRTimer: 12,
			AH: verbs.AH{DGID: pa.GIDs[pa.GIDIndex], HopLimit: 1}},
			verbs.AttrState | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN | verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer},
		{verbs.QPAttr{State: verbs.QPSRTS, SQPSN: 0, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16},
			verbs.AttrState | verbs.AttrSQPSN | verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry | verbs.AttrMaxQPRdAtomic},
	}
	for _, st := range steps {
		if err := s.qp.Modify(&st.a, st.mask); err != nil {
			return fmt.Errorf("NIC %s: QP to %v: %w", s.name, st.a.State, err)
		}
	}
	return nil
}

// fillPattern writes a pattern that differs per seed and per byte, so a
// misplaced or stale byte shows.
func demoFill(b []byte, seed int) {
	for i := range b {
		b[i] = byte(i*7 + seed*13 + i>>8)
	}
}

func demoCheckEqual(got, want []byte) error {
	for i := range want {
		if got[i] != want[i] {
			return fmt.Errorf("byte %d is 0x%02x, want 0x%02x", i, got[i], want[i])
		}
	}
	return nil
}

// stream posts n copies of wr on s's QP, keeping cfg.depth in flight, and
// waits for all their completions. onRecv, if set, handles completions of
// the peer's receive queue, which the same CQ poll loop drains.
func demoStream(s *demoSide, n int, wr verbs.SendWR, cfg demoConfig, peer *demoSide, onRecv func(verbs.WC) error) error {
	wcs := make([]verbs.WC, 32)
	posted, done := 0, 0
	for done < n {
		for posted < n && posted-done < cfg.depth {
			wr.WRID = uint64(posted)
			if err := s.qp.PostSend([]verbs.SendWR{wr}); err != nil {
				return err
			}
			posted++
		}
		ctx, cancel := context.WithTimeout(context.Background(), cfg.timeout)
		for got := 0; got == 0; {
			if peer != nil {
				k := peer.cq.Poll(wcs)
				for _, wc := range wcs[:k] {
					if err := onRecv(wc); err != nil {
						cancel()
						return err
					}
				}
			}
			got = s.cq.Poll(wcs)
			for _, wc := range wcs[:got] {
				if wc.Status != verbs.WCSuccess {
					cancel()
					return fmt.Errorf("completion %v", &wc)
				}
				done++
			}
			if got == 0 && peer == nil {
				if err := s.cq.Wait(ctx); err != nil {
					cancel()
					return fmt.Errorf("%d of %d completed: %w", done, n, err)
				}
			} else if got == 0 && ctx.Err() != nil {
				cancel()
				return fmt.Errorf("%d of %d completed: %w", done, n, ctx.Err())
			}
		}
		cancel()
	}
	return nil
}

func demoWrite(a, b *demoSide, cfg demoConfig) error {
	demoFill(a.area(0), 1)
	clear(b.area(0))
	wr := verbs.SendWR{Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(0, cfg.size)},
		RemoteAddr: b.mr.Addr, RKey: b.mr.RKey}
	if err := demoStream(a, cfg.iters, wr, cfg, nil, nil); err != nil {
		return err
	}
	return demoCheckEqual(b.area(0), a.area(0))
}

func demoRead(a, b *demoSide, cfg demoConfig) error {
	demoFill(b.area(1), 2)
	clear(a.area(1))
	wr := verbs.SendWR{Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(cfg.size, cfg.size)},
		RemoteAddr: b.mr.Addr + uint64(cfg.size), RKey: b.mr.RKey}
	if err := demoStream(a, cfg.iters, wr, cfg, nil, nil); err != nil {
		return err
	}
	return demoCheckEqual(a.area(1), b.area(1))
}

// demoSend streams SENDs from A; B keeps depth+1 receives posted, each
// into its own slot, and checks every message as it completes.
func demoSend(a, b *demoSide, cfg demoConfig) error {
	demoFill(a.area(0), 3)
	slots := cfg.depth + 1
	mem, err := b.ctx.Alloc(slots * cfg.size)
	if err != nil {
		return err
	}
	// The slots stay registered, with receives posted, until the NIC
	// closes.
	mr, err := b.pd.RegMR(mem, verbs.AccessLocalWrite)
	if err != nil {
		return err
	}
	post := func(slot int) error {
		clear(mem[slot*cfg.size : (slot+1)*cfg.size]) // the message must bring every byte
		return b.qp.PostRecv([]verbs.RecvWR{{WRID: uint64(slot), SGL: []verbs.SGE{mr.SGE(slot*cfg.size, cfg.size)}}})
	}
	for i := 0; i < slots; i++ {
		if err := post(i); err != nil {
			return err
		}
	}
	received := 0
	onRecv := func(wc verbs.WC) error {
		if wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCRecv || int(wc.ByteLen) != cfg.size || wc.WRID >= uint64(slots) {
			return fmt.Errorf("receive completion %v", &wc)
		}
		slot := int(wc.WRID)
		if err := demoCheckEqual(mem[slot*cfg.size:(slot+1)*cfg.size], a.area(0)); err != nil {
			return fmt.Errorf("message %d: %w", received, err)
		}
		received++
		return post(slot)
	}
	wr := verbs.SendWR{Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(0, cfg.size)}}
	if err := demoStream(a, cfg.iters, wr, cfg, b, onRecv); err != nil {
		return err
	}
	// Receive completions may trail the sender's.
	wcs := make([]verbs.WC, 32)
	ctx, cancel := context.WithTimeout(context.Background(), cfg.timeout)
	defer cancel()
	for received < cfg.iters {
		n := b.cq.Poll(wcs)
		for _, wc := range wcs[:n] {
			if err := onRecv(wc); err != nil {
				return err
			}
		}
		if n == 0 {
			if err := b.cq.Wait(ctx); err != nil {
				return fmt.Errorf("%d of %d messages received: %w", received, cfg.iters, err)
			}
		}
	}
	return nil
}

// demoFetchAdd adds 1 to B's 64-bit word iters times, one at a time; each
// returns the value before it, which must count up from the start value.
func demoFetchAdd(a, b *demoSide, cfg demoConfig) error {
	const start = 1_000_000
	word := b.mr.Buf[b.atomicOff() : b.atomicOff()+8]
	binary.LittleEndian.PutUint64(word, start)
	res := a.mr.Buf[a.atomicOff() : a.atomicOff()+8]
	wr := verbs.SendWR{Opcode: verbs.WRAtomicFetchAdd, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(a.atomicOff(), 8)},
		RemoteAddr: b.mr.Addr + uint64(b.atomicOff()), RKey: b.mr.RKey, CompareAdd: 1}
	one := cfg
	one.depth = 1
	for i := 0; i < cfg.iters; i++ {
		if err := demoStream(a, 1, wr, one, nil, nil); err != nil {
			return err
		}
		if got := binary.LittleEndian.Uint64(res); got != start+uint64(i) {
			return fmt.Errorf("fetch %d returned %d, want %d", i, got, start+i)
		}
	}
	if got := binary.LittleEndian.Uint64(word); got != start+uint64(cfg.iters) {
		return fmt.Errorf("word is %d after %d adds, want %d", got, cfg.iters, start+cfg.iters)
	}
	return nil
}
