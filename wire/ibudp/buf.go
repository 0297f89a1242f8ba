package ibudp

import (
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/rnicd/rnicd/wire/bth"
)

// Headroom is the number of bytes kept in front of the RoCE part of every
// Buf, so that a port can write the Ethernet, IP and UDP headers in place.
const Headroom = 64

// MaxRoCELen is the largest RoCE part (BTH through ICRC) the port carries: a
// 4096-byte payload and room for the largest header set.
const MaxRoCELen = 4096 + 128

// minRoCELen is the shortest RoCE part worth looking at: a BTH and an ICRC.
const minRoCELen = bth.BTHLen + bth.ICRCLen

// BufLen is len(Buf.Data) of every Buf from NewBuf.
const BufLen = Headroom + MaxRoCELen

// ICRCStatus says how a port checked the ICRC of a received packet.
type ICRCStatus uint8

const (
	// ICRCUnchecked: nobody checked it (a Buf that did not come from Recv).
	ICRCUnchecked ICRCStatus = iota
	// ICRCVerified: all 32 bits match. In ModePacket the check used the IP
	// and UDP headers the packet arrived with; in ModeUDP it used the
	// headers a Linux UDP socket sends (IPv4 ID 0, DF), which the kernel
	// does not show us.
	ICRCVerified
	// ICRCVerifiedAnyID: ModeUDP, IPv4 only. The ICRC matches for some
	// IPv4 ID (Buf.IPID), which the socket does not show; 16 of the 32 bits
	// were spent finding that ID, so this is a 16-bit check.
	ICRCVerifiedAnyID
	// ICRCCorrupted: a fault injector (package fault) flipped a bit after
	// the port verified the packet; its ICRC no longer matches.
	ICRCCorrupted
)

func (s ICRCStatus) String() string {
	switch s {
	case ICRCUnchecked:
		return "unchecked"
	case ICRCVerified:
		return "verified"
	case ICRCVerifiedAnyID:
		return "verified-any-id"
	case ICRCCorrupted:
		return "corrupted"
	}
	return "icrc-status(?)"
}

// Buf is one datagram of a batch. The RoCE part (BTH through ICRC) is
// Data[Headroom:Headroom+N]; the Headroom bytes in front of it belong to the
// port, which may write IP and UDP headers there.
type Buf struct {
	Data []byte // len Headroom+MaxRoCELen
	N    int    // length of the RoCE part

	// Peer is the source address on receive and the destination on send.
	Peer netip.Addr
	// Dst is the destination address of a received packet that was not
	// the port's own: the multicast group it was sent to
	// (Multicaster.RecvMulticast); invalid otherwise, and ignored on send.
	Dst netip.Addr
	// PeerPort is the peer's UDP source port on receive; ignored on send.
	PeerPort uint16
	// SrcPort is the UDP source port to send from (rxe uses 0xC000 plus a
	// hash of the QPN, see SourcePortFlow). ModePacket honours it;
	// ModeUDP sends from the bound port. 0 means the bound port.
	SrcPort uint16
	// TOS is the IPv4 TOS / IPv6 traffic class, DSCP and ECN: as received,
	// or to set on send.
	TOS uint8
	// ICRC says how the port checked the ICRC of a received packet.
	ICRC ICRCStatus
	// IPID is the IPv4 ID of a received packet where the port knows it:
	// as received in ModePacket, 0 or the ID CheckICRCAnyID found in
	// ModeUDP.
	IPID uint16

	// QPN is the number of the local QP that built a packet to send, for
	// the port's Tap (a trace names the QP each packet left from, which
	// the wire does not say: the BTH holds the destination QP only); 0
	// where no QP did or on receive. It never goes on the wire.
	QPN uint32

	// Flip, when nonzero, makes the port flip bit Flip-1 of the RoCE part
	// after sealing the ICRC, and clear it: a fault injector's TX
	// corruption (package fault), which the peer's ICRC check must catch.
	Flip uint32

	// ext, when not nil, holds the bytes [extOff, extOff+len(ext)) of the
	// RoCE part in place of Data: a payload lent by reference (SetPayloadRef)
	// that the UDP port sends from where it lies. Anything else that needs
	// the RoCE part contiguous (RoCE) copies it into Data first.
	ext    []byte
	extOff int
}

// NewBuf allocates a Buf with room for the largest packet.
func NewBuf() *Buf { return &Buf{Data: make([]byte, BufLen)} }

// RoCE returns the RoCE part, Data[Headroom:Headroom+N]. A payload lent by
// reference is copied into Data first.
func (b *Buf) RoCE() []byte {
	if b.ext != nil {
		b.Flatten()
	}
	return b.Data[Headroom : Headroom+b.N]
}

// SetPayloadRef says that the bytes [off, off+len(p)) of the RoCE part are
// p rather than what Data holds there: the requester lending a payload
// straight from registered memory, so that the UDP port hands it to the
// kernel without copying it first: the payload is never copied in user
// space on its way out. Set N to the whole RoCE part
// as usual. p must stay mapped and unchanged until the port's Send that
// takes b returns; rnic guarantees it by sending within the pipeline lock
// that Device.Fence waits for after a region is deregistered. A range that
// does not fit inside the RoCE part is refused (false, nothing changed).
func (b *Buf) SetPayloadRef(off int, p []byte) bool {
	if off < minRoCELen-bth.ICRCLen || off > MaxRoCELen || len(p) > MaxRoCELen-off {
		return false
	}
	b.ext, b.extOff = p, off
	return true
}

// Flatten copies a payload lent by reference (SetPayloadRef) into Data,
// after which the Buf no longer refers to it: what keeps a Buf past the
// Send that takes it (a fault injector delaying it) must not refer to
// registered memory, which may be gone by then.
func (b *Buf) Flatten() {
	if b.ext == nil {
		return
	}
	copy(b.Data[Headroom+b.extOff:Headroom+b.extOff+len(b.ext)], b.ext)
	b.ext = nil
}

// lentParts returns the RoCE part in three pieces without copying the lent
// payload: Data's bytes before it, the payload, and Data's bytes after it
// (pad and ICRC). ok is false if b holds no lent payload or it does not lie
// inside the RoCE part.
func (b *Buf) lentParts() (head, payload, tail []byte, ok bool) {
	end := b.extOff + len(b.ext)
	if b.ext == nil || end > b.N-bth.ICRCLen {
		return nil, nil, nil, false
	}
	return b.Data[Headroom : Headroom+b.extOff], b.ext, b.Data[Headroom+end : Headroom+b.N], true
}

// Room returns all the space for a RoCE part, Data[Headroom:], for building
// a packet in place (bth.Build); set N afterwards.
func (b *Buf) Room() []byte { return b.Data[Headroom:] }

// SetRoCE copies p into the RoCE part and sets N. It reports false, and
// changes nothing, if p is longer than MaxRoCELen.
func (b *Buf) SetRoCE(p []byte) bool {
	if len(p) > MaxRoCELen {
		return false
	}
	b.N = copy(b.Data[Headroom:], p)
	return true
}

// reset clears everything but the data.
func (b *Buf) reset() {
	*b = Buf{Data: b.Data}
}

// valid reports whether the Buf has the shape ports rely on.
func (b *Buf) valid() bool {
	return b != nil && len(b.Data) == BufLen && b.N >= minRoCELen && b.N <= MaxRoCELen
}

// CheckRecvBufs refuses receive buffers that did not come from NewBuf, as
// every Port's Recv does.
func CheckRecvBufs(bufs []*Buf) error {
	for i, b := range bufs {
		if b == nil || len(b.Data) != BufLen {
			return fmt.Errorf("ibudp: recv: buffer %d is not a Buf from NewBuf", i)
		}
	}
	return nil
}

// CopyFrom makes b a copy of c (data and metadata); a payload c lends by
// reference is copied into c's Data first.
func (b *Buf) CopyFrom(c *Buf) {
	if c.ext != nil {
		c.Flatten()
	}
	data := b.Data
	*b = *c
	b.Data = data
	copy(b.Data[Headroom:Headroom+c.N], c.Data[Headroom:Headroom+c.N])
}

// Pool is a free list of Bufs. Get and Put do not allocate once the pool
// holds as many Bufs as are in flight. It is safe for concurrent use; its zero
// value is an empty, unbounded pool.
type Pool struct {
	mu    sync.Mutex
	free  []*Buf
	max   int
	alloc atomic.Uint64
}

// NewPool returns a pool holding prealloc Bufs that keeps at most limit
// Bufs (limit <= 0: no limit).
func NewPool(prealloc, limit int) *Pool {
	p := &Pool{max: limit, free: make([]*Buf, 0, max(prealloc, limit))}
	for range prealloc {
		p.free = append(p.free, NewBuf())
	}
	p.alloc.Add(uint64(prealloc))
	return p
}

// Get returns a Buf with N 0 and cleared metadata.
func (p *Pool) Get() *Buf {
	p.mu.Lock()
	if n := len(p.free); n > 0 {
		b := p.free[n-1]
		p.free[n-1] = nil
		p.free = p.free[:n-1]
		p.mu.Unlock()
		return b
	}
	p.mu.Unlock()
	p.alloc.Add(1)
	return NewBuf()
}

// GetBatch fills dst with Bufs.
func (p *Pool) GetBatch(dst []*Buf) {
	p.mu.Lock()
	i := 0
	for ; i < len(dst) && len(p.free) > 0; i++ {
		n := len(p.free) - 1
		dst[i] = p.free[n]
		p.free[n] = nil
		p.free = p.free[:n]
	}
	p.mu.Unlock()
	for ; i < len(dst); i++ {
		p.alloc.Add(1)
		dst[i] = NewBuf()
	}
}

// Put returns b to the pool. Bufs of the wrong size are let go.
func (p *Pool) Put(b *Buf) {
	p.mu.Lock()
	p.putLocked(b)
	p.mu.Unlock()
}

// PutBatch returns every Buf of bufs to the pool and clears bufs.
func (p *Pool) PutBatch(bufs []*Buf) {
	p.mu.Lock()
	for i, b := range bufs {
		p.putLocked(b)
		bufs[i] = nil
	}
	p.mu.Unlock()
}

func (p *Pool) putLocked(b *Buf) {
	if b == nil || len(b.Data) != BufLen {
		return
	}
	b.reset()
	if p.max <= 0 || len(p.free) < p.max {
		p.free = append(p.free, b)
	}
}

// Allocated is the number of Bufs the pool has allocated so far.
func (p *Pool) Allocated() uint64 { return p.alloc.Load() }
