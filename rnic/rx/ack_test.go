package rx_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/rnic/qpmgr"
	"github.com/rnicd/rnicd/wire/bth"
	"github.com/rnicd/rnicd/wire/ibudp"
)

// ackRig is an rcQP whose Acker runs on a clock the test moves, with
// the device's hold hook recorded.
type ackRig struct {
	*rcQP
	now   time.Time
	holds []time.Time // the until of each Hold call
	tx    sent
}

// newAckRig is an RC QP in RTS, expected PSN 0, ACK timeout 67 ms
// (timeout 14), so that an ACK is held at most 67/8 = 8.4 ms.
func newAckRig(t *testing.T, hold time.Duration) *ackRig {
	t.Helper()
	r := &ackRig{rcQP: newRCQP(t), now: time.Unix(1000, 0)}
	r.h.Resp.Ack.AckHold = hold
	r.h.Resp.Ack.Now = func() time.Time { return r.now }
	r.h.Resp.Ack.Hold = func(qp *qpmgr.QP, until time.Time) {
		if qp != r.qp {
			t.Errorf("Hold told of QP %#x, want %#x", qp.QPN, r.qp.QPN)
		}
		r.holds = append(r.holds, until)
	}
	if got := r.qp.ACKTimeout(); got.Round(time.Millisecond) != 67*time.Millisecond {
		t.Fatalf("ACK timeout %v, want 67 ms", got)
	}
	return r
}

// sendOnly delivers a SEND ONLY of 8 bytes at psn with AckReq set into a
// receive WQE posted for it.
func (r *ackRig) sendOnly(t *testing.T, psn uint32) {
	t.Helper()
	if _, err := r.qp.Recv().Post([]ib.RecvWR{{WRID: uint64(psn), SGL: []ib.SGE{{Addr: 0x1000, Length: 64, LKey: r.mr.LKey}}}}); err != nil {
		t.Fatal(err)
	}
	r.deliver(t, psn)
}

// deliver delivers a SEND ONLY at psn, a receive WQE posted or not.
func (r *ackRig) deliver(t *testing.T, psn uint32) {
	t.Helper()
	const n = 8
	buf := make([]byte, bth.PacketLen(bth.RCSendOnly, n))
	p, err := bth.Build(buf, bth.RCSendOnly, n)
	if err != nil {
		t.Fatal(err)
	}
	p.BTH().Encode(&bth.BTHFields{Opcode: bth.RCSendOnly, PKey: bth.DefaultPKey, DestQP: r.qp.QPN, PSN: psn, AckReq: true})
	b := ibudp.NewBuf()
	b.SetRoCE(buf)
	b.Peer = r.peer
	r.h.Receive(b, &r.tx)
}

// wantAcks checks that the packets sent from index from on are the
// ACKNOWLEDGEs want, byte for byte, to the peer.
func (r *ackRig) wantAcks(t *testing.T, from int, want ...[]byte) {
	t.Helper()
	got := r.tx.bufs[from:]
	if len(got) != len(want) {
		t.Fatalf("%d packets sent, want %d", len(got), len(want))
	}
	for i, b := range got {
		if !bytes.Equal(b.RoCE(), want[i]) {
			t.Errorf("packet %d:\n got % x\nwant % x", i, b.RoCE(), want[i])
		}
		if b.Peer != r.peer {
			t.Errorf("packet %d to %v, want the peer %v", i, b.Peer, r.peer)
		}
	}
}

// ackBytes lays out, by hand, the ACKNOWLEDGE the responder of QP 0x99's
// peer sends: BTH (opcode 0x11, no pad, P_Key 0xffff, destination QP
// 0x99, no AckReq, psn), AETH (syndrome, msn), and the ICRC the port
// fills in, zero here.
func ackBytes(psn uint32, syndrome byte, msn uint32) []byte {
	return []byte{
		0x11, 0x00, 0xff, 0xff, // opcode, SE/M/pad/TVer, P_Key
		0x00, 0x00, 0x00, 0x99, // reserved, destination QP
		0x00, byte(psn >> 16), byte(psn >> 8), byte(psn), // AckReq, PSN
		syndrome, byte(msn >> 16), byte(msn >> 8), byte(msn), // AETH
		0, 0, 0, 0, // ICRC
	}
}

// Syndromes on the wire (IBTA 9.7.5.1.1, table 44).
const (
	synACK       = 0x1f // ACK, credits invalid
	synSeqErrNAK = 0x60 // NAK, PSN sequence error
)

// TestAckCoalescedFlushedAtBatchEnd: the SENDs of one receive batch that
// ask for an ACK get one, for the newest, when the batch ends (Flush),
// and none before.
func TestAckCoalescedFlushedAtBatchEnd(t *testing.T) {
	r := newAckRig(t, 0)
	for psn := uint32(0); psn < 3; psn++ {
		r.sendOnly(t, psn)
	}
	r.wantAcks(t, 0) // nothing before the batch ends
	r.h.Resp.Ack.Flush(&r.tx)
	r.wantAcks(t, 0, ackBytes(2, synACK, 3))
	if c := r.h.Counters.Get(ib.AckDeferred); c != 2 {
		t.Errorf("ack_deferred = %d, want 2", c)
	}
	if c := r.qp.Counters.Get(ib.SentPkts); c != 1 {
		t.Errorf("sent_pkts = %d, want 1", c)
	}
	// A second Flush has nothing left to send.
	r.h.Resp.Ack.Flush(&r.tx)
	r.wantAcks(t, 1)
	if len(r.holds) != 0 {
		t.Errorf("Hold told %d times with the hold off", len(r.holds))
	}
}

// TestAckUnsentGoesBeforeRequest: a request the QP sends before the
// batch that holds its ACK went out takes that ACK with it, first.
func TestAckUnsentGoesBeforeRequest(t *testing.T) {
	r := newAckRig(t, 0)
	r.sendOnly(t, 0)
	if r.h.Resp.Ack.Release(r.qp, &r.tx) {
		t.Fatal("Release reports a held ACK, none was")
	}
	r.wantAcks(t, 0, ackBytes(0, synACK, 1))
	r.h.Resp.Ack.Flush(&r.tx) // the batch's ACK went already
	r.wantAcks(t, 1)

	// ACKed at Flush, but its batch not yet out: the ACK goes again,
	// before the request.
	r.sendOnly(t, 1)
	r.h.Resp.Ack.Flush(&r.tx)
	r.h.Resp.Ack.Release(r.qp, &r.tx)
	r.wantAcks(t, 1, ackBytes(1, synACK, 2), ackBytes(1, synACK, 2))
	// Once the batch went out, a request sends nothing more.
	r.h.Resp.Ack.Sent()
	r.h.Resp.Ack.Release(r.qp, &r.tx)
	r.wantAcks(t, 3)
}

// pingPong brings r's QP into ping-pong mode: an ACK went out at Flush,
// its batch went, and the QP's requester sent 1 ms later, within the
// 8.4 ms hold. It returns how many packets went.
func (r *ackRig) pingPong(t *testing.T) int {
	t.Helper()
	r.sendOnly(t, 0)
	r.h.Resp.Ack.Flush(&r.tx)
	r.h.Resp.Ack.Sent()
	r.wantAcks(t, 0, ackBytes(0, synACK, 1))
	r.now = r.now.Add(time.Millisecond)
	if r.h.Resp.Ack.Release(r.qp, &r.tx) {
		t.Fatal("Release reports a held ACK, none was")
	}
	if !r.qp.Resp.Ack.PingPong {
		t.Fatal("a request 1 ms after the ACK did not make the QP ping-pong")
	}
	return len(r.tx.bufs)
}

// TestAckHeldReleasedByRequest: a ping-pong QP's ACK is held at Flush
// (the device's timer told when it must go) and goes out when the QP's
// requester sends, counted in ack_held.
func TestAckHeldReleasedByRequest(t *testing.T) {
	r := newAckRig(t, time.Second)
	n := r.pingPong(t)
	r.sendOnly(t, 1)
	r.sendOnly(t, 2)
	r.h.Resp.Ack.Flush(&r.tx)
	r.h.Resp.Ack.Sent()
	r.wantAcks(t, n) // held
	hold := r.qp.ACKTimeout() / 8
	if len(r.holds) != 1 || !r.holds[0].Equal(r.now.Add(hold)) {
		t.Fatalf("Hold told %v, want once, until now + %v", r.holds, hold)
	}
	if d := r.h.Resp.Ack.Deadline(r.qp); !d.Equal(r.holds[0]) {
		t.Fatalf("Deadline %v, want the hold's end %v", d, r.holds[0])
	}
	r.now = r.now.Add(100 * time.Microsecond)
	if !r.h.Resp.Ack.Release(r.qp, &r.tx) {
		t.Fatal("Release reports no held ACK")
	}
	r.wantAcks(t, n, ackBytes(2, synACK, 3))
	if c := r.h.Counters.Get(ib.AckHeld); c != 1 {
		t.Errorf("ack_held = %d, want 1", c)
	}
	if c := r.h.Counters.Get(ib.AckHoldExpired); c != 0 {
		t.Errorf("ack_hold_expired = %d, want 0", c)
	}
	// Nothing is left for the timer.
	if d := r.h.Resp.Ack.Deadline(r.qp); !d.IsZero() {
		t.Errorf("Deadline %v after the release, want none", d)
	}
	if r.h.Resp.Ack.Expire(r.qp, &r.tx, r.now.Add(time.Hour)) {
		t.Error("Expire reports work left after the release")
	}
	r.wantAcks(t, n+1)
}

// TestAckHeldExpires: a held ACK nobody comes for goes alone when the
// device's timer finds its hold over, not before, counted in
// ack_hold_expired; the QP leaves ping-pong mode.
func TestAckHeldExpires(t *testing.T) {
	r := newAckRig(t, time.Second)
	n := r.pingPong(t)
	r.sendOnly(t, 1)
	r.h.Resp.Ack.Flush(&r.tx)
	until := r.h.Resp.Ack.Deadline(r.qp)
	if until.IsZero() {
		t.Fatal("no ACK held")
	}
	if !r.h.Resp.Ack.Expire(r.qp, &r.tx, until.Add(-time.Nanosecond)) {
		t.Fatal("Expire before the hold's end reports nothing held")
	}
	r.wantAcks(t, n)
	if r.h.Resp.Ack.Expire(r.qp, &r.tx, until) {
		t.Fatal("Expire at the hold's end reports work left")
	}
	r.wantAcks(t, n, ackBytes(1, synACK, 2))
	if c := r.h.Counters.Get(ib.AckHoldExpired); c != 1 {
		t.Errorf("ack_hold_expired = %d, want 1", c)
	}
	if c := r.h.Counters.Get(ib.AckHeld); c != 0 {
		t.Errorf("ack_held = %d, want 0", c)
	}
	if r.qp.Resp.Ack.PingPong {
		t.Error("the QP is still ping-pong after its hold ran out")
	}
	// Out of ping-pong mode, the next ACK goes at Flush.
	r.sendOnly(t, 2)
	r.h.Resp.Ack.Flush(&r.tx)
	r.wantAcks(t, n+1, ackBytes(2, synACK, 3))
}

// TestAckHeldSentBeforeModify: ModifyQP and DestroyQP send the held ACK
// first (SendHeld), counted in ack_hold_expired; a QP that no longer
// answers (in ERR) sends nothing.
func TestAckHeldSentBeforeModify(t *testing.T) {
	r := newAckRig(t, time.Second)
	if r.h.Resp.Ack.SendHeld(r.qp, &r.tx) {
		t.Fatal("SendHeld reports an ACK with none held")
	}
	n := r.pingPong(t)
	r.sendOnly(t, 1)
	r.h.Resp.Ack.Flush(&r.tx)
	r.wantAcks(t, n)
	if !r.h.Resp.Ack.SendHeld(r.qp, &r.tx) {
		t.Fatal("SendHeld reports no held ACK")
	}
	r.wantAcks(t, n, ackBytes(1, synACK, 2))
	if c := r.h.Counters.Get(ib.AckHoldExpired); c != 1 {
		t.Errorf("ack_hold_expired = %d, want 1", c)
	}
	if r.h.Resp.Ack.SendHeld(r.qp, &r.tx) {
		t.Error("SendHeld sent the ACK twice")
	}

	// Held, then the QP went to ERR without SendHeld: it answers no
	// more, and the timer sends nothing.
	r.sendOnly(t, 2)
	r.h.Resp.Ack.Flush(&r.tx)
	r.wantAcks(t, n+1)
	r.qp.EnterError()
	if !r.h.Resp.Ack.SendHeld(r.qp, &r.tx) {
		t.Fatal("SendHeld reports no held ACK")
	}
	r.wantAcks(t, n+1)
	if r.h.Resp.Ack.Expire(r.qp, &r.tx, r.now.Add(time.Hour)) {
		t.Error("Expire reports work left for a QP in ERR")
	}
	r.wantAcks(t, n+1)
	if c := r.h.Counters.Get(ib.AckHoldExpired); c != 1 {
		t.Errorf("ack_hold_expired = %d, want 1", c)
	}
}

// TestNAKAndItsRepeatAfterQuietGap: a gap is NAKed at once (PSN the
// expected one, MSN of the last message), and, no packet coming, the
// device's timer sends the NAK again when the repeat is due: before any
// round trip was measured, 2 x 500 us after the NAK, then twice that.
func TestNAKAndItsRepeatAfterQuietGap(t *testing.T) {
	r := newAckRig(t, time.Second)
	r.sendOnly(t, 0)
	r.h.Resp.Ack.Flush(&r.tx)
	r.wantAcks(t, 0, ackBytes(0, synACK, 1))
	t0 := r.now
	r.deliver(t, 2) // PSN 1 lost
	r.wantAcks(t, 1, ackBytes(1, synSeqErrNAK, 1))
	r.h.Resp.Ack.Flush(&r.tx)
	r.wantAcks(t, 2) // the NAK asks for no ACK at the batch's end
	if len(r.holds) != 1 || !r.holds[0].Equal(t0.Add(time.Millisecond)) {
		t.Fatalf("Hold told %v, want once, at the NAK + 1 ms", r.holds)
	}
	if d := r.h.Resp.Ack.Deadline(r.qp); !d.Equal(t0.Add(time.Millisecond)) {
		t.Fatalf("Deadline %v, want the NAK + 1 ms", d.Sub(t0))
	}
	if !r.h.Resp.Ack.Expire(r.qp, &r.tx, t0.Add(time.Millisecond-time.Nanosecond)) {
		t.Fatal("Expire before the repeat is due reports none scheduled")
	}
	r.wantAcks(t, 2)
	r.now = t0.Add(time.Millisecond)
	if !r.h.Resp.Ack.Expire(r.qp, &r.tx, r.now) {
		t.Fatal("Expire reports no further repeat scheduled")
	}
	r.wantAcks(t, 2, ackBytes(1, synSeqErrNAK, 1))
	if c := r.h.Counters.Get(ib.NAKRepeated); c != 1 {
		t.Errorf("naks_repeated = %d, want 1", c)
	}
	if c := r.qp.Counters.Get(ib.NAKsSent); c != 2 {
		t.Errorf("naks_sent = %d, want 2", c)
	}
	if d := r.h.Resp.Ack.Deadline(r.qp); !d.Equal(r.now.Add(2 * time.Millisecond)) {
		t.Fatalf("next repeat due %v after the last NAK, want 2 ms", d.Sub(r.now))
	}

	// The go-back closes the gap: no more repeats, and the ACK of what
	// it brings goes at Flush.
	r.now = r.now.Add(300 * time.Microsecond)
	r.sendOnly(t, 1)
	r.sendOnly(t, 2)
	r.h.Resp.Ack.Flush(&r.tx)
	r.wantAcks(t, 3, ackBytes(2, synACK, 3))
	if d := r.h.Resp.Ack.Deadline(r.qp); !d.IsZero() {
		t.Errorf("Deadline %v after the gap closed, want none", d)
	}
	if r.h.Resp.Ack.Expire(r.qp, &r.tx, r.now.Add(time.Hour)) {
		t.Error("Expire reports work left after the gap closed")
	}
	r.wantAcks(t, 4)
}

// TestNAKCoversTheBatchsACK: a gap's NAK acknowledges every PSN before
// it (IBTA 9.7.5.1.2), so the ACK coalesced earlier in the same batch
// does not follow it at Flush, older than the NAK, as it did (NAK 1192,
// then ACK 1160, in a capture of ib_write_bw at 1% loss).
func TestNAKCoversTheBatchsACK(t *testing.T) {
	r := newAckRig(t, 0)
	r.sendOnly(t, 0)
	r.sendOnly(t, 1)
	r.deliver(t, 3) // PSN 2 lost
	r.wantAcks(t, 0, ackBytes(2, synSeqErrNAK, 2))
	r.h.Resp.Ack.Flush(&r.tx)
	r.wantAcks(t, 1) // no ACK of PSN 1 after the NAK
	if c := r.qp.Counters.Get(ib.SentPkts); c != 1 {
		t.Errorf("sent_pkts = %d, want 1 (the NAK)", c)
	}
	// The go-back's ACK is coalesced and flushed as any other.
	r.sendOnly(t, 2)
	r.sendOnly(t, 3)
	r.h.Resp.Ack.Flush(&r.tx)
	r.wantAcks(t, 1, ackBytes(3, synACK, 4))
}

// TestRNRNAKOncePerGap: a SEND without a receive WQE is RNR NAKed
// (timer: the QP's min_rnr_timer); the requests behind it are part of
// the same gap, dropped without a NAK of their own; the resend that finds
// a WQE is ACKed.
func TestRNRNAKOncePerGap(t *testing.T) {
	r := newAckRig(t, 0)
	r.deliver(t, 0)
	r.deliver(t, 1)
	r.h.Resp.Ack.Flush(&r.tx)
	r.wantAcks(t, 0, ackBytes(0, 0x20|r.qp.Attr.MinRNRTimer, 0))
	if c := r.h.Counters.Get(ib.OutOfSeqRequest); c != 1 {
		t.Errorf("out_of_seq_request = %d, want 1", c)
	}
	r.sendOnly(t, 0)
	r.h.Resp.Ack.Flush(&r.tx)
	r.wantAcks(t, 1, ackBytes(0, synACK, 1))
	if c := r.qp.Counters.Get(ib.NAKsSent); c != 1 {
		t.Errorf("naks_sent = %d, want 1", c)
	}
	if d := r.h.Resp.Ack.Deadline(r.qp); !d.IsZero() {
		t.Errorf("Deadline %v: an RNR NAK is never repeated by the timer", d)
	}
}
