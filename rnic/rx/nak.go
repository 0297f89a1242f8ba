package rx

import (
	"time"

	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/rnic/qpmgr"
	"github.com/rnicd/rnicd/wire/bth"
)

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

// sendSeqNAK sends a PSN sequence error NAK for the expected PSN and
// schedules the next one should the gap persist. The QP lock is held.
func (h *Handler) sendSeqNAK(qp *qpmgr.QP, tx qpmgr.TX) {
	r := &qp.Resp
	now := time.Now()
	if r.NAKSent {
		h.Counters.Inc(ib.NAKRepeated)
	}
	r.NAKSent, r.NAKAt = true, now
	r.NAKs++
	r.NAKAgain = time.Time{}
	if r.NAKs <= nakMaxRepeats {
		r.NAKAgain = now.Add(h.nakAgain(qp))
	}
	h.sendAck(qp, tx, bth.NAKPSNSeqError, r.EPSN)
	if h.Recovering != nil {
		h.Recovering(r.NAKRTT)
	}
	if h.Hold != nil && !r.NAKAgain.IsZero() {
		h.Hold(qp, r.NAKAgain) // ExpireAck sends it if no packet comes
	}
}

// nakAgain is how long after its last NAK a gap is NAKed again: twice
// the measured round trip, doubled for every NAK already sent for this
// gap, within [nakAgainMin, ACK timeout / 2].
func (h *Handler) nakAgain(qp *qpmgr.QP) time.Duration {
	r := &qp.Resp
	rtt := r.NAKRTT
	if rtt == 0 {
		rtt = nakAgainFirst
	}
	d := max(2*rtt, nakAgainMin) << min(r.NAKs-1, 10)
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
// trip ago for the one it answered already (Handler.retryNAK), so that
// NAK went for nothing and doubled the next repeat's interval: at 5%
// drop 310-663 repeats and 38-77 MB/s in the same rounds.
func (h *Handler) quietGap(qp *qpmgr.QP, tx qpmgr.TX, now time.Time) {
	r := &qp.Resp
	if !now.Before(r.NAKAgain) {
		// Due, and not yet sent by ExpireAck: the gap was quiet.
		h.sendSeqNAK(qp, tx)
		return
	}
	again := now.Add(h.nakAgain(qp))
	if t := qp.ACKTimeout(); t > 0 {
		again = minTime(again, r.NAKAt.Add(t/2))
	}
	if again.After(r.NAKAgain) {
		r.NAKAgain = again
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
func (h *Handler) gapClosed(qp *qpmgr.QP) {
	r := &qp.Resp
	if r.NAKs == 1 {
		s := time.Since(r.NAKAt)
		if r.NAKRTT == 0 {
			r.NAKRTT = s
		} else {
			r.NAKRTT += (s - r.NAKRTT) / 8
		}
	}
	r.NAKSent, r.NAKs, r.NAKAgain = false, 0, time.Time{}
}

// expireNAK sends a gap's NAK again when its time has come and no packet
// did it. It reports whether a NAK is still scheduled.
func (h *Handler) expireNAK(qp *qpmgr.QP, tx qpmgr.TX, now time.Time) bool {
	r := &qp.Resp
	if !r.NAKSent || r.NAKAgain.IsZero() || !answers(qp) {
		return false
	}
	if now.Before(r.NAKAgain) {
		return true
	}
	h.sendSeqNAK(qp, tx)
	return true
}

// Deadline is when ExpireAck next has work for qp (a held ACK or a NAK
// to send again); zero if none. Call with qp locked.
func (h *Handler) Deadline(qp *qpmgr.QP) time.Time {
	r := &qp.Resp
	var t time.Time
	if r.AckHeld {
		t = r.AckHoldUntil
	}
	if r.NAKSent && !r.NAKAgain.IsZero() && (t.IsZero() || r.NAKAgain.Before(t)) {
		t = r.NAKAgain
	}
	return t
}
