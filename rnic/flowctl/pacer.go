package flowctl

// Pacer spaces one QP's packets at its current rate: after a packet of n
// bytes at rate R, the next may leave n*8/R later. A sender that was
// woken late may catch up, but by at most PacerBurst of the rate or
// PacerBurstBytes, whichever is more: over any interval T a QP sends at
// most R*T + max(R*PacerBurst, PacerBurstBytes) plus one packet. The
// slack is there because software cannot wake a QP to the microsecond
// (Go timers fire 50 us or more late on a busy host), and a pacer that
// saved no credit would cap a QP at one packet per wake-up; a switch
// queue (256 KB by default at the congestion point) absorbs it. The
// zero Pacer has never sent and lets the first packet go at once.
type Pacer struct {
	next int64 // earliest time of the next packet, Clock nanoseconds
}

// PacerBurst is the sending time a paced QP may catch up on at once
// (at rates above 655 Mb/s, where it is more than PacerBurstBytes): 100 us, two Go timer latencies on this machine (at 1 Gb/s, 12.5 KB).
const PacerBurst = 100 * usec

// PacerBurstBytes is the least a paced QP may catch up on at once, in
// bytes, whatever its rate: 8 KiB, 2.6 ms at 25 Mb/s. PacerBurst alone
// is a third of a packet at that rate, a quarter of a 100 Mb/s link: a
// QP woken a millisecond late on a loaded host then sends one packet
// where three were due, its rate falls short of the one DCQCN set, and
// the link idles while no QP is marked. TestFairness's four QPs carried
// 66-70% of the link so, 91-96% with this credit, with no more drops (a
// rate limiter's burst is a size in bytes on ConnectX too).
const PacerBurstBytes = 8 << 10

// burst is the most sending time a QP at bps may catch up on.
func burst(bps uint64) int64 {
	return max(PacerBurst, int64(PacerBurstBytes*8_000_000_000/bps))
}

// Wait returns how long from now the next packet must wait; 0: it may
// go now.
func (p *Pacer) Wait(now int64) int64 {
	return max(p.next-now, 0)
}

// Sent accounts a packet of n bytes sent at now at rate bps (> 0).
func (p *Pacer) Sent(now int64, n int, bps uint64) {
	start := max(p.next, now-burst(bps))
	// Rounded up, so that the rate is never exceeded, not even by a
	// fraction of a nanosecond a packet. n <= 64 KiB: no overflow.
	p.next = start + int64((uint64(n)*8_000_000_000+bps-1)/bps)
}

// reset starts the pacer at now with no credit.
func (p *Pacer) reset(now int64) { p.next = now }
