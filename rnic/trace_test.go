package rnic_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/rnic/trace"
	"github.com/rnicd/rnicd/wire/bth"
	"github.com/rnicd/rnicd/wire/fault"
)

// want describes one expected trace event; zero fields are not checked.
type want struct {
	nic    string
	step   trace.Step
	op     bth.Opcode
	psn    uint32
	hasPSN bool
	arg    uint32
	hasArg bool
	flags  trace.Flags // must all be set
	notFl  trace.Flags // must all be clear
	wrid   uint64
}

func (w want) match(e *trace.Event) bool {
	return e.NIC == w.nic && e.Step == w.step &&
		(w.op == 0 || e.Opcode == w.op) &&
		(!w.hasPSN || e.PSN == w.psn) &&
		(!w.hasArg || e.Arg == w.arg) &&
		e.Flags&w.flags == w.flags && e.Flags&w.notFl == 0 &&
		(w.wrid == 0 || e.WRID == w.wrid)
}

func (w want) String() string {
	return fmt.Sprintf("%s %v op %v psn %#x(%v) arg %d(%v) flags %#x", w.nic, w.step, w.op, w.psn, w.hasPSN, w.arg, w.hasArg, w.flags)
}

// TestTraceWriteWithLoss follows one RC RDMA WRITE of three packets whose
// second packet the requester's fault injector drops: the trace must show,
// in order, the three packets built and two of them sent, the loss, the
// responder's out-of-sequence detection and its NAK, the NAK's receipt, the
// go-back-N retransmission of the last two packets, the ACK and the
// completion, with the data placed byte for byte.
func TestTraceWriteWithLoss(t *testing.T) {
	tr := trace.New(0)
	sub := tr.Subscribe(trace.Filter{})
	defer sub.Close()
	// An ACK timeout of 1 s (18): the NAK, not the timer, must recover the
	// loss; on a loaded machine a short timer could fire first.
	p := newPair(t, pairOpts{mtu: 1024, faulty: true, retry: 7, timeout: 18, trace: tr})
	a, b := p.a, p.b
	a.faulty.SetTX(fault.Faults{FilterQPN: true, QPN: p.qb.QPN, DropNth: 2})

	const n, wrid = 3 * 1024, 0x77
	fill(a.mem[:n], 5)
	a.fence()
	mustPost(t, a, p.qa, ib.SendWR{WRID: wrid, Opcode: ib.WRRDMAWrite, Flags: ib.SendSignaled,
		SGL: []ib.SGE{sge(a, 0, n)}, RemoteAddr: memVA + 4096, RKey: b.mr.RKey})
	wc := a.poll(1, 30*time.Second)
	checkWC(t, wc[0], ib.WC{WRID: wrid, Opcode: ib.WCRDMAWrite, ByteLen: n, QPNum: p.qa.QPN})
	sameBytes(t, "written data", b.mem[4096:4096+n], a.mem[:n])

	// Read the trace up to the completion (the ACK it follows came last).
	var evs []trace.Event
	buf := make([]trace.Event, 256)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for done := false; !done; {
		k, err := sub.Read(ctx, buf)
		if err != nil {
			t.Fatalf("trace ended before the completion: %v; %d events", err, len(evs))
		}
		for _, e := range buf[:k] {
			evs = append(evs, e)
			if e.NIC == "rnic0" && e.Step == trace.StepComplete && e.WRID == wrid {
				done = true
			}
		}
	}
	if sub.Lost() != 0 {
		t.Fatalf("reader lost %d events", sub.Lost())
	}
	var timeline strings.Builder
	for i := range evs {
		timeline.WriteString(trace.Format(&evs[i], evs[0].Time))
		timeline.WriteByte('\n')
	}
	t.Logf("trace:\n%s", timeline.String())

	psn := 0x100 + p.qa.QPN // the harness's SQ PSN
	at := func(i uint32) uint32 { return psn + i }
	seq := []want{
		{nic: "rnic0", step: trace.StepPost, wrid: wrid},
		{nic: "rnic0", step: trace.StepDoorbell, arg: 1, hasArg: true},
		{nic: "rnic0", step: trace.StepFetch, psn: at(0), hasPSN: true, arg: 3, hasArg: true, wrid: wrid},
		// Three packets built, none a retransmission.
		{nic: "rnic0", step: trace.StepSegment, psn: at(0), hasPSN: true, arg: 0, hasArg: true},
		{nic: "rnic0", step: trace.StepDMARead, psn: at(0), hasPSN: true},
		{nic: "rnic0", step: trace.StepHeaders, op: bth.RCRDMAWriteFirst, psn: at(0), hasPSN: true, notFl: trace.FlagRetransmit},
		{nic: "rnic0", step: trace.StepHeaders, op: bth.RCRDMAWriteMiddle, psn: at(1), hasPSN: true, notFl: trace.FlagRetransmit},
		{nic: "rnic0", step: trace.StepHeaders, op: bth.RCRDMAWriteLast, psn: at(2), hasPSN: true, flags: trace.FlagAckReq, notFl: trace.FlagRetransmit},
		// The injector in front of the port loses the middle one; the
		// other two reach the wire.
		{nic: "rnic0", step: trace.StepFaultDrop, op: bth.RCRDMAWriteMiddle, psn: at(1), hasPSN: true},
		{nic: "rnic0", step: trace.StepTransmit, op: bth.RCRDMAWriteFirst, psn: at(0), hasPSN: true},
		{nic: "rnic0", step: trace.StepTransmit, op: bth.RCRDMAWriteLast, psn: at(2), hasPSN: true},
		// The responder takes the first, sees the gap at the third, NAKs.
		// (Whether the third arrives in the first's receive batch is up to
		// the scheduler, so its receipt is not placed.)
		{nic: "rnic1", step: trace.StepReceive, psn: at(0), hasPSN: true},
		{nic: "rnic1", step: trace.StepPSNCheck, psn: at(0), hasPSN: true, arg: uint32(trace.PSNOk), hasArg: true},
		{nic: "rnic1", step: trace.StepDMAWrite, psn: at(0), hasPSN: true, arg: 0, hasArg: true},
		{nic: "rnic1", step: trace.StepPSNCheck, psn: at(2), hasPSN: true, arg: uint32(trace.PSNOutOfOrder), hasArg: true},
		{nic: "rnic1", step: trace.StepAckSent, psn: at(1), hasPSN: true, arg: uint32(bth.NAKPSNSeqError), hasArg: true},
		// The requester gets the NAK and goes back to the lost PSN.
		{nic: "rnic0", step: trace.StepAckRecv, psn: at(1), hasPSN: true, arg: uint32(bth.NAKPSNSeqError), hasArg: true},
		{nic: "rnic0", step: trace.StepRetry, psn: at(1), hasPSN: true, arg: uint32(trace.RetryNAK), hasArg: true},
		{nic: "rnic0", step: trace.StepRewind, psn: at(1), hasPSN: true, wrid: wrid},
		{nic: "rnic0", step: trace.StepHeaders, op: bth.RCRDMAWriteMiddle, psn: at(1), hasPSN: true, flags: trace.FlagRetransmit},
		{nic: "rnic0", step: trace.StepHeaders, op: bth.RCRDMAWriteLast, psn: at(2), hasPSN: true, flags: trace.FlagRetransmit | trace.FlagAckReq},
		{nic: "rnic0", step: trace.StepTransmit, op: bth.RCRDMAWriteMiddle, psn: at(1), hasPSN: true},
		{nic: "rnic0", step: trace.StepTransmit, op: bth.RCRDMAWriteLast, psn: at(2), hasPSN: true},
		// The responder places the rest and ACKs the last PSN.
		{nic: "rnic1", step: trace.StepPSNCheck, psn: at(1), hasPSN: true, arg: uint32(trace.PSNOk), hasArg: true},
		{nic: "rnic1", step: trace.StepDMAWrite, psn: at(1), hasPSN: true, arg: 1024, hasArg: true},
		{nic: "rnic1", step: trace.StepPSNCheck, psn: at(2), hasPSN: true, arg: uint32(trace.PSNOk), hasArg: true},
		{nic: "rnic1", step: trace.StepDMAWrite, psn: at(2), hasPSN: true, arg: 2048, hasArg: true},
		{nic: "rnic1", step: trace.StepAckSent, psn: at(2), hasPSN: true, arg: uint32(bth.ACK(bth.CreditsInvalid)), hasArg: true},
		{nic: "rnic0", step: trace.StepAckRecv, psn: at(2), hasPSN: true, arg: uint32(bth.ACK(bth.CreditsInvalid)), hasArg: true},
		{nic: "rnic0", step: trace.StepComplete, arg: uint32(ib.WCSuccess), hasArg: true, flags: trace.FlagCQE, wrid: wrid},
	}
	i := 0
	for _, w := range seq {
		for i < len(evs) && !w.match(&evs[i]) {
			i++
		}
		if i == len(evs) {
			t.Fatalf("trace lacks, after the events before it, %v", w)
		}
		i++
	}
	// And nothing else went wrong: one loss, one NAK, one go-back of the
	// two packets, no timeout. A scheduler that delays a daemon by a
	// round trip (1-2 ms under -race; 1 run in 4) lets the responder's
	// NAK-repeat timer fire before the resent packets are taken (rx/ack.go),
	// and the requester may take that repeat as a new loss: each repeat
	// is counted (naks_repeated), and each go-back it causes resends the
	// same two packets at most.
	count := func(f func(e *trace.Event) bool) int {
		k := 0
		for i := range evs {
			if f(&evs[i]) {
				k++
			}
		}
		return k
	}
	repeats := int(counter(b, ib.NAKRepeated.String()))
	retries := count(func(e *trace.Event) bool { return e.Step == trace.StepRetry })
	if retries < 1 || retries > 1+repeats {
		t.Errorf("retries: %d, want 1 and at most one per repeated NAK (%d)", retries, repeats)
	}
	// A go-back the ACK overtakes resends nothing.
	resent := count(func(e *trace.Event) bool {
		return e.Step == trace.StepHeaders && e.Flags&trace.FlagRetransmit != 0
	})
	if resent < 2 || resent > 2*retries || resent%2 != 0 {
		t.Errorf("retransmitted packets: %d, want the two lost-and-after, once per go-back (%d)", resent, retries)
	}
	checks := []struct {
		what string
		got  int
		want int
	}{
		{"fault drops", count(func(e *trace.Event) bool { return e.Step == trace.StepFaultDrop }), 1},
		{"NAKs sent", count(func(e *trace.Event) bool {
			return e.Step == trace.StepAckSent && e.Arg == uint32(bth.NAKPSNSeqError)
		}), 1 + repeats},
		{"packets on the wire from rnic0", count(func(e *trace.Event) bool {
			return e.NIC == "rnic0" && e.Step == trace.StepTransmit
		}), 2 + resent},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: %d, want %d", c.what, c.got, c.want)
		}
	}
}
