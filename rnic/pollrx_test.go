package rnic_test

import (
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/wire/ibudp"
)

// pollOnlyPort is a port whose WaitRecv returns only when the port
// closes: the device's receive goroutine, once it has found nothing and
// gone to sleep there, sleeps for good, and only PollRx receives. Before
// that the goroutine's first TryRecv takes what has arrived, as it must
// on a real port: a goroutine that started late beside a CPU hog (-race,
// load 25) took the first of a WRITE's 64 packets, and PollRx reported
// 63. waitAsleep is how a test knows the goroutine is out of the way.
type pollOnlyPort struct {
	ibudp.Poller
	closed chan struct{}
	once   sync.Once
	asleep chan struct{} // closed when the goroutine enters WaitRecv
	slept  sync.Once
}

func newPollOnlyPort(p ibudp.Poller) *pollOnlyPort {
	return &pollOnlyPort{Poller: p, closed: make(chan struct{}), asleep: make(chan struct{})}
}

func (p *pollOnlyPort) WaitRecv() error {
	p.slept.Do(func() { close(p.asleep) })
	<-p.closed
	return fmt.Errorf("poll-only port: %w", net.ErrClosed)
}

// waitAsleep waits until the device's receive goroutine sleeps in
// WaitRecv, where it stays until the port closes.
func (p *pollOnlyPort) waitAsleep(t testing.TB) {
	t.Helper()
	select {
	case <-p.asleep:
	case <-time.After(10 * time.Second):
		t.Fatal("the device's receive goroutine did not reach WaitRecv in 10 s")
	}
}

func (p *pollOnlyPort) Close() error {
	p.once.Do(func() { close(p.closed) })
	return p.Poller.Close()
}

// pollRx runs b's PollRx until done says so, and returns how many
// packets it handled.
func pollRx(t *testing.T, b *node, what string, done func() bool) uint64 {
	t.Helper()
	var total uint64
	for deadline := time.Now().Add(10 * time.Second); !done(); {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not done after PollRx handled %d packets; counters %v", what, total, b.dev.Observer().Counters())
		}
		total += uint64(b.dev.PollRx())
	}
	return total
}

// PollRx runs the receive pipeline in the caller's goroutine: on a
// device whose own receive goroutine never receives, a WRITE lands, its
// ACK goes back, and a SEND completes, all from PollRx, which reports
// every packet. The ACK timeout is 1.07 s (18), not the harness's 16.8
// ms: a resent packet would count in rcvd_pkts too, and a test goroutine
// held off the CPU that long (a hog beside -race) would see it.
func TestPollRx(t *testing.T) {
	p := newPair(t, pairOpts{pollOnlyB: true, ackHold: -1, timeout: 18})
	a, b := p.a, p.b
	if n := b.dev.PollRx(); n != 0 {
		t.Fatalf("PollRx with nothing sent = %d", n)
	}

	const n = 64 << 10 // 64 packets at MTU 1024
	fill(a.mem[:n], 7)
	mustPost(t, a, p.qa, ib.SendWR{WRID: 1, Opcode: ib.WRRDMAWrite, Flags: ib.SendSignaled,
		SGL: []ib.SGE{sge(a, 0, n)}, RemoteAddr: memVA + 4096, RKey: b.mr.RKey})
	got := pollRx(t, b, "WRITE", func() bool { return counter(b, "rcvd_pkts") == 64 })
	if got != 64 {
		t.Fatalf("PollRx reported %d packets, the device counted 64", got)
	}
	checkWC(t, a.poll(1, 5*time.Second)[0], ib.WC{WRID: 1, Opcode: ib.WCRDMAWrite, ByteLen: n, QPNum: p.qa.QPN})
	b.fence()
	sameBytes(t, "WRITE", b.mem[4096:4096+n], a.mem[:n])

	mustRecv(t, b, p.qb, ib.RecvWR{WRID: 2, SGL: []ib.SGE{sge(b, 0, 4096)}})
	mustPost(t, a, p.qa, ib.SendWR{WRID: 3, Opcode: ib.WRSend, Flags: ib.SendSignaled,
		SGL: []ib.SGE{sge(a, 100, 3000)}})
	wcs := make([]ib.WC, 2)
	var k int
	got = pollRx(t, b, "SEND", func() bool { k = b.cq.Poll(wcs); return k > 0 })
	if k != 1 || got != 3 || counter(b, "rcvd_pkts") != 67 {
		t.Fatalf("SEND: %d completions, PollRx reported %d packets, device counted %d; want 1, 3, 67",
			k, got, counter(b, "rcvd_pkts"))
	}
	checkWC(t, wcs[0], ib.WC{WRID: 2, Opcode: ib.WCRecv, ByteLen: 3000, QPNum: p.qb.QPN})
	checkWC(t, a.poll(1, 5*time.Second)[0], ib.WC{WRID: 3, Opcode: ib.WCSend, ByteLen: 3000, QPNum: p.qa.QPN})
	b.fence()
	sameBytes(t, "SEND", b.mem[:3000], a.mem[100:3100])
}

// A port that cannot be polled (the fault injector) leaves PollRx
// nothing to do; its own goroutine receives as before.
func TestPollRxNotPoller(t *testing.T) {
	p := newPair(t, pairOpts{faulty: true})
	mustPost(t, p.a, p.qa, ib.SendWR{WRID: 1, Opcode: ib.WRRDMAWrite, Flags: ib.SendSignaled,
		SGL: []ib.SGE{sge(p.a, 0, 5000)}, RemoteAddr: memVA, RKey: p.b.mr.RKey})
	checkWC(t, p.a.poll(1, 5*time.Second)[0], ib.WC{WRID: 1, Opcode: ib.WCRDMAWrite, ByteLen: 5000, QPNum: p.qa.QPN})
	if n := p.b.dev.PollRx(); n != 0 {
		t.Fatalf("PollRx on a fault injector's port = %d", n)
	}
}

// An application that stops busy polling leaves nothing behind: the
// pipeline's own goroutine takes the packets that come after. A packet
// nobody took would cost a 1.07 s ACK timeout and, with retry_cnt 0, fail
// the WRITE; the default 16.8 ms timeout fired on a loaded machine (-race,
// 2 cores) with every packet taken.
func TestPollRxThenStop(t *testing.T) {
	p := newPair(t, pairOpts{ackHold: -1, timeout: 18})
	a, b := p.a, p.b
	for i := range 20 {
		b.dev.PollRx()
		fill(a.mem[:3000], i)
		mustPost(t, a, p.qa, ib.SendWR{WRID: uint64(i), Opcode: ib.WRRDMAWrite, Flags: ib.SendSignaled,
			SGL: []ib.SGE{sge(a, 0, 3000)}, RemoteAddr: memVA + 8192, RKey: b.mr.RKey})
		checkWC(t, a.poll(1, 5*time.Second)[0], ib.WC{WRID: uint64(i), Opcode: ib.WCRDMAWrite, ByteLen: 3000, QPNum: p.qa.QPN})
		b.fence()
		sameBytes(t, "WRITE after a busy poll", b.mem[8192:8192+3000], a.mem[:3000])
	}
}
