package verbs_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rnicd/rnicd/internal/looptest"
	"github.com/rnicd/rnicd/verbs"
)

// The asynchronous events through the Go API, each naming the Context's
// own object: SRQ_LIMIT_REACHED once after SetLimit (Limit reads 0
// then), QP_ACCESS_ERR and QP_LAST_WQE_REACHED for a bad rkey at an
// SRQ's QP; the sender's Context, whose error its completion reports,
// gets none.
func TestAsyncEvents(t *testing.T) {
	a := openLocal(t, looptest.Get(t))
	b := openLocal(t, looptest.Get(t))
	eva, err := a.OpenAsyncEvents()
	if err != nil {
		t.Fatal(err)
	}
	defer eva.Close()
	evb, err := b.OpenAsyncEvents()
	if err != nil {
		t.Fatal(err)
	}
	defer evb.Close()
	if _, err := a.OpenAsyncEvents(); err == nil {
		t.Fatal("a second OpenAsyncEvents succeeded")
	}

	pd, err := a.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	mem, err := a.Alloc(4096)
	if err != nil {
		t.Fatal(err)
	}
	mr, err := pd.RegMR(mem, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	cq, err := a.CreateCQ(16, nil)
	if err != nil {
		t.Fatal(err)
	}
	srq, err := pd.CreateSRQ(verbs.SRQInitAttr{MaxWR: 4, MaxSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	qa, err := pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq, SRQ: srq,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxSendSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	qb, sb := rcQP(t, b)
	connect(t, qa, qb, b)
	connect(t, qb, qa, a)
	for i := range 3 {
		if err := srq.PostRecv([]verbs.RecvWR{{WRID: uint64(i), SGL: []verbs.SGE{mr.SGE(64*i, 64)}}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := srq.SetLimit(2); err != nil {
		t.Fatal(err)
	}
	if n, err := srq.Limit(); n != 2 || err != nil {
		t.Fatalf("Limit: %d, %v; want 2", n, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	want := func(ev *verbs.AsyncEvents, w verbs.AsyncEvent) {
		t.Helper()
		got, err := ev.Get(ctx)
		if err != nil || got != w {
			t.Fatalf("event %+v, %v; want %+v", got, err, w)
		}
	}
	send := verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{sb.mr.SGE(0, 8)}}
	for range 2 {
		if err := qb.PostSend([]verbs.SendWR{send}); err != nil {
			t.Fatal(err)
		}
		if wc := pollOne(t, sb.cq); wc.Status != verbs.WCSuccess {
			t.Fatalf("SEND: %v", &wc)
		}
	}
	want(eva, verbs.AsyncEvent{Type: verbs.EventSRQLimitReached, SRQ: srq})
	if n, err := srq.Limit(); n != 0 || err != nil {
		t.Fatalf("Limit after it fired: %d, %v; want 0", n, err)
	}
	write := verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{sb.mr.SGE(0, 8)},
		RemoteAddr: mr.Addr, RKey: mr.RKey ^ 0x5a5a00}
	if err := qb.PostSend([]verbs.SendWR{write}); err != nil {
		t.Fatal(err)
	}
	if wc := pollOne(t, sb.cq); wc.Status != verbs.WCRemAccessErr {
		t.Fatalf("WRITE with a bad rkey: %v", &wc)
	}
	want(eva, verbs.AsyncEvent{Type: verbs.EventQPAccessErr, QP: qa})
	want(eva, verbs.AsyncEvent{Type: verbs.EventQPLastWQEReached, QP: qa})
	short, cancelShort := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancelShort()
	for _, ev := range []*verbs.AsyncEvents{eva, evb} {
		if got, err := ev.Get(short); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("an event too many: %+v, %v", got, err)
		}
	}
}
