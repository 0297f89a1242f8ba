package ibudp

import (
	"net/netip"

	"golang.org/x/sys/unix"

	"github.com/rnicd/rnicd/wire/bth"
)

// UDP generic receive offload (UDP_GRO, Linux 5.0) is the other half of
// GSO: the kernel hands the socket a run of datagrams from one peer as one,
// with their size in a control message, instead of queueing each. The run
// lands in a slot's Buf and spills into the slot's overflow room; its first
// packet stays in the Buf, the others are copied into the batch's unused
// Bufs (or held for the next Recv) and checked there. Their IPv4 IDs are not
// known, so their ICRC is checked by solving for the ID.

// groSeg is a packet of a coalesced datagram, still where recvmmsg put it.
type groSeg struct {
	b        *Buf // the datagram's Buf, holding the first packet
	slot     int
	off, n   int // in the datagram
	peer     netip.Addr
	peerPort uint16
	tos      uint8
}

// enableGRO turns UDP_GRO on for fd and reports whether the kernel took it.
func enableGRO(fd int) bool {
	return unix.SetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_GRO, 1) == nil
}

// copySeg copies packet s into dst and returns its length.
func (u *udpPort) copySeg(dst []byte, s *groSeg) int {
	inBuf := len(s.b.Data) - Headroom
	k := 0
	if s.off < inBuf {
		k = copy(dst, s.b.Data[Headroom+s.off:Headroom+min(s.off+s.n, inBuf)])
	}
	if end := s.off + s.n; end > inBuf {
		k += copy(dst[k:], u.runs.over[s.slot][max(s.off-inBuf, 0):end-inBuf])
	}
	return k
}

// Recv with GRO: like sockPort.recv, with two iovecs per message and the
// packets of coalesced datagrams handed out after the batch's own.
func (u *udpPort) recvGRO(bufs []*Buf, wait bool) (int, error) {
	if len(bufs) == 0 {
		return 0, nil
	}
	if err := CheckRecvBufs(bufs); err != nil {
		return 0, err
	}
	u.rxMu.Lock()
	defer u.rxMu.Unlock()
	if u.runs.waiting() {
		return u.deliverHeld(bufs), nil
	}
	m := u.rx.m
	// As many datagrams as bufs take at the last batch's packets per
	// datagram: a batch of runs larger than bufs would be held, and a held
	// packet is copied twice (into the arena, then into a Buf), which was
	// 16% of a responding rnicd's time in memmove with 1024 QPs at MTU
	// 4096 (BENCHMARKS.md). One datagram of single packets is enough to go
	// back to a full batch.
	vlen := min(len(bufs), u.cfg.Batch)
	if u.perDgram > 1 {
		vlen = max(1, vlen/u.perDgram)
	}
	// A socket found empty is most likely still empty: the polling
	// engine looks at it at every pass, and building a whole batch's
	// headers for a recvmmsg that returns nothing was half of that look
	// (BenchmarkTryRecvEmpty). A few headers take a ping-pong's message
	// whole; a burst's first call takes dryProbe datagrams, the next a
	// full batch.
	if u.dry {
		vlen = min(vlen, dryProbe)
	}
	for {
		for i, b := range bufs[:vlen] {
			m.iovs[2*i].Base, m.iovs[2*i+1].Base = &b.Data[Headroom], &u.runs.over[i][0]
			m.iovs[2*i].SetLen(len(b.Data) - Headroom)
			m.iovs[2*i+1].SetLen(len(u.runs.over[i]))
			m.setv(i, 2*i, 2, nameLen, ctrlLen)
		}
		n, err := u.rx.recv(vlen, wait)
		m.release(2 * vlen)
		if err != nil {
			return 0, closedError("recv", u.closed.Load(), err)
		}
		if u.dry = n == 0; u.dry {
			return 0, nil
		}
		u.groSegs, u.dgrams = u.groSegs[:0], u.dgrams[:0]
		u.accept(bufs[:n], u.check)
		u.perDgram = (n + len(u.groSegs) + n - 1) / n
		if good := u.spread(bufs, n); good > 0 {
			return good, nil
		}
	}
}

// dryProbe is how many datagrams recvGRO asks for after a call that found
// none.
const dryProbe = 4

// dgram is one received datagram of a batch, in the order they came.
type dgram struct {
	b        *Buf
	ok       bool // its first packet is good
	from, to int  // its other packets, in groSegs
}

// spread puts the batch's packets into bufs in the order they were sent:
// each datagram's first packet, then the rest of it copied into Bufs that
// hold nothing the batch still needs (the unused ones, and those of bad
// datagrams whose packets are copied out). When none is left, it holds the
// rest of the batch for the next Recv. It returns how many Bufs it filled;
// the others follow them in bufs.
func (u *udpPort) spread(bufs []*Buf, n int) int {
	var t tally
	u.free = append(u.free[:0], bufs[n:]...)
	out := u.order[:0]
	holding := false
	for _, dg := range u.dgrams {
		if dg.ok {
			if holding {
				u.holdBuf(dg.b)
				u.free = append(u.free, dg.b)
			} else {
				u.showRecv(dg.b)
				out = append(out, dg.b)
			}
		}
		for i := dg.from; i < dg.to; i++ {
			s := &u.groSegs[i]
			if holding || len(u.free) == 0 {
				holding = true
				u.hold(u.runs.frame[:u.copySeg(u.runs.frame, s)], s, &t)
				continue
			}
			b := u.free[len(u.free)-1]
			b.N = u.copySeg(b.Data[Headroom:], s)
			if u.checkPacket(b, s.peer, s.peerPort, s.tos, true, &t) {
				t[cRxPackets]++
				t[cRxBytes] += uint64(b.N)
				out = append(out, b)
				u.free = u.free[:len(u.free)-1]
			}
		}
		if !dg.ok {
			u.free = append(u.free, dg.b) // its packets are out of it now
		}
	}
	u.order = out
	k := copy(bufs, out)
	copy(bufs[k:], u.free)
	u.groSegs, u.dgrams = u.groSegs[:0], u.dgrams[:0]
	u.stats.add(&t)
	if k == 0 && u.runs.waiting() {
		// The batch's only good packets were held.
		return u.deliverHeld(bufs)
	}
	return k
}

// holdBuf queues a good packet already counted, behind packets that had to
// be held before it; the tap is shown it when it goes out.
func (u *udpPort) holdBuf(b *Buf) {
	u.runs.push(b.RoCE(), runPkt{peer: b.Peer, peerPort: b.PeerPort, tos: b.TOS, id: b.IPID,
		icrc: b.ICRC, counted: true})
}

// hold checks a packet in place and queues it for the next Recv.
func (u *udpPort) hold(roce []byte, s *groSeg, t *tally) {
	env := u.rxEnvelope(s.peer, s.peerPort, s.tos)
	if _, err := bth.Parse(roce); err != nil {
		t[cRxMalformed]++
		return
	}
	id, exact, ok := u.rxSum.checkEnvelopeAnyID(&env, roce)
	if !ok {
		t[cRxICRCErrors]++
		return
	}
	st := ICRCVerified
	if !exact {
		st = ICRCVerifiedAnyID
		t[cRxICRCAnyID]++
	}
	u.runs.push(roce, runPkt{peer: s.peer, peerPort: s.peerPort, tos: s.tos, id: id, icrc: st})
}

func (u *udpPort) deliverHeld(bufs []*Buf) int {
	if cap(u.counted) < len(bufs) {
		u.counted = make([]bool, len(bufs))
	}
	u.counted = u.counted[:len(bufs)]
	n := u.runs.deliver(bufs, u.counted)
	var t tally
	for i, b := range bufs[:n] {
		if !u.counted[i] {
			t[cRxPackets]++
			t[cRxBytes] += uint64(b.N)
		}
		u.showRecv(b)
	}
	u.stats.add(&t)
	return n
}
