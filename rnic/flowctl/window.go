package flowctl

import (
	"time"

	"github.com/rnicd/rnicd/wire/bth"
)

// The loss window. Go-back-N resends everything from a lost PSN on, so
// what one loss costs is what was in flight past it when the requester
// learnt of it: with rxe's fixed window of 128 PSNs, ib_write_bw -s 65536
// at 5% drop between two rnicd on loopback sent 6.4 packets again for
// every packet of data (817k for 128k, bench/loss.sh), each of 6,350
// NAKs resending a whole window, and moved 72.5 MB/s against 636
// without loss. A window that halves when a loss is found and grows back
// by one PSN per PSN acknowledged settles where a loss costs as much as
// the growth between two losses gains: at loss rate p, about 2/p PSNs
// (40 at 5%, the full 128 below 1.5%), and a lossless QP never leaves
// the device's window. Halving happens once per loss episode (until the
// oldest unacknowledged PSN passes what had been sent when it was cut),
// as TCP's NewReno does, so that the NAKs and timeouts of one go-back do
// not shrink it again. The peer never sees any of this: the wire is
// rxe's go-back-N.

// MinWindow is the smallest the loss window gets: enough PSNs to cover a
// loopback round trip between two daemons on a busy host (about 100 us,
// 8 packets of 1 KiB at the 80 MB/s a loss-bound QP moves).
const MinWindow = 8

// Window is the loss-reactive part of a QP's window and the round-trip
// estimate it and the retransmission timer follow; kept in QP. The zero
// Window is the device's full window with no round trip measured.
type Window struct {
	cwnd     int    // PSNs; 0: the device's window (no loss since it grew back)
	recover  uint32 // the next new PSN when cwnd was last cut
	cut      bool   // a loss episode is open until una passes recover
	lastLoss int64  // clock of the last Lost; 0: never

	// One PSN timed at a time (as TCP without timestamps): the send
	// time of timedPSN, the first PSN sent new with AckReq since the
	// last sample; a go-back drops it (Karn's rule).
	timed    bool
	timedPSN uint32
	timedAt  int64
	srtt     int64 // ns, 0 before the first sample
	rttvar   int64
}

// QPWindow returns how many PSNs q may have unacknowledged now: the
// device's window, or less after a loss.
func (m *Manager) QPWindow(q *QP) int {
	if q.win.cwnd == 0 {
		return m.window
	}
	return q.win.cwnd
}

// WindowOpen reports whether an RC QP whose oldest unacknowledged PSN is
// una may send PSN psn.
func (m *Manager) WindowOpen(q *QP, psn, una uint32) bool {
	return int(bth.PSNDiff(psn, una)) < m.QPWindow(q)
}

// SentNew tells the window that q sent PSN psn for the first time with
// AckReq set: the ACK for it will time the round trip, unless one is
// being timed already.
func (m *Manager) SentNew(q *QP, psn uint32) {
	if q.win.timed {
		return
	}
	q.win.timed, q.win.timedPSN, q.win.timedAt = true, psn, m.clock.Nanotime()
}

// Acked tells the window that q's oldest unacknowledged PSN moved
// forward by n to una: the window grows by n, and a timed PSN now
// acknowledged is a round-trip sample.
func (m *Manager) Acked(q *QP, una uint32, n int) {
	w := &q.win
	if w.timed && bth.PSNDiff(una, w.timedPSN) > 0 {
		w.timed = false
		m.sample(w, m.clock.Nanotime()-w.timedAt)
	}
	if w.cut {
		if bth.PSNDiff(una, w.recover) < 0 {
			return // no growth while the go-back of a loss lasts
		}
		w.cut = false
	}
	if w.cwnd == 0 || n <= 0 {
		return
	}
	w.cwnd += n
	if w.cwnd >= m.window {
		w.cwnd = 0
	}
}

// sample folds one round trip into the estimate (RFC 6298's gains, 1/8
// and 1/4).
func (m *Manager) sample(w *Window, rtt int64) {
	if rtt <= 0 {
		rtt = 1
	}
	if w.srtt == 0 {
		w.srtt, w.rttvar = rtt, rtt/2
		return
	}
	d := w.srtt - rtt
	if d < 0 {
		d = -d
	}
	w.rttvar += (d - w.rttvar) / 4
	w.srtt += (rtt - w.srtt) / 8
}

// Lost tells the window that q goes back to una, the sender's next new
// PSN being next: the first loss of an episode halves the window.
func (m *Manager) Lost(q *QP, una, next uint32) {
	w := &q.win
	w.timed = false // what is acknowledged next may answer the resend
	w.lastLoss = max(m.clock.Nanotime(), 1)
	if w.cut && bth.PSNDiff(una, w.recover) < 0 {
		return
	}
	w.cwnd = max(m.QPWindow(q)/2, min(MinWindow, m.window))
	w.recover, w.cut = next, true
}

// RTT returns q's smoothed round trip and its mean deviation in
// nanoseconds; srtt 0 before the first sample.
func (m *Manager) RTT(q *QP) (srtt, rttvar int64) { return q.win.srtt, q.win.rttvar }

// recentLoss is how long after its last loss a QP counts as lossy
// (Lossy): long enough to cover the window's growth back to full at 5%
// loss, short enough that a QP lossy once is not probing for good.
const recentLoss = int64(time.Second)

// Lossy reports whether q has lost a packet recently: its window is cut,
// or its last loss was less than a second ago. The retransmission timer
// probes after the measured round trip only then (rx.Handler.Timeout):
// at 5% loss the window grows back to full now and then, and a tail loss
// then cost a whole ACK timeout (two of 67 ms in one ib_write_bw run).
func (m *Manager) Lossy(q *QP) bool {
	w := &q.win
	return w.cwnd != 0 || w.lastLoss != 0 && m.clock.Nanotime()-w.lastLoss < recentLoss
}
