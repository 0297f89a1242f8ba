package fault

import (
	"strconv"
	"time"

	"github.com/rnicd/rnicd/wire/bth"
	"github.com/rnicd/rnicd/wire/ibudp"
)

// Link is a bottleneck in one direction of an Injector: the egress queue of
// a virtual switch port, which this machine lacks (its kernel has no
// ECN-marking qdisc: no red, fq_codel or netem). Packets join a FIFO of
// Queue bytes that drains at Rate; a packet that does not fit is dropped
// (tail drop), and an ECN-capable one (ECT(0) or ECT(1)) that joins a
// queue of depth d is marked CE with RED's probability: 0 below KMin,
// PMax*(d-KMin)/(KMax-KMin) up to KMax, 1 above (on the instantaneous
// depth, as the switches of the DCQCN paper mark). A packet that is not
// ECN-capable is never marked: it can only be dropped at the tail. This
// is DCQCN's congestion point; the defaults are the paper's switch
// settings. The zero Link is no bottleneck.
type Link struct {
	Rate  uint64 // bits per second the queue drains at; 0: no bottleneck
	Queue int    // bytes the queue holds
	// KMin and KMax bound RED's marking ramp in bytes; KMax 0 marks
	// nothing. KMin == KMax marks every ECN-capable packet that joins a
	// queue at least KMin deep.
	KMin, KMax int
	PMax       float64 // marking probability at KMax
	// Dequeue marks a packet on the depth of the queue it leaves behind
	// when it leaves, instead of the depth it meets when it joins. The
	// receiver then learns of the congestion one queueing delay earlier,
	// which on a slow link is most of the control loop (a 64 KB queue is
	// 3.5 ms at 150 Mb/s, against DCQCN's 300 us timers): marking on
	// dequeue is what Wu et al. (CoNEXT 2012) advise for that reason, and
	// what a switch's egress pipeline sees (Tofino's deq_qdepth).
	Dequeue bool
}

// The DCQCN paper's switch settings (Zhu et al., SIGCOMM 2015, section
// 5: Kmin 5 KB, Kmax 200 KB, Pmax 1%), and a queue with room above Kmax.
const (
	DefaultLinkQueue = 256 << 10
	DefaultLinkKMin  = 5 << 10
	DefaultLinkKMax  = 200 << 10
	DefaultLinkPMax  = 0.01
)

// NewLink returns a bottleneck of rate bits per second with the default
// queue and marking.
func NewLink(rate uint64) Link {
	return Link{Rate: rate, Queue: DefaultLinkQueue, KMin: DefaultLinkKMin, KMax: DefaultLinkKMax, PMax: DefaultLinkPMax}
}

// linkFrameOverhead is what a switch queue holds of a packet beyond its
// IP datagram: the Ethernet header and FCS.
const linkFrameOverhead = 14 + 4

// linkQueue is the queue's state: its depth in bytes at a time; between
// packets it drains at the link's rate.
type linkQueue struct {
	depth float64
	at    time.Time
}

// frameLen is the length b takes in a switch queue: the Ethernet frame
// around its IP datagram.
func frameLen(b *ibudp.Buf) int {
	n := b.N + linkFrameOverhead + bth.UDPHeaderLen
	if b.Peer.Unmap().Is4() {
		return n + bth.IPv4HeaderLen
	}
	return n + bth.IPv6HeaderLen
}

// markProb is RED's marking probability for a queue depth d.
func (l *Link) markProb(d float64) float64 {
	switch {
	case l.KMax <= 0 || d < float64(l.KMin):
		return 0
	case d >= float64(l.KMax):
		return 1
	}
	return l.PMax * (d - float64(l.KMin)) / float64(l.KMax-l.KMin)
}

// enqueue puts b on direction d's bottleneck at now and returns when it
// leaves the queue (its last bit on the far side of the link), or false
// if the queue is full: b is then dropped, counted and told to the tap,
// and an RX buffer goes back to the pool. An ECN-capable b may leave
// marked CE. Called with mu held.
func (f *Injector) enqueue(d int, b *ibudp.Buf, now time.Time) (time.Time, bool) {
	fd := &f.dir[d]
	l := &fd.f.Link
	q := &fd.queue
	q.drain(l.Rate, now)
	size := float64(frameLen(b))
	if q.depth+size > float64(l.Queue) {
		fd.counts.LinkDropped++
		f.tapLink(ibudp.TapLinkDropTX+ibudp.TapPoint(d), b, int(q.depth))
		if d == dirRX {
			f.pool.Put(b)
		}
		return time.Time{}, false
	}
	if !l.Dequeue {
		f.mark(d, b, q.depth)
	}
	q.depth += size
	fd.counts.LinkPackets++
	fd.counts.QueuePeak = max(fd.counts.QueuePeak, uint64(q.depth))
	return now.Add(time.Duration(q.depth * 8e9 / float64(l.Rate))), true
}

// mark marks b CE with RED's probability for a queue of depth bytes, if
// it is ECN-capable. Called with mu held.
func (f *Injector) mark(d int, b *ibudp.Buf, depth float64) {
	fd := &f.dir[d]
	if e := b.ECN(); (e == ibudp.ECT0 || e == ibudp.ECT1) && f.roll(fd.f.Link.markProb(depth)) {
		b.SetECN(ibudp.CE)
		fd.counts.Marked++
		f.tapLink(ibudp.TapLinkMarkTX+ibudp.TapPoint(d), b, int(depth))
	}
}

// dequeue is a packet of direction d leaving the bottleneck at now: with
// Link.Dequeue, it is marked on the depth it leaves behind. Called with
// mu held.
func (f *Injector) dequeue(d int, b *ibudp.Buf, now time.Time) {
	fd := &f.dir[d]
	if l := &fd.f.Link; l.Rate > 0 && l.Dequeue {
		fd.queue.drain(l.Rate, now)
		f.mark(d, b, fd.queue.depth)
	}
}

// drain empties the queue by what a link of rate bits per second sent
// since it was last looked at.
func (q *linkQueue) drain(rate uint64, now time.Time) {
	if el := now.Sub(q.at); el > 0 {
		q.depth = max(q.depth-el.Seconds()*float64(rate)/8, 0)
	}
	q.at = now
}

// tapLink tells the tap of a mark or a tail drop, with the depth of the
// queue the packet met.
func (f *Injector) tapLink(at ibudp.TapPoint, b *ibudp.Buf, depth int) {
	t := f.tap.Load()
	if t == nil {
		return
	}
	if lt, ok := t.(ibudp.LinkTap); ok {
		lt.LinkPacket(at, b.RoCE(), depth, b.QPN)
	}
}

// String renders the link in the words `rnic inject` takes: "link 2gbit
// queue 256KB ecn 5KB 200KB 1%" (and " mark dequeue" with Dequeue), or
// "off".
func (l Link) String() string {
	if l.Rate == 0 {
		return "off"
	}
	s := "link " + FormatRate(l.Rate) + " queue " + FormatBytes(l.Queue)
	if l.KMax <= 0 {
		s += " ecn off"
	} else {
		s += " ecn " + FormatBytes(l.KMin) + " " + FormatBytes(l.KMax) + " " + strconv.FormatFloat(l.PMax*100, 'g', -1, 64) + "%"
	}
	if l.Dequeue {
		s += " mark dequeue"
	}
	return s
}

// FormatRate writes bits per second as tc does: 2gbit, 500mbit, 64kbit,
// 999bit.
func FormatRate(bps uint64) string {
	for _, u := range []struct {
		n    uint64
		name string
	}{{1e9, "gbit"}, {1e6, "mbit"}, {1e3, "kbit"}} {
		if bps >= u.n && bps%u.n == 0 {
			return strconv.FormatUint(bps/u.n, 10) + u.name
		}
	}
	return strconv.FormatUint(bps, 10) + "bit"
}

// FormatBytes writes a size in binary units: 256KB, 1MB, 1500B.
func FormatBytes(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.Itoa(n>>20) + "MB"
	case n >= 1<<10 && n%(1<<10) == 0:
		return strconv.Itoa(n>>10) + "KB"
	}
	return strconv.Itoa(n) + "B"
}
