package flowctl

// Pacer spaces one QP's packets at its current rate: after a packet of n
// bytes at rate R, the next may leave n*8/R later, and never earlier.
// Time a QP spends idle is not saved up as credit for a burst: a switch
// queue sees the rate, not an average over a quiet past. The zero Pacer
// has never sent and lets the first packet go at once.
type Pacer struct {
	next int64 // earliest time of the next packet, Clock nanoseconds
}

// Wait returns how long from now the next packet must wait; 0: it may
// go now.
func (p *Pacer) Wait(now int64) int64 {
	return max(p.next-now, 0)
}

// Sent accounts a packet of n bytes sent at now at rate bps (> 0).
func (p *Pacer) Sent(now int64, n int, bps uint64) {
	start := max(p.next, now)
	// Rounded up, so that the rate is never exceeded, not even by a
	// fraction of a nanosecond a packet. n <= 64 KiB: no overflow.
	p.next = start + int64((uint64(n)*8_000_000_000+bps-1)/bps)
}
