package rx

import (
	"sync/atomic"
	"time"

	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/rnic/qpmgr"
	"github.com/rnicd/rnicd/rnic/trace"
	"github.com/rnicd/rnicd/wire/bth"
)

// Acker is the responder's ACK of one device: it owns every QP's
// qpmgr.AckState (the coalesced ACK, the held ACK, the NAK of a gap and
// its repeats) and every way an ACK or a NAK leaves a responder is one
// of its methods:
//
//   - Flush, at the end of a receive batch: the ACKs coalesced over it,
//     or, for a ping-pong QP, the ACK held back (Hold is told);
//   - Release, before the QP's requester sends: the held or not yet sent
//     ACK goes first;
//   - Expire, from the device's timer (Hold, Deadline): a held ACK whose
//     hold ran out, a gap's NAK again;
//   - SendHeld, before ModifyQP or DestroyQP: the held ACK alone;
//   - from the responder, on the receive pipeline: a gap's NAK (gap), an
//     RNR NAK (rnrNAK) and the NAK of a request it cannot carry out (nak).
//
// All run with the QP locked. Flush, Sent and the responder's calls run
// on the receive pipeline's goroutine; Release, Expire and SendHeld may
// run on any.
type Acker struct {
	// Counters are the device's (the Responder's): ack_deferred, ack_held,
	// ack_hold_expired, naks_repeated. Required.
	Counters *qpmgr.Counters
	// Trace is the device's trace probe, nil when it traces nothing.
	Trace *trace.Probe
	// AckHold turns on delayed ACKs for QPs that answer what they receive
	// (ping-pong QPs, see Flush); 0 sends every ACK at the end of its batch.
	AckHold time.Duration
	// Hold is told, with the QP locked, of each ACK Flush holds back and
	// of each NAK to repeat, and the time by which it must go; the device
	// sends it with Release or, from that time on, Expire.
	Hold func(qp *qpmgr.QP, until time.Time)
	// Recovering, when not nil, is told, with the QP locked, of each
	// sequence error NAK sent, with the round trip the responder measured
	// from a gap's NAK to its go-back (0 before the first): see
	// Completer.Recovering.
	Recovering func(rtt time.Duration)
	// Now is the clock; nil is time.Now. Tests pin it.
	Now func() time.Time

	acks []*qpmgr.QP // QPs with a coalesced ACK to send at Flush
	// sent counts the receive pipeline's batches that went out (Sent);
	// the one being filled is number sent+1.
	sent atomic.Uint64
}

func (a *Acker) now() time.Time {
	if a.Now != nil {
		return a.Now()
	}
	return time.Now()
}

// Sent tells the Acker that the batch the receive pipeline and Flush
// filled went out: the ACKs in it can no longer be overtaken by a request.
func (a *Acker) Sent() { a.sent.Add(1) }

// Flush sends the ACKs coalesced over a receive batch: one per QP, for the
// newest PSN that asked for one.
//
// A ping-pong QP's ACK is held back instead, to go out just before the
// QP's next request (Release), as TCP delays the ACK of an interactive
// connection (RFC 1122 4.2.3.2; the IBTA lets a responder coalesce ACKs,
// 9.7.5.1.1). On a SEND ping-pong this spares the peer wake-ups: its NIC
// takes the ACK and the reply in one receive, and its application finds
// both completions at once. A hold that runs out (Expire) sends the
// ACK alone and ends the QP's ping-pong mode. The hold is at most an
// eighth of the QP's own ACK timeout: the peer's requester, which must
// not time out waiting, most likely uses the same.
func (a *Acker) Flush(tx qpmgr.TX) {
	for i, qp := range a.acks {
		qp.Lock()
		s := &qp.Resp.Ack
		if s.Pending && answers(qp) {
			switch {
			case s.Held:
				// Still held: the newer PSN goes with the request.
			case s.PingPong && a.Hold != nil:
				s.Held, s.HoldUntil = true, a.now().Add(a.holdFor(qp))
				a.Hold(qp, s.HoldUntil)
			default:
				a.sendAck(qp, tx, bth.ACK(bth.CreditsInvalid), s.PSN)
				s.Batch = a.sent.Load() + 1
				if a.AckHold > 0 {
					s.SentAt = a.now()
				}
			}
		}
		s.Pending = false
		qp.Unlock()
		a.acks[i] = nil
	}
	a.acks = a.acks[:0]
}

// Release is called, with qp locked, before qp's requester sends: an ACK
// held for it goes first, into the same batch. A request that follows an
// ACK within the hold time marks the QP ping-pong. It reports whether qp
// held an ACK. It may run on any goroutine.
func (a *Acker) Release(qp *qpmgr.QP, tx qpmgr.TX) bool {
	s := &qp.Resp.Ack
	if s.Held {
		a.sendHeld(qp, tx, ib.AckHeld)
		return true
	}
	// The application may answer a message before the ACK of it left:
	// before the receive batch that carried the message ended (Flush), or
	// after Flush put the ACK into a batch that has not gone out yet. The
	// ACK goes first all the same, as rxe's and a NIC's do (they send it
	// before the application can see the message); in the second case
	// the batch's copy then comes second and is taken for a duplicate.
	// A reply that overtook the ACK completed at the peer before the send
	// it answers, and Debian's ib_send_lat -e (one channel for both CQs,
	// one poll per event) hung in 9 runs of 25 (21 of 25 with -ack-hold 0).
	if answers(qp) && (s.Pending || (s.Batch != 0 && s.Batch > a.sent.Load())) {
		s.Pending, s.Batch = false, 0
		a.sendAck(qp, tx, bth.ACK(bth.CreditsInvalid), s.PSN)
		if a.AckHold > 0 {
			s.SentAt = a.now()
		}
	}
	if a.AckHold > 0 && !s.PingPong && !s.SentAt.IsZero() && a.now().Sub(s.SentAt) < a.holdFor(qp) {
		s.PingPong = true
	}
	return false
}

// SendHeld sends qp's held ACK alone now, if it holds one, and reports
// whether it did: the QP is about to be destroyed or modified. Call with
// qp locked; it may run on any goroutine.
func (a *Acker) SendHeld(qp *qpmgr.QP, tx qpmgr.TX) bool {
	if !qp.Resp.Ack.Held {
		return false
	}
	a.sendHeld(qp, tx, ib.AckHoldExpired)
	return true
}

// Expire is called, with qp locked, when an ACK may have been held for
// as long as it may: if so, it goes alone and the QP leaves ping-pong
// mode. A NAK whose gap persists goes again (expireNAK). It reports
// whether qp still holds an ACK or a NAK to repeat (see Deadline). It may
// run on any goroutine.
func (a *Acker) Expire(qp *qpmgr.QP, tx qpmgr.TX, now time.Time) bool {
	nak := a.expireNAK(qp, tx, now)
	s := &qp.Resp.Ack
	if !s.Held {
		return nak
	}
	if now.Before(s.HoldUntil) {
		return true
	}
	s.PingPong = false
	a.sendHeld(qp, tx, ib.AckHoldExpired)
	return nak
}

// Deadline is when Expire next has work for qp (a held ACK or a NAK to
// send again); zero if none. Call with qp locked.
func (a *Acker) Deadline(qp *qpmgr.QP) time.Time {
	s := &qp.Resp.Ack
	var t time.Time
	if s.Held {
		t = s.HoldUntil
	}
	if s.NAKSent && !s.NAKAgain.IsZero() && (t.IsZero() || s.NAKAgain.Before(t)) {
		t = s.NAKAgain
	}
	return t
}

// sendHeld sends qp's held ACK, counted as c, unless the QP answers no
// more.
func (a *Acker) sendHeld(qp *qpmgr.QP, tx qpmgr.TX, c ib.Counter) {
	s := &qp.Resp.Ack
	s.Held = false
	if !answers(qp) {
		return
	}
	a.Counters.Inc(c)
	a.sendAck(qp, tx, bth.ACK(bth.CreditsInvalid), s.PSN)
	s.SentAt = a.now()
}

// answers reports whether qp still sends the ACKs it owes.
func answers(qp *qpmgr.QP) bool { return !qp.Destroyed() && qp.State() != ib.QPSErr }

// holdFor is how long qp's ACK may be held: AckHold, at most an eighth of
// the QP's ACK timeout.
func (a *Acker) holdFor(qp *qpmgr.QP) time.Duration {
	if t := qp.ACKTimeout(); t > 0 {
		return min(a.AckHold, t/8)
	}
	return a.AckHold
}

// deferAck asks for an ACK of psn at the end of the batch (Flush).
func (a *Acker) deferAck(qp *qpmgr.QP, psn uint32) {
	s := &qp.Resp.Ack
	if !s.Pending {
		s.Pending = true
		a.acks = append(a.acks, qp)
	} else {
		a.Counters.Inc(ib.AckDeferred)
	}
	s.PSN = psn
}

// nak sends, at once, the NAK with syndrome syn of the request psn that
// the responder cannot carry out (the QP goes to ERR).
func (a *Acker) nak(qp *qpmgr.QP, tx qpmgr.TX, syn bth.Syndrome, psn uint32) {
	a.sendAck(qp, tx, syn, psn)
}

// rnrNAK sends an RNR NAK for psn, no receive WQE being posted, unless
// one went for this gap already: the rest of the message is part of it.
func (a *Acker) rnrNAK(qp *qpmgr.QP, tx qpmgr.TX, psn uint32) {
	s := &qp.Resp.Ack
	if !s.NAKSent {
		s.NAKSent = true
		a.sendAck(qp, tx, bth.RNRNAK(qp.Attr.MinRNRTimer), psn)
	}
}

// sendAck sends an ACKNOWLEDGE with syndrome s (ACK, RNR NAK or NAK).
func (a *Acker) sendAck(qp *qpmgr.QP, tx qpmgr.TX, s bth.Syndrome, psn uint32) {
	b, p := response(qp, tx, bth.RCAcknowledge, 0, psn)
	p.AETH().Encode(s, qp.Resp.MSN)
	if a.Trace.On() {
		a.Trace.Emit(trace.Event{Module: trace.ModRX, Step: trace.StepAckSent, QPN: qp.QPN, PSN: psn,
			Opcode: p.Opcode(), Arg: uint32(s), Aux: qp.Resp.MSN})
	}
	if !s.IsACK() {
		qp.Counters.Inc(ib.NAKsSent)
	}
	qp.Counters.Inc(ib.SentPkts)
	tx.Send(b)
}

// A responder that NAKs a gap once (as rxe does) leaves the requester to
// its ACK timeout when that NAK is lost, or when the first packet it
// resends is: measured with ib_write_bw -s 65536 at 5% drop, 677 ACK
// timeouts of 67 ms each (perftest's timeout 14), 147x slower than
// without loss. The responder therefore NAKs the gap again once it has
// lasted about two round trips past its last NAK, and again after twice
// as long each time, never later than half the QP's ACK timeout, at most
// nakMaxRepeats times: a lost NAK costs a round trip or two, not a
// timeout. The round trip is what the responder sees: from a gap's only
// NAK to the expected PSN arriving. The wire does not change: a repeated
// NAK is an ordinary NAK, and a requester that takes only the first (rxe
// goes back once per retry sequence) is no worse off.

// Bounds of the interval before a NAK goes again.
const (
	// nakAgainFirst is the round trip assumed before one was measured:
	// several times what two daemons on loopback take (about 100 us).
	nakAgainFirst = 500 * time.Microsecond
	// nakAgainMin keeps a repeated NAK from chasing a very short
	// measured round trip on a host whose scheduler adds more.
	nakAgainMin = 100 * time.Microsecond
	// nakMaxRepeats bounds the repeats of one gap's NAK: a requester that
	// takes no repeated NAK (rxe goes back once per retry sequence) then
	// hears a few small packets per gap, not one per doubling until its
	// timeout (against rxe at 3% loss, 4.7 repeats per gap without it).
	nakMaxRepeats = 3
)

// gap is told of a request past the expected PSN (IBTA 9.7.5.1.2,
// C9-95): the first NAKs the gap, those after it may make its repeat
// wait (quietGap).
func (a *Acker) gap(qp *qpmgr.QP, tx qpmgr.TX) {
	s := &qp.Resp.Ack
	switch {
	case !s.NAKSent:
		a.sendSeqNAK(qp, tx)
	case !s.NAKAgain.IsZero():
		a.quietGap(qp, tx, a.now())
	}
}

// inSequence is told of a request at the expected PSN: a gap NAKed
// (sequence error or RNR) is closed.
func (a *Acker) inSequence(qp *qpmgr.QP) {
	if qp.Resp.Ack.NAKSent {
		a.gapClosed(qp)
	}
}

// sendSeqNAK sends a PSN sequence error NAK for the expected PSN and
// schedules the next one should the gap persist. The QP lock is held.
func (a *Acker) sendSeqNAK(qp *qpmgr.QP, tx qpmgr.TX) {
	s := &qp.Resp.Ack
	now := a.now()
	if s.NAKSent {
		a.Counters.Inc(ib.NAKRepeated)
	}
	s.NAKSent, s.NAKAt = true, now
	// The NAK acknowledges every PSN before the expected one (IBTA
	// 9.7.5.1.2): the ACK coalesced so far in this batch would follow it
	// at Flush, older than it, a packet the requester can only drop.
	s.Pending = false
	s.NAKs++
	s.NAKAgain = time.Time{}
	if s.NAKs <= nakMaxRepeats {
		s.NAKAgain = now.Add(a.nakAgain(qp))
	}
	a.sendAck(qp, tx, bth.NAKPSNSeqError, qp.Resp.EPSN)
	if a.Recovering != nil {
		a.Recovering(s.NAKRTT)
	}
	if a.Hold != nil && !s.NAKAgain.IsZero() {
		a.Hold(qp, s.NAKAgain) // Expire sends it if no packet comes
	}
}

// nakAgain is how long after its last NAK a gap is NAKed again: twice
// the measured round trip, doubled for every NAK already sent for this
// gap, within [nakAgainMin, ACK timeout / 2].
func (a *Acker) nakAgain(qp *qpmgr.QP) time.Duration {
	s := &qp.Resp.Ack
	rtt := s.NAKRTT
	if rtt == 0 {
		rtt = nakAgainFirst
	}
	d := max(2*rtt, nakAgainMin) << min(s.NAKs-1, 10)
	if t := qp.ACKTimeout(); t > 0 {
		d = min(d, t/2)
	}
	return d
}

// quietGap is told of a packet past a gap already NAKed, at now: the
// NAK's repeat waits until the gap has been quiet for the repeat's
// interval. Packets still coming past the gap are the requester's flight
// from before the NAK reached it, and the go-back, which answers the
// NAK, queues behind them on the way; a repeat sent while they drain
// sends the requester back a second time, to resend everything from the
// gap once more. On the 2-core host under load (bench/loss.sh, 1% drop
// at the sender, load average 23-27) a daemon took over 2 ms now and
// then to drain its port: a median of 80 NAKs of 700 went again, 10
// once repeats waited for a quiet gap; at 5% drop 266-369 against
// 399-539, and 49-104 MB/s against 52-61. The stream past a gap stops
// when the requester's window is full, so a lost NAK still goes again,
// at most one interval later than it would have; the repeat never waits
// past half the ACK timeout from the last NAK.
//
// Tried and not kept: a NAK at once when a packet at or below the last
// one past the gap showed a go-back that lacked the expected PSN. The
// requester takes a NAK for the PSN it went back to less than a round
// trip ago for the one it answered already (Completer.retryNAK), so that
// NAK went for nothing and doubled the next repeat's interval: at 5%
// drop 310-663 repeats and 38-77 MB/s in the same rounds.
func (a *Acker) quietGap(qp *qpmgr.QP, tx qpmgr.TX, now time.Time) {
	s := &qp.Resp.Ack
	if !now.Before(s.NAKAgain) {
		// Due, and not yet sent by Expire: the gap was quiet.
		a.sendSeqNAK(qp, tx)
		return
	}
	again := now.Add(a.nakAgain(qp))
	if t := qp.ACKTimeout(); t > 0 {
		again = minTime(again, s.NAKAt.Add(t/2))
	}
	if again.After(s.NAKAgain) {
		s.NAKAgain = again
	}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// gapClosed is called when the expected PSN arrives after a NAK: the
// gap is closed, and if only one NAK went for it, the time since is a
// sample of the round trip (Karn's rule: after a repeated NAK it is not
// known which one the requester answered).
func (a *Acker) gapClosed(qp *qpmgr.QP) {
	s := &qp.Resp.Ack
	if s.NAKs == 1 {
		d := a.now().Sub(s.NAKAt)
		if s.NAKRTT == 0 {
			s.NAKRTT = d
		} else {
			s.NAKRTT += (d - s.NAKRTT) / 8
		}
	}
	s.NAKSent, s.NAKs, s.NAKAgain = false, 0, time.Time{}
}

// expireNAK sends a gap's NAK again when its time has come and no packet
// did it. It reports whether a NAK is still scheduled.
func (a *Acker) expireNAK(qp *qpmgr.QP, tx qpmgr.TX, now time.Time) bool {
	s := &qp.Resp.Ack
	if !s.NAKSent || s.NAKAgain.IsZero() || !answers(qp) {
		return false
	}
	if now.Before(s.NAKAgain) {
		return true
	}
	a.sendSeqNAK(qp, tx)
	return true
}
