package rnic_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/rnic/qpmgr"
	"github.com/rnicd/rnicd/wire/fault"
	"github.com/rnicd/rnicd/wire/netif"
)

// expectFatal posts a bad WR and two good ones behind it, and checks the
// bad one completes with status, the others flush, and both QPs end in ERR
// with their receive WQEs flushed.
func expectFatal(t *testing.T, p *pair, bad ib.SendWR, status ib.WCStatus) {
	t.Helper()
	a, b := p.a, p.b
	mustRecv(t, b, p.qb, ib.RecvWR{WRID: 500, SGL: []ib.SGE{sge(b, 0, 64)}})
	bad.WRID, bad.Flags = 1, bad.Flags|ib.SendSignaled
	good := ib.SendWR{WRID: 2, Opcode: ib.WRRDMAWrite, SGL: []ib.SGE{sge(a, 0, 8)}, RemoteAddr: memVA, RKey: b.mr.RKey}
	mustPost(t, a, p.qa, bad, good, good)
	wcs := a.poll(3, 5*time.Second)
	checkWC(t, wcs[0], ib.WC{WRID: 1, Status: status, Opcode: bad.Opcode.WCOpcode(), QPNum: p.qa.QPN})
	for _, wc := range wcs[1:] {
		checkWC(t, wc, ib.WC{WRID: 2, Status: ib.WCWRFlushErr, Opcode: ib.WCRDMAWrite, QPNum: p.qa.QPN})
	}
	if st := a.dev.QueryQP(p.qa).State; st != ib.QPSErr {
		t.Fatalf("requester QP in %v after %v", st, status)
	}
	// The responder's side of a class B/C error is ERR too: its receive
	// WQE comes back flushed.
	checkWC(t, b.poll(1, 5*time.Second)[0], ib.WC{WRID: 500, Status: ib.WCWRFlushErr, Opcode: ib.WCRecv, QPNum: p.qb.QPN})
	// A WR posted in ERR completes at once, flushed.
	mustPost(t, a, p.qa, ib.SendWR{WRID: 3, Opcode: ib.WRSend})
	checkWC(t, a.poll(1, time.Second)[0], ib.WC{WRID: 3, Status: ib.WCWRFlushErr, Opcode: ib.WCSend, QPNum: p.qa.QPN})
}

func TestBadRKey(t *testing.T) {
	p := newPair(t, pairOpts{})
	expectFatal(t, p, ib.SendWR{Opcode: ib.WRRDMAWrite, SGL: []ib.SGE{sge(p.a, 0, 100)},
		RemoteAddr: memVA, RKey: p.b.mr.RKey ^ 0x100}, ib.WCRemAccessErr)
	if c := counter(p.b, "naks_sent"); c != 1 {
		t.Fatalf("naks_sent = %d, want 1", c)
	}
}

func TestOutOfBounds(t *testing.T) {
	for _, tc := range []struct {
		name string
		op   ib.WROpcode
		va   uint64
		n    int
	}{
		{"write past end", ib.WRRDMAWrite, memVA + 1<<20 - 10, 11},
		{"write before start", ib.WRRDMAWrite, memVA - 1, 4},
		{"read past end", ib.WRRDMARead, memVA + 1<<20 - 4096, 4097},
		{"write wrapping", ib.WRRDMAWrite, ^uint64(0) - 2, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t, pairOpts{})
			expectFatal(t, p, ib.SendWR{Opcode: tc.op, SGL: []ib.SGE{sge(p.a, 0, tc.n)}, RemoteAddr: tc.va, RKey: p.b.mr.RKey}, ib.WCRemAccessErr)
		})
	}
}

// TestAccessFlags: an MR without REMOTE_WRITE refuses WRITEs (remote
// access error); a QP without REMOTE_READ refuses READs (invalid request,
// as rxe's check_op_valid).
func TestAccessFlags(t *testing.T) {
	t.Run("mr", func(t *testing.T) {
		p := newPair(t, pairOpts{})
		ro, err := p.b.dev.RegMR(p.b.pd, make([]byte, 4096), 0x9000, ib.AccessRemoteRead)
		if err != nil {
			t.Fatal(err)
		}
		expectFatal(t, p, ib.SendWR{Opcode: ib.WRRDMAWrite, SGL: []ib.SGE{sge(p.a, 0, 16)}, RemoteAddr: 0x9000, RKey: ro.RKey}, ib.WCRemAccessErr)
	})
	t.Run("qp", func(t *testing.T) {
		p := newPair(t, pairOpts{accessB: ib.AccessRemoteWrite})
		expectFatal(t, p, ib.SendWR{Opcode: ib.WRRDMARead, SGL: []ib.SGE{sge(p.a, 0, 16)}, RemoteAddr: memVA, RKey: p.b.mr.RKey}, ib.WCRemInvReqErr)
	})
	t.Run("other pd", func(t *testing.T) {
		p := newPair(t, pairOpts{})
		other := p.b.dev.AllocPD()
		mr, err := p.b.dev.RegMR(other, make([]byte, 4096), 0x9000, ib.AccessLocalWrite|ib.AccessRemoteWrite)
		if err != nil {
			t.Fatal(err)
		}
		expectFatal(t, p, ib.SendWR{Opcode: ib.WRRDMAWrite, SGL: []ib.SGE{sge(p.a, 0, 16)}, RemoteAddr: 0x9000, RKey: mr.RKey}, ib.WCRemAccessErr)
	})
	t.Run("local lkey", func(t *testing.T) {
		p := newPair(t, pairOpts{})
		bad := ib.SendWR{Opcode: ib.WRRDMAWrite, SGL: []ib.SGE{{Addr: memVA, Length: 16, LKey: p.a.mr.LKey + 0x100}}, RemoteAddr: memVA, RKey: p.b.mr.RKey}
		mustPost(t, p.a, p.qa, bad)
		bad.WRID, bad.Flags = 1, ib.SendSignaled
		checkWC(t, p.a.poll(1, 5*time.Second)[0], ib.WC{Status: ib.WCLocProtErr, Opcode: ib.WCRDMAWrite, QPNum: p.qa.QPN})
	})
}

func TestMisalignedAtomic(t *testing.T) {
	p := newPair(t, pairOpts{})
	expectFatal(t, p, ib.SendWR{Opcode: ib.WRAtomicFetchAdd, SGL: []ib.SGE{sge(p.a, 0, 8)}, RemoteAddr: memVA + 4, RKey: p.b.mr.RKey, CompareAdd: 1}, ib.WCRemInvReqErr)
	for _, b := range p.b.mem[:16] {
		if b != 0 {
			t.Fatal("a misaligned atomic changed remote memory")
		}
	}
}

// TestRNRRetryZero: a SEND with no receive WQE posted gets an RNR NAK, and
// with rnr_retry 0 completes with RNR_RETRY_EXC_ERR. The ACK timeout is
// 1.07 s (18), not the harness's 16.8 ms: beside a CPU hog (-race, load
// 25) the RNR NAK once came back after the timer fired, the SEND went
// again, met the empty receive queue again, and b sent a second RNR NAK.
func TestRNRRetryZero(t *testing.T) {
	p := newPair(t, pairOpts{rnrRetry: 0, timeout: 18})
	mustPost(t, p.a, p.qa, ib.SendWR{WRID: 1, Opcode: ib.WRSend, Flags: ib.SendSignaled, SGL: []ib.SGE{sge(p.a, 0, 10)}})
	checkWC(t, p.a.poll(1, 5*time.Second)[0], ib.WC{WRID: 1, Status: ib.WCRNRRetryExcErr, Opcode: ib.WCSend, QPNum: p.qa.QPN})
	for n, name := range map[*node]string{p.a: "rcvd_rnr_err", p.b: "send_rnr_err"} {
		if c := counter(n, name); c != 1 {
			t.Errorf("%s = %d, want 1; counters %v", name, c, n.dev.Observer().Counters())
		}
	}
	if c := counter(p.a, "retry_rnr_exceeded_err"); c != 1 {
		t.Errorf("retry_rnr_exceeded_err = %d, want 1", c)
	}
}

// TestRNRWait: with rnr_retry 7 the requester waits the RNR timer and
// tries again until the receiver posts its WQE. The WQE is posted once
// the requester has been refused twice, however long that takes: after
// a fixed 30 ms a host busy beside a CPU hog had sent the SEND once.
func TestRNRWait(t *testing.T) {
	p := newPair(t, pairOpts{rnrRetry: 7, minRNR: 1}) // timer code 1: 0.01 ms
	fill(p.a.mem[:3000], 5)
	mustPost(t, p.a, p.qa, ib.SendWR{WRID: 1, Opcode: ib.WRSend, Flags: ib.SendSignaled, SGL: []ib.SGE{sge(p.a, 0, 3000)}})
	waitCounter(t, p.a, "rcvd_rnr_err", 2, 10*time.Second)
	mustRecv(t, p.b, p.qb, ib.RecvWR{WRID: 9, SGL: []ib.SGE{sge(p.b, 0, 3000)}})
	checkWC(t, p.a.poll(1, 5*time.Second)[0], ib.WC{WRID: 1, Opcode: ib.WCSend, ByteLen: 3000, QPNum: p.qa.QPN})
	checkWC(t, p.b.poll(1, 5*time.Second)[0], ib.WC{WRID: 9, Opcode: ib.WCRecv, ByteLen: 3000, QPNum: p.qb.QPN})
	sameBytes(t, "after RNR", p.b.mem[:3000], p.a.mem[:3000])
}

// TestRetryExceeded: the peer stops answering (every packet to it is
// dropped); with retry_cnt N (0 to 7, IBTA: 7 is no special value) the
// requester times out N+1 times, sends the messages N+1 times, then
// completes with RETRY_EXC_ERR and flushes the rest.
func TestRetryExceeded(t *testing.T) {
	for retry := uint8(0); retry <= 7; retry++ {
		t.Run(fmt.Sprintf("retry_cnt=%d", retry), func(t *testing.T) {
			p := newPair(t, pairOpts{faulty: true, retry: retry, noRetry: retry == 0, timeout: 8}) // 1 ms, 8 ms at most with backoff
			p.a.faulty.SetTX(fault.Faults{Drop: 1})
			mustPost(t, p.a, p.qa,
				ib.SendWR{WRID: 1, Opcode: ib.WRRDMAWrite, SGL: []ib.SGE{sge(p.a, 0, 5000)}, RemoteAddr: memVA, RKey: p.b.mr.RKey},
				ib.SendWR{WRID: 2, Opcode: ib.WRSend, Flags: ib.SendSignaled, SGL: []ib.SGE{sge(p.a, 0, 5)}})
			wcs := p.a.poll(2, 5*time.Second)
			checkWC(t, wcs[0], ib.WC{WRID: 1, Status: ib.WCRetryExcErr, Opcode: ib.WCRDMAWrite, QPNum: p.qa.QPN})
			checkWC(t, wcs[1], ib.WC{WRID: 2, Status: ib.WCWRFlushErr, Opcode: ib.WCSend, QPNum: p.qa.QPN})
			n := uint64(retry) + 1 // transmissions of the 6 packets (5 WRITE, 1 SEND)
			for name, want := range map[string]uint64{"local_ack_timeout_err": n, "completer_retry_err": n - 1,
				"retry_exceeded_err": 1, "sent_pkts": n * 6} {
				if c := counter(p.a, name); c != want {
					t.Errorf("%s = %d, want %d", name, c, want)
				}
			}
			if st := p.a.dev.QueryQP(p.qa).State; st != ib.QPSErr {
				t.Fatalf("QP in %v, want ERR", st)
			}
		})
	}
}

// waitCounter waits until n's counter name reaches at least want, and
// fails if it has not within d.
func waitCounter(t *testing.T, n *node, name string, want uint64, d time.Duration) {
	t.Helper()
	for end := time.Now().Add(d); counter(n, name) < want; time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%s = %d after %v, want %d or more; counters %v", name, counter(n, name), d, want, n.dev.Observer().Counters())
		}
	}
}

// TestRetry7Forever: with the device's Retry7Forever (rxe's reading),
// retry_cnt 7 outlives many more than seven ACK timeouts, and the message
// completes once the peer answers again.
func TestRetry7Forever(t *testing.T) {
	p := newPair(t, pairOpts{faulty: true, retry: 7, timeout: 8, retry7Ever: true})
	fill(p.a.mem[:5000], 3)
	p.a.faulty.SetTX(fault.Faults{Drop: 1})
	mustPost(t, p.a, p.qa, ib.SendWR{WRID: 1, Opcode: ib.WRRDMAWrite, Flags: ib.SendSignaled,
		SGL: []ib.SGE{sge(p.a, 0, 5000)}, RemoteAddr: memVA, RKey: p.b.mr.RKey})
	waitCounter(t, p.a, "local_ack_timeout_err", 12, 10*time.Second)
	p.a.faulty.SetTX(fault.Faults{})
	checkWC(t, p.a.poll(1, 5*time.Second)[0], ib.WC{WRID: 1, Opcode: ib.WCRDMAWrite, ByteLen: 5000, QPNum: p.qa.QPN})
	sameBytes(t, "after 12 timeouts", p.b.mem[:5000], p.a.mem[:5000])
	if c := counter(p.a, "retry_exceeded_err"); c != 0 {
		t.Errorf("retry_exceeded_err = %d, want 0", c)
	}
}

// TestRNRRetry7Forever: rnr_retry 7 is forever (IBTA): a SEND keeps
// getting RNR NAKs, many more than seven, and completes once the receiver
// posts a WQE. The ACK timeout is not the point: at 1.07 s (not the
// default 16.8 ms, which a loaded machine overran between two RNR NAKs)
// retry_cnt 0 still fails the SEND on any ACK timeout.
func TestRNRRetry7Forever(t *testing.T) {
	p := newPair(t, pairOpts{rnrRetry: 7, noRetry: true, minRNR: 1, timeout: 18}) // timer code 1: 0.01 ms
	fill(p.a.mem[:100], 4)
	mustPost(t, p.a, p.qa, ib.SendWR{WRID: 1, Opcode: ib.WRSend, Flags: ib.SendSignaled, SGL: []ib.SGE{sge(p.a, 0, 100)}})
	waitCounter(t, p.a, "rcvd_rnr_err", 50, 10*time.Second)
	var wc [1]ib.WC
	if p.a.cq.Poll(wc[:]) != 0 {
		t.Fatalf("completion before the receive was posted: %v", &wc[0])
	}
	mustRecv(t, p.b, p.qb, ib.RecvWR{WRID: 9, SGL: []ib.SGE{sge(p.b, 0, 100)}})
	checkWC(t, p.a.poll(1, 5*time.Second)[0], ib.WC{WRID: 1, Opcode: ib.WCSend, ByteLen: 100, QPNum: p.qa.QPN})
	checkWC(t, p.b.poll(1, 5*time.Second)[0], ib.WC{WRID: 9, Opcode: ib.WCRecv, ByteLen: 100, QPNum: p.qb.QPN})
	sameBytes(t, "after RNR", p.b.mem[:100], p.a.mem[:100])
	if c := counter(p.a, "retry_rnr_exceeded_err"); c != 0 {
		t.Errorf("retry_rnr_exceeded_err = %d, want 0", c)
	}
}

// TestWrongState: verbs a state does not allow fail cleanly and change
// nothing.
func TestWrongState(t *testing.T) {
	aa, _ := nextPair(t)
	n := newNode(t, aa, 1024, 4096, false, 0)
	qp := n.createQP(pairOpts{typ: ib.QPTypeRC, sendWR: 16})
	if err := n.dev.PostRecv(qp, []ib.RecvWR{{WRID: 1}}); !errors.Is(err, ib.ErrQPState) {
		t.Fatalf("PostRecv in RESET: %v", err)
	}
	// RESET -> RTS skips INIT and RTR.
	err := n.dev.ModifyQP(qp, &ib.QPAttr{State: ib.QPSRTS}, ib.AttrState|ib.AttrSQPSN)
	var te *qpmgr.TransitionError
	if !errors.As(err, &te) || !te.Invalid {
		t.Fatalf("RESET->RTS: %v", err)
	}
	// RESET -> INIT without the port.
	err = n.dev.ModifyQP(qp, &ib.QPAttr{State: ib.QPSInit}, ib.AttrState|ib.AttrPKeyIndex|ib.AttrAccessFlags)
	if !errors.As(err, &te) || te.Missing != ib.AttrPort {
		t.Fatalf("RESET->INIT without PORT: %v", err)
	}
	if st := n.dev.QueryQP(qp).State; st != ib.QPSReset {
		t.Fatalf("failed modifies left the QP in %v", st)
	}
	init := ib.QPAttr{State: ib.QPSInit, PortNum: 1}
	if err := n.dev.ModifyQP(qp, &init, ib.AttrState|ib.AttrPKeyIndex|ib.AttrPort|ib.AttrAccessFlags); err != nil {
		t.Fatal(err)
	}
	if err := n.dev.PostSend(qp, []ib.SendWR{{WRID: 1, Opcode: ib.WRSend}}); !errors.Is(err, ib.ErrQPState) {
		t.Fatalf("PostSend in INIT: %v", err)
	}
	// A bad attribute value fails the whole modify.
	rtr := ib.QPAttr{State: ib.QPSRTR, PathMTU: ib.MTU4096, AH: ib.AH{DGID: netif.GIDFromAddr(aa)}}
	if err := n.dev.ModifyQP(qp, &rtr, ib.AttrState|ib.AttrAV|ib.AttrPathMTU|ib.AttrDestQPN|ib.AttrRQPSN|ib.AttrMaxDestRdAtomic|ib.AttrMinRNRTimer); err == nil {
		t.Fatal("path MTU 4096 above the port's 1024 was accepted")
	}
	// An sgid_index at or past the GID table's end is refused, as
	// ib_core refuses it (EINVAL); the last index is taken.
	rtr = ib.QPAttr{State: ib.QPSRTR, PathMTU: ib.MTU1024, AH: ib.AH{DGID: netif.GIDFromAddr(aa), SGIDIndex: ib.GIDTableLen}}
	rtrMask := ib.AttrState | ib.AttrAV | ib.AttrPathMTU | ib.AttrDestQPN | ib.AttrRQPSN | ib.AttrMaxDestRdAtomic | ib.AttrMinRNRTimer
	if err := n.dev.ModifyQP(qp, &rtr, rtrMask); err == nil || !strings.Contains(err.Error(), "sgid_index 2: the port's GID table has 2 entries") {
		t.Fatalf("sgid_index past the GID table: %v", err)
	}
	if st := n.dev.QueryQP(qp).State; st != ib.QPSInit {
		t.Fatalf("failed modify left the QP in %v", st)
	}
	// Receive WRs posted in INIT flush when the QP goes to ERR.
	mustRecv(t, n, qp, ib.RecvWR{WRID: 7}, ib.RecvWR{WRID: 8})
	if err := n.dev.ModifyQP(qp, &ib.QPAttr{State: ib.QPSErr}, ib.AttrState); err != nil {
		t.Fatal(err)
	}
	wcs := n.poll(2, time.Second)
	for i, wc := range wcs {
		checkWC(t, wc, ib.WC{WRID: uint64(7 + i), Status: ib.WCWRFlushErr, Opcode: ib.WCRecv, QPNum: qp.QPN})
	}
}

// TestWindow: with every packet lost, a requester sends exactly its window
// of PSNs before it waits for an ACK that never comes (rxe's 128 by
// default, the device's Window when set), then times out and goes back.
// The count is taken once it has stopped growing for a while, before the
// 4.3 s ACK timeout (a 30 ms sleep against 67 ms failed on a loaded
// machine): no timeout may have fired by then.
func TestWindow(t *testing.T) {
	for _, w := range []int{0, 300} {
		p := newPair(t, pairOpts{faulty: true, retry: 1, timeout: 20, memLen: 2 << 20, window: w}) // 4.3 s
		p.a.faulty.SetTX(fault.Faults{Drop: 1})
		mustPost(t, p.a, p.qa, ib.SendWR{WRID: 1, Opcode: ib.WRRDMAWrite, Flags: ib.SendSignaled,
			SGL: []ib.SGE{sge(p.a, 0, 1<<20)}, RemoteAddr: memVA, RKey: p.b.mr.RKey}) // 1024 packets
		want := uint64(qpmgr.MaxUnackedPSNs)
		if w > 0 {
			want = uint64(w)
		}
		// The injector counts what it dropped: all the requester sent.
		dropped := func() uint64 { return p.a.faulty.FaultStats().TX.Dropped }
		for end := time.Now().Add(2 * time.Second); dropped() < want && time.Now().Before(end); {
			time.Sleep(time.Millisecond)
		}
		time.Sleep(50 * time.Millisecond) // room for any packet past the window
		got := dropped()
		if c := counter(p.a, "local_ack_timeout_err"); c != 0 {
			t.Fatalf("window %d: %d ACK timeouts before the count", w, c)
		}
		if got != want {
			t.Errorf("window %d: %d packets sent before the first timeout, want %d", w, got, want)
		}
	}
}
