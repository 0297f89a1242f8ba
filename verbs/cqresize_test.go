package verbs_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rnicd/rnicd/internal/looptest"
	"github.com/rnicd/rnicd/verbs"
)

// CQ.Resize through the verbs API: a CQ with completions waiting is
// refused a size below them and keeps them; grown and shrunk it keeps
// them in order, field by field, reports its new size, and its arm and
// its channel's events go with it to the new ring.
func TestCQResize(t *testing.T) {
	a := openLocal(t, looptest.Get(t))
	b := openLocal(t, looptest.Get(t))
	ch, err := a.CreateCompChannel()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := a.CreateCQ(16, ch)
	if err != nil {
		t.Fatal(err)
	}
	pd, err := a.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	mem, err := a.Alloc(4096)
	if err != nil {
		t.Fatal(err)
	}
	ma, err := pd.RegMR(mem, verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	qa, err := pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	qb, mb := rcQP(t, b)
	connect(t, qa, qb, b)
	connect(t, qb, qa, a)

	write := func(id uint64) verbs.SendWR {
		return verbs.SendWR{WRID: id, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{ma.SGE(int(id), int(id+1))}, RemoteAddr: mb.mr.Addr, RKey: mb.mr.RKey}
	}
	// Nine WRITEs, then one to a key the peer does not have, which
	// completes in error after them (RC completes in order): armed for
	// solicited completions only, whose events include failed ones, the
	// CQ's event says all ten wait in it.
	if err := cq.ReqNotify(true); err != nil {
		t.Fatal(err)
	}
	for i := range uint64(10) {
		wr := write(i)
		if i == 9 {
			wr.RKey ^= 0x5a5a00
		}
		if err := qa.PostSend([]verbs.SendWR{wr}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if got, err := ch.GetCQEvent(ctx); err != nil || got != cq {
		t.Fatalf("event %v, %v", got, err)
	}
	check := func(i uint64, wc verbs.WC) {
		t.Helper()
		st := verbs.WCSuccess
		if i == 9 {
			st = verbs.WCRemAccessErr
		} else if i > 9 {
			st = verbs.WCWRFlushErr
		}
		if wc.WRID != i || wc.Status != st || (st == verbs.WCSuccess && (wc.Opcode != verbs.WCRDMAWrite ||
			wc.ByteLen != uint32(i+1))) || wc.QPNum != qa.QPN {
			t.Fatalf("completion %d: %+v", i, wc)
		}
	}
	if err := cq.Resize(9); err == nil {
		t.Fatal("resize to 9 entries with 10 waiting went through")
	}
	if err := cq.Resize(10); err != nil {
		t.Fatal(err)
	}
	if cq.Cap() != 10 {
		t.Fatalf("Cap %d after a resize to 10", cq.Cap())
	}
	wcs := make([]verbs.WC, 4)
	if n := cq.Poll(wcs); n != 4 {
		t.Fatalf("polled %d", n)
	}
	for i := range 4 {
		check(uint64(i), wcs[i])
	}
	if err := cq.Resize(300); err != nil {
		t.Fatal(err)
	}
	if err := cq.Resize(5); err == nil {
		t.Fatal("resize to 5 entries with 6 waiting went through")
	}
	if err := cq.Resize(6); err != nil {
		t.Fatal(err)
	}
	for i := uint64(4); i < 10; i++ {
		check(i, pollOne(t, cq))
	}
	if n := cq.Poll(wcs); n != 0 {
		t.Fatalf("%d completions after the ten", n)
	}
	// Armed before a resize, the CQ's next completion (a WR flushed
	// from the QP the error took to ERR) is an event.
	if err := cq.ReqNotify(false); err != nil {
		t.Fatal(err)
	}
	if err := cq.Resize(1); err != nil {
		t.Fatal(err)
	}
	if cq.Cap() != 1 {
		t.Fatalf("Cap %d after a resize to 1", cq.Cap())
	}
	if err := qa.PostSend([]verbs.SendWR{write(10)}); err != nil {
		t.Fatal(err)
	}
	if got, err := ch.GetCQEvent(ctx); err != nil || got != cq {
		t.Fatalf("event %v, %v", got, err)
	}
	check(10, pollOne(t, cq))
	if err := cq.Resize(0); err == nil {
		t.Fatal("resize to 0 entries went through")
	}
	if err := qa.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := cq.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := cq.Resize(4); err == nil {
		t.Fatal("resize of a destroyed CQ went through")
	}
}

// One goroutine polls a CQ while another posts WRITEs (at most 8 ahead
// of the poller, the smallest size used) and resizes the CQ every 7:
// every completion arrives once, in order, field by field.
func TestCQResizeRacingPoll(t *testing.T) {
	a := openLocal(t, looptest.Get(t))
	b := openLocal(t, looptest.Get(t))
	qa, ma := rcQP(t, a)
	qb, mb := rcQP(t, b)
	connect(t, qa, qb, b)
	connect(t, qb, qa, a)
	const total = 2000
	var polled atomic.Uint32
	bad := make(chan error, 1)
	done, stop := make(chan struct{}), make(chan struct{})
	// A failure below stops the poller before the CQ goes.
	defer func() { close(stop); <-done }()
	go func() {
		defer close(done)
		wcs := make([]verbs.WC, 4)
		deadline := time.Now().Add(60 * time.Second)
		for i := uint64(0); i < total; {
			n := ma.cq.Poll(wcs)
			for _, wc := range wcs[:n] {
				if wc.WRID != i || wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCRDMAWrite ||
					wc.ByteLen != uint32(1+i%61) || wc.QPNum != qa.QPN {
					bad <- fmt.Errorf("completion %d: %+v", i, wc)
					return
				}
				i++
			}
			polled.Store(uint32(i))
			select {
			case <-stop:
				return
			default:
			}
			if time.Now().After(deadline) {
				bad <- fmt.Errorf("%d completions of %d", i, total)
				return
			}
		}
	}()
	sizes := []int{8, 9, 200, 8, 64, 17, 4096, 12}
	for i := uint64(0); i < total; i++ {
		for i-uint64(polled.Load()) >= 8 {
			select {
			case err := <-bad:
				t.Fatal(err)
			case <-time.After(50 * time.Microsecond):
			}
		}
		wr := verbs.SendWR{WRID: i, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{ma.mr.SGE(int(i%64), int(1+i%61))}, RemoteAddr: mb.mr.Addr, RKey: mb.mr.RKey}
		if err := qa.PostSend([]verbs.SendWR{wr}); err != nil {
			t.Fatal(err)
		}
		if i%7 == 0 {
			s := sizes[(i/7)%uint64(len(sizes))]
			if err := ma.cq.Resize(s); err != nil {
				t.Fatalf("resize to %d: %v", s, err)
			}
			if ma.cq.Cap() != s {
				t.Fatalf("Cap %d after a resize to %d", ma.cq.Cap(), s)
			}
		}
	}
	for polled.Load() != total {
		select {
		case err := <-bad:
			t.Fatal(err)
		case <-time.After(time.Millisecond):
		}
	}
	select {
	case err := <-bad:
		t.Fatal(err)
	default:
	}
	if err := ma.cq.Err(); err != nil {
		t.Fatal(err)
	}
}
