package rnic

import "time"

// A polling engine that goes to sleep while one of its QPs recovers from
// a loss pays a wake-up on the path of the recovery: the requester waits
// for the NAK, the responder for the go-back's first packet, each a round
// trip off, and a sleeping engine is woken by the port's watcher through
// two or three thread hand-offs of the Go runtime. On the 2-core machine
// under load (load average 15-23) each such sleep cost 0.5-1.5 ms, 15 of
// them per ib_write_bw -s 65536 -n 1000 at 1% drop, and now and then both
// daemons slept 66-75 ms with the NAK waiting in the socket, until an
// ACK timeout woke them; the engines never slept in the same run without
// loss. So for lossSpin after each loss event (a NAK sent, a go-back) the
// engine polls on whatever its idle interval (Config.PollIdle). At 1%
// drop, -poll-idle 2ms moved 293-407 MB/s against 131-240 with the
// default 50us (alternated, six rounds, bench/loss.sh's setup); 500us
// and 1ms gave 198-260, 5ms no more than 2ms. Polling for lossSpin
// after a loss only, eight rounds alternated with the old daemons at
// load 22-25: best 280 against 202 MB/s, median 179 against 159 (5%
// drop: best 76 against 50). A QP that loses nothing keeps the engine's
// idle interval, so a lossless daemon sleeps as before; a lossy one is
// awake at most lossSpin past its last loss.
//
// A QP whose answer takes longer than lossSpin (its measured round
// trip; rxe in a qemu guest on the loaded host) would have its engine
// poll for nothing and take a core from its peer, so it leaves the
// engine's sleep alone. The interop loss phase with rnicd as rxe's
// requester took 37 and 94 s in two of nine runs with the polling, 10-18
// s in the others and 14.4 s with the old daemons; whether the polling
// caused the two was not settled.
const lossSpin = 2 * time.Millisecond

// lossSeen is rx.Completer.Recovering and rx.Acker.Recovering: a QP of
// the queue recovers from a loss, and unless its answer takes longer than lossSpin (rtt) the
// queue's engine, which receives the QP's packets and runs its
// requester, polls for it until lossSpin from now.
func (q *queue) lossSeen(rtt time.Duration) {
	if rtt > lossSpin {
		return
	}
	q.recoverUntil.Store(int64(time.Since(q.p.epoch) + lossSpin))
}

// recovering reports whether the queue saw a loss less than lossSpin ago.
func (q *queue) recovering() bool {
	u := q.recoverUntil.Load()
	return u != 0 && int64(time.Since(q.p.epoch)) < u
}
