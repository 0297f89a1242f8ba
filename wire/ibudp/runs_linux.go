package ibudp

import (
	"encoding/binary"
	"net/netip"

	"github.com/rnicd/rnicd/wire/bth"
)

// A UDP_SEGMENT run from a sender on this host, or across a veth, reaches
// an AF_PACKET socket before the kernel cuts it apart: one frame holding the
// whole run under the IP and UDP headers of its first packet, with the
// lengths of the whole. The segment size the sender gave is not in the
// frame (a cooked AF_PACKET socket has no virtio_net_hdr to carry it:
// PACKET_VNET_HDR needs SOCK_RAW and so the link header of every kind of
// interface). ModePacket cuts the run apart as the kernel would (the IPv4 ID
// counting up per packet, the lengths of each) and checks each packet's
// ICRC under the headers that packet would have had.
//
// A frame is taken for a run only when its ICRC fails as one packet and a
// cut after a first packet of some size gives that packet a good ICRC. The
// size is found as segSize says: a RoCE packet's length is whole 32-bit
// words, and every cut must fall on a well-formed transport header.

// ibMTUs are the payload sizes of the packets of a run of a multi-packet
// message, the sizes tried first.
var ibMTUs = [...]int{256, 512, 1024, 2048, 4096}

// fullMTU reports whether roce carries exactly an IB MTU of payload.
func fullMTU(roce []byte) bool {
	op := bth.Opcode(roce[0])
	for _, m := range ibMTUs {
		if len(roce) == bth.PacketLen(op, m) {
			return true
		}
	}
	return false
}

// runs holds the packets cut from runs until the caller has Bufs for them.
type runs struct {
	over  [][]byte // per receive slot: the part of a frame beyond its Buf
	frame []byte   // a frame put back together from its Buf and over
	hdr   [bth.MaxEnvelopeLen]byte
	arena []byte // RoCE parts of the packets waiting
	queue []runPkt
	head  int
}

type runPkt struct {
	off, n   int // in arena
	peer     netip.Addr
	peerPort uint16
	tos      uint8
	id       uint16
	icrc     ICRCStatus
	counted  bool // in the port's stats already (a UDP port's tap sees it when it is delivered)
}

// push queues a copy of roce.
func (r *runs) push(roce []byte, p runPkt) {
	p.off, p.n = len(r.arena), len(roce)
	r.arena = append(r.arena, roce...)
	r.queue = append(r.queue, p)
}

const maxFrame = 65535

func newRuns(slots int) *runs {
	// The arena starts with room for a batch of full packets, so that
	// holding packets does not grow it in steps (growslice was 2% of a
	// responding rnicd with 1024 QPs).
	r := &runs{over: make([][]byte, slots), frame: make([]byte, maxFrame), arena: make([]byte, 0, slots*MaxRoCELen)}
	r.alloc()
	return r
}

// alloc gives every receive slot its overflow room.
func (r *runs) alloc() {
	for i := range r.over {
		r.over[i] = make([]byte, maxFrame-MaxRoCELen)
	}
}

// cut splits the RoCE part of raw, an IP datagram whose headers h
// describe, into the packets of a run and queues the ones whose ICRC is
// right, showing each to tap if not nil. It reports whether raw was a run;
// bad reports the packets of a run that failed their ICRC.
func (r *runs) cut(c *icrc, raw []byte, h ipHeader, tap Tap) (ok bool, bad int) {
	roce := raw[h.hdrLen:h.end]
	size := r.segSize(c, raw[:h.hdrLen], h, roce)
	if size == 0 {
		return false, 0
	}
	for k := 0; k*size < len(roce); k++ {
		seg := roce[k*size : min((k+1)*size, len(roce))]
		if len(seg) < minRoCELen || !r.checkSeg(c, raw[:h.hdrLen], h, k, seg) {
			bad++
			if tap != nil && len(seg) >= minRoCELen {
				tap.Packet(TapICRCError, r.hdr[:h.hdrLen], seg, ICRCUnchecked, 0)
			}
			continue
		}
		if tap != nil {
			tap.Packet(TapReceived, r.hdr[:h.hdrLen], seg, ICRCVerified, 0)
		}
		id := h.env.ID // 0 over IPv6, which has none
		if h.env.Src.Is4() {
			id += uint16(k)
		}
		r.push(seg, runPkt{peer: h.env.Src, peerPort: h.env.SrcPort, tos: h.env.TOS, id: id, icrc: ICRCVerified})
	}
	return true, bad
}

// Bounds on the work of finding a run's segment size in one frame, so that
// a forged frame costs at most a few passes over it: candidates whose cuts
// all fall on well-formed headers are rare (a 64-byte WRITE run of 48
// packets has one, its own), so the first ICRC tried is nearly always the
// one that holds.
const (
	maxRxGSOSegs  = 128 // UDP_MAX_SEGMENTS since Linux 6.11 (64 before)
	maxCutParses  = 4096
	maxCutICRCs   = 8
	roceWordBytes = 4
)

// segSize returns the size of the packets of the run roce, 0 if no size
// fits. A size fits when every packet of the cut (all of that size but a
// shorter last one, at most maxRxGSOSegs) parses as a transport packet and
// the first one's ICRC (or the second's) holds under its own headers. Full-MTU packets (the
// runs of one large message) are tried first, then every size in whole
// words from the smallest the segment limit allows.
func (r *runs) segSize(c *icrc, hdr []byte, h ipHeader, roce []byte) int {
	parses, icrcs := maxCutParses, maxCutICRCs
	fits := func(s int) bool {
		if s < minRoCELen || s >= len(roce) || (len(roce)+s-1)/s > maxRxGSOSegs {
			return false
		}
		if last := len(roce) % s; last != 0 && last < minRoCELen {
			return false
		}
		for off := 0; off < len(roce); off += s {
			if parses--; parses < 0 {
				return false
			}
			if _, err := bth.Parse(roce[off:min(off+s, len(roce))]); err != nil {
				return false
			}
		}
		// The first packet's ICRC, or the second's if the first was
		// damaged on the way, so that one bad packet does not lose the run.
		for k := 0; k < 2; k++ {
			if icrcs--; icrcs < 0 {
				return false
			}
			if r.checkSeg(c, hdr, h, k, roce[k*s:min((k+1)*s, len(roce))]) {
				return true
			}
		}
		return false
	}
	op := bth.Opcode(roce[0])
	for _, m := range ibMTUs {
		if s := bth.PacketLen(op, m); fits(s) {
			return s
		}
	}
	from := max(minRoCELen, (len(roce)+maxRxGSOSegs-1)/maxRxGSOSegs)
	from = (from + roceWordBytes - 1) &^ (roceWordBytes - 1)
	for s := from; s < len(roce) && parses > 0 && icrcs > 0; s += roceWordBytes {
		if fullMTU(roce[:s]) {
			continue // tried above
		}
		if fits(s) {
			return s
		}
	}
	return 0
}

// checkSeg checks packet k of a run, seg, under the headers the kernel
// gives it when it cuts the run: those of the run with its own lengths and,
// for IPv4, the run's ID plus k.
func (r *runs) checkSeg(c *icrc, hdr []byte, h ipHeader, k int, seg []byte) bool {
	own := r.hdr[:len(hdr)]
	copy(own, hdr)
	ipLen := len(hdr) - bth.UDPHeaderLen
	if h.env.Src.Is4() {
		binary.BigEndian.PutUint16(own[2:], uint16(len(hdr)+len(seg)))
		binary.BigEndian.PutUint16(own[4:], h.env.ID+uint16(k))
	} else {
		binary.BigEndian.PutUint16(own[4:], uint16(bth.UDPHeaderLen+len(seg)))
	}
	binary.BigEndian.PutUint16(own[ipLen+4:], uint16(bth.UDPHeaderLen+len(seg)))
	return c.check(own, seg)
}

// deliver moves waiting packets into bufs and returns how many; counted,
// if not nil, gets each one's runPkt.counted.
func (r *runs) deliver(bufs []*Buf, counted []bool) int {
	n := 0
	for n < len(bufs) && r.head < len(r.queue) {
		p := r.queue[r.head]
		b := bufs[n]
		b.N = copy(b.Data[Headroom:], r.arena[p.off:p.off+p.n])
		b.Peer, b.PeerPort, b.TOS, b.IPID = p.peer, p.peerPort, p.tos, p.id
		b.SrcPort, b.Flip = 0, 0
		b.ICRC = p.icrc
		if counted != nil {
			counted[n] = p.counted
		}
		r.head++
		n++
	}
	if r.head == len(r.queue) {
		r.queue, r.arena, r.head = r.queue[:0], r.arena[:0], 0
	}
	return n
}

func (r *runs) waiting() bool { return r.head < len(r.queue) }
