package rnic_test

import (
	"testing"
	"time"

	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/wire/fault"
)

// coalesceWrites posts n signaled 64-byte WRITEs from p.a to p.b, wr_id
// first+i, each from and to its own 64 bytes at off+64*i, filled with a
// pattern of its own, one post each as perftest posts them.
func coalesceWrites(t *testing.T, p *pair, first uint64, off, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		o := off + 64*i
		fill(p.a.mem[o:o+64], int(first)+i)
		mustPost(t, p.a, p.qa, ib.SendWR{WRID: first + uint64(i), Opcode: ib.WRRDMAWrite, Flags: ib.SendSignaled,
			SGL: []ib.SGE{sge(p.a, o, 64)}, RemoteAddr: memVA + uint64(o), RKey: p.b.mr.RKey})
	}
}

// checkWrites checks the completions of coalesceWrites' WRITEs, in order
// and field by field, and their bytes at the responder.
func checkWrites(t *testing.T, p *pair, wcs []ib.WC, first uint64, off int) {
	t.Helper()
	for i, wc := range wcs {
		checkWC(t, wc, ib.WC{WRID: first + uint64(i), Status: ib.WCSuccess, Opcode: ib.WCRDMAWrite, ByteLen: 64, QPNum: p.qa.QPN})
	}
	n := len(wcs)
	sameBytes(t, "WRITEs at the responder", p.b.mem[off:off+64*n], p.a.mem[off:off+64*n])
}

// With post coalescing, small WRITEs posted while an earlier one awaits
// its ACK wait, and the ACK sends them: no poll of the application's,
// no retransmission. The ACKs reach the requester a second late (the
// fault injector's delay), so the ten posts all find the first WRITE in
// flight: with 100 ms, posting them took longer once at load 19 and the
// first ACK had come. The timer (4.3 s) stays far behind the ACKs.
func TestCoalescePostsACKSends(t *testing.T) {
	p := newPair(t, pairOpts{faulty: true, coalesce: true, timeout: 20}) // 4.3 s: no timer fires
	p.a.faulty.SetRX(fault.Faults{Delay: time.Second})
	coalesceWrites(t, p, 1, 0, 1)
	// On the wire at once, by the poster or, if that is at work, the
	// send pipeline; never left waiting.
	waitCounter(t, p.a, "sent_pkts", 1, 10*time.Second)
	if got := counter(p.a, "post_deferred"); got != 0 {
		t.Fatalf("a WRITE on an idle QP waited: post_deferred %d", got)
	}
	coalesceWrites(t, p, 2, 64, 10)
	if got, sent := counter(p.a, "post_deferred"), counter(p.a, "sent_pkts"); got != 10 || sent != 1 {
		t.Fatalf("ten WRITEs behind one in flight: post_deferred %d, sent_pkts %d; want 10 waiting, 1 sent", got, sent)
	}
	wcs := p.a.poll(11, 10*time.Second)
	checkWrites(t, p, wcs, 1, 0)
	for name, want := range map[string]uint64{"sent_pkts": 11, "retransmitted_pkts": 0, "local_ack_timeout_err": 0, "post_deferred": 10} {
		if got := counter(p.a, name); got != want {
			t.Errorf("%s = %d, want %d", name, got, want)
		}
	}
	if got := counter(p.b, "rcvd_pkts"); got != 11 {
		t.Errorf("responder rcvd_pkts = %d, want 11", got)
	}
}

// The application's busy poll (PollRx) sends what it posted since its last
// poll, together, before any ACK comes; a post on an idle QP and a
// multi-packet WRITE never wait. The requester's receive drops every
// packet, so only the poll can send the waiting WRITEs (the
// retransmission timer is 1.07 s away).
func TestCoalescePostsPollSends(t *testing.T) {
	p := newPair(t, pairOpts{faulty: true, coalesce: true, timeout: 18})
	p.a.faulty.SetRX(fault.Faults{Drop: 1})
	coalesceWrites(t, p, 1, 0, 1)
	waitCounter(t, p.a, "sent_pkts", 1, 10*time.Second)
	// Three packets at MTU 1024: a GSO run of its own, sent at once.
	fill(p.a.mem[4096:7096], 99)
	mustPost(t, p.a, p.qa, ib.SendWR{WRID: 50, Opcode: ib.WRRDMAWrite, Flags: ib.SendSignaled,
		SGL: []ib.SGE{sge(p.a, 4096, 3000)}, RemoteAddr: memVA + 4096, RKey: p.b.mr.RKey})
	waitCounter(t, p.a, "sent_pkts", 4, 10*time.Second)
	if got, sent := counter(p.a, "post_deferred"), counter(p.a, "sent_pkts"); got != 0 || sent != 4 {
		t.Fatalf("a 3-packet WRITE behind one in flight: post_deferred %d, sent_pkts %d; want 0, 4", got, sent)
	}
	coalesceWrites(t, p, 2, 64, 10)
	if got, sent := counter(p.a, "post_deferred"), counter(p.a, "sent_pkts"); got != 10 || sent != 4 {
		t.Fatalf("ten 64-byte WRITEs behind: post_deferred %d, sent_pkts %d; want 10, 4", got, sent)
	}
	// The poll sends them itself, or hands them to the send pipeline if
	// that is at work (TryLock; once in 20 runs under -race): either way
	// they leave now, not at the timer, which would first send the four
	// packets before them again (retransmitted_pkts).
	p.a.dev.PollRx()
	waitCounter(t, p.a, "sent_pkts", 14, 10*time.Second)
	if sent, re := counter(p.a, "sent_pkts"), counter(p.a, "retransmitted_pkts"); sent != 14 || re != 0 {
		t.Fatalf("after PollRx sent_pkts = %d, retransmitted_pkts %d; want 14 and 0: the poll sends the ten", sent, re)
	}
	waitCounter(t, p.b, "rcvd_pkts", 14, 10*time.Second)
	p.b.fence()
	sameBytes(t, "WRITEs at the responder", p.b.mem[0:704], p.a.mem[0:704])
	sameBytes(t, "3-packet WRITE at the responder", p.b.mem[4096:7096], p.a.mem[4096:7096])

	// The ACKs were lost: the retransmission timer sends the WRITEs
	// again, and they complete in order.
	p.a.faulty.SetRX(fault.Faults{})
	wcs := p.a.poll(12, 10*time.Second)
	checkWC(t, wcs[0], ib.WC{WRID: 1, Status: ib.WCSuccess, Opcode: ib.WCRDMAWrite, ByteLen: 64, QPNum: p.qa.QPN})
	checkWC(t, wcs[1], ib.WC{WRID: 50, Status: ib.WCSuccess, Opcode: ib.WCRDMAWrite, ByteLen: 3000, QPNum: p.qa.QPN})
	checkWrites(t, p, wcs[2:], 2, 64)
}

// A ping-pong QP, whose responder holds its ACKs for its next request,
// never waits: two such QPs would each wait for the other's ACK until
// the hold ran out. Each side's SEND goes at once.
func TestCoalescePostsPingPong(t *testing.T) {
	// Timeout 18 (1.07 s): a wait would show as an ACK timeout, which
	// the harness's 16.8 ms gave beside a CPU hog without one.
	p := newPair(t, pairOpts{coalesce: true, timeout: 18})
	const rounds = 50
	for i := 0; i < rounds; i++ {
		mustRecv(t, p.b, p.qb, ib.RecvWR{WRID: uint64(i), SGL: []ib.SGE{sge(p.b, 0, 64)}})
		mustRecv(t, p.a, p.qa, ib.RecvWR{WRID: uint64(i), SGL: []ib.SGE{sge(p.a, 0, 64)}})
		mustPost(t, p.a, p.qa, ib.SendWR{WRID: uint64(i), Opcode: ib.WRSend, Flags: ib.SendSignaled, SGL: []ib.SGE{sge(p.a, 64, 8)}})
		p.b.poll(1, 10*time.Second)
		mustPost(t, p.b, p.qb, ib.SendWR{WRID: uint64(i), Opcode: ib.WRSend, Flags: ib.SendSignaled, SGL: []ib.SGE{sge(p.b, 64, 8)}})
		got := p.a.poll(2, 10*time.Second)
		p.b.poll(1, 10*time.Second)
		if len(got) != 2 {
			t.Fatalf("round %d: %d completions", i, len(got))
		}
	}
	for _, n := range []*node{p.a, p.b} {
		for _, name := range []string{"local_ack_timeout_err", "post_deferred"} {
			if got := counter(n, name); got != 0 {
				t.Errorf("%s = %d, want 0", name, got)
			}
		}
	}
}
