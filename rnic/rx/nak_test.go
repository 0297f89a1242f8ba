package rx_test

import (
	"testing"
	"time"

	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/rnic/wqe"
	"github.com/rnicd/rnicd/wire/bth"
	"github.com/rnicd/rnicd/wire/ibudp"
)

// writeMiddle builds the RDMA WRITE MIDDLE packet of PSN psn for r's QP:
// a request the responder drops when psn is past a gap.
func (r *rcQP) writeMiddle(psn uint32) *ibudp.Buf {
	const n = 1024
	buf := make([]byte, bth.PacketLen(bth.RCRDMAWriteMiddle, n))
	p, _ := bth.Build(buf, bth.RCRDMAWriteMiddle, n)
	p.BTH().Encode(&bth.BTHFields{Opcode: bth.RCRDMAWriteMiddle, PKey: bth.DefaultPKey, DestQP: r.qp.QPN, PSN: psn})
	b := ibudp.NewBuf()
	b.SetRoCE(buf)
	b.Peer = r.peer
	return b
}

// naks returns the PSNs of the PSN sequence error NAKs among tx's packets
// from index from on.
func naks(t *testing.T, tx *sent, from int) []uint32 {
	t.Helper()
	var psns []uint32
	for _, b := range tx.bufs[from:] {
		p, err := bth.Parse(b.RoCE())
		if err != nil {
			t.Fatalf("the responder sent a packet that does not parse: %v", err)
		}
		if p.Opcode() == bth.RCAcknowledge && p.AETH().Syndrome() == bth.NAKPSNSeqError {
			psns = append(psns, p.BTH().PSN())
		}
	}
	return psns
}

// TestNAKRepeatWaitsForQuietGap: a gap is NAKed once, and the NAK goes
// again only once no packet past the gap came for the repeat's interval.
// Packets still arriving past the gap are the requester's flight from
// before the NAK: each pushes the repeat back, since the go-back queues
// behind them and a repeat would send the requester back a second time.
// The clock is pinned by setting the repeat's due time.
func TestNAKRepeatWaitsForQuietGap(t *testing.T) {
	r := newRCQP(t)
	qp, h := r.qp, r.h
	recovering := 0
	h.Resp.Ack.Recovering = func(time.Duration) { recovering++ }
	// No ACK timeout and a measured round trip of 10 s pin the clock:
	// the repeat is due 20 s after the NAK, and no slowness of the host
	// makes it due before the test says the gap went quiet.
	qp.Attr.Timeout = 0
	qp.Resp.Ack.NAKRTT = 10 * time.Second
	var tx sent
	epsn := qp.Resp.EPSN
	h.Receive(r.writeMiddle(epsn+1), &tx) // EPSN lost: a gap
	h.Resp.Ack.Flush(&tx)
	if got := naks(t, &tx, 0); len(got) != 1 || got[0] != epsn {
		t.Fatalf("NAKs after the first packet past the gap: %v, want [%#x]", got, epsn)
	}
	if recovering != 1 {
		t.Fatalf("Recovering told %d times of a NAKed gap, want 1", recovering)
	}
	first := qp.Resp.Ack.NAKAgain
	if first.IsZero() {
		t.Fatal("no repeat scheduled for the gap's NAK")
	}

	// The flight past the gap goes on: no NAK, the repeat moves later.
	sentBefore := len(tx.bufs)
	for psn := epsn + 2; psn < epsn+10; psn++ {
		before := qp.Resp.Ack.NAKAgain
		h.Receive(r.writeMiddle(psn), &tx)
		h.Resp.Ack.Flush(&tx)
		if qp.Resp.Ack.NAKAgain.Before(before) {
			t.Fatalf("PSN %#x moved the repeat earlier: %v before %v", psn, qp.Resp.Ack.NAKAgain, before)
		}
	}
	if got := naks(t, &tx, sentBefore); len(got) != 0 {
		t.Fatalf("NAKs while packets past the gap kept coming: %v, want none", got)
	}
	if !qp.Resp.Ack.NAKAgain.After(first) {
		t.Fatalf("repeat due %v, not after the first due time %v: packets past the gap did not push it", qp.Resp.Ack.NAKAgain, first)
	}
	if c := h.Counters.Get(ib.OutOfSeqRequest); c != 9 { // the first and the 8 after it
		t.Fatalf("out_of_seq_request = %d, want 9", c)
	}

	// Quiet for the interval (the due time is passed): the next packet
	// past the gap, or the timer, sends the repeat, once.
	sentBefore = len(tx.bufs)
	qp.Resp.Ack.NAKAgain = time.Now().Add(-time.Microsecond)
	h.Receive(r.writeMiddle(epsn+10), &tx)
	h.Resp.Ack.Flush(&tx)
	if got := naks(t, &tx, sentBefore); len(got) != 1 || got[0] != epsn {
		t.Fatalf("NAKs once the gap was quiet: %v, want [%#x]", got, epsn)
	}
	if c := h.Counters.Get(ib.NAKRepeated); c != 1 {
		t.Fatalf("naks_repeated = %d, want 1", c)
	}
	sentBefore = len(tx.bufs)
	qp.Resp.Ack.NAKAgain = time.Now().Add(-time.Microsecond)
	if !h.Resp.Ack.Expire(qp, &tx, time.Now()) {
		t.Fatal("Expire: no repeat left scheduled after the second NAK")
	}
	if got := naks(t, &tx, sentBefore); len(got) != 1 || got[0] != epsn {
		t.Fatalf("NAKs from the timer of a quiet gap: %v, want [%#x]", got, epsn)
	}

	// However long the flight, a repeat is never pushed past half the
	// ACK timeout from the last NAK.
	qp.Attr.Timeout = 14
	qp.Resp.Ack.NAKAt = time.Now().Add(-time.Hour)
	due := time.Now().Add(time.Millisecond)
	qp.Resp.Ack.NAKAgain = due
	h.Receive(r.writeMiddle(epsn+11), &tx)
	if !qp.Resp.Ack.NAKAgain.Equal(due) {
		t.Fatalf("repeat moved to %v from %v, an hour after the last NAK", qp.Resp.Ack.NAKAgain, due)
	}
	if recovering != 3 {
		t.Fatalf("Recovering told %d times, want 3 (each NAK sent)", recovering)
	}
}

// TestGoBackTellsRecovering: a requester that goes back on a NAK tells
// the device it recovers (Completer.Recovering), so that a polling engine
// stays awake for the go-back's answer; an ACK does not.
func TestGoBackTellsRecovering(t *testing.T) {
	r := newRCQP(t)
	qp := r.qp
	recovering := 0
	r.h.Comp.Recovering = func(time.Duration) { recovering++ }
	req := wqe.Engine{DMA: r.tab, FC: newFC(t, 0)}
	var tx sent
	r.sendWrite(t, &req, &tx, 1)
	r.ack(t, &tx, 0x10, 0)
	if recovering != 0 {
		t.Fatalf("Recovering told %d times after an ACK, want 0", recovering)
	}
	nak := ibudp.NewBuf()
	nak.SetRoCE(nakFor(qp.QPN, 0x11, 0))
	nak.Peer = r.peer
	r.h.Receive(nak, &tx)
	r.h.Resp.Ack.Flush(&tx)
	if recovering != 1 || !qp.Req.NeedRetry {
		t.Fatalf("after a NAK: Recovering told %d times, go-back pending %v; want 1, true", recovering, qp.Req.NeedRetry)
	}
}
