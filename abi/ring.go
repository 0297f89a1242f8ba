package abi

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/rnicd/rnicd/ib"
)

// Ring layout. Every ring (a QP's send queue, a QP's or SRQ's receive
// queue, a CQ) is a header followed by fixed-size slots, in a memfd the
// daemon creates and both sides map. All integers little-endian.
//
//	offset  0  producer   uint32  count of slots written, from 0, wrapping
//	offset  8  depth      uint32  number of slots (informational)
//	offset 12  slot size  uint32  bytes per slot (informational)
//	offset 16  armed      uint32  CQ: 0, ArmAny or ArmSolicited (client sets, daemon clears)
//	offset 20  flags      uint32  CQ: FlagOverrun once a completion did not fit
//	offset 24  events     uint32  CQ: completion events sent to its channel
//	offset 28  waiting    uint32  CQ: 1 while the client sleeps in Wait
//	offset 32  bell       uint32  work queue: 1 while a doorbell is on its way (client sets, daemon clears)
//	offset 36  asleep     uint32  work queue: 0 while the daemon's engine polls the ring (daemon writes)
//	offset 64  consumer   uint32  count of slots consumed, from 0, wrapping
//	offset 128 slot 0, slot 1, ...  slot i%depth holds the i-th entry
//
// The producer of a work queue is the client, its consumer the daemon (it
// advances when the WQE completes, so a full ring is a full queue); a CQ's
// producer is the daemon and its consumer the client. The indices are
// accessed with sync/atomic only: a producer writes the slot, then
// stores the index; a consumer loads the index, then reads the slot. The
// daemon keeps its own copy of depth and slot size and never trusts the
// header's.
const (
	RingProducer = 0
	RingDepth    = 8
	RingSlotSize = 12
	RingArmed    = 16
	RingFlags    = 20
	RingEvents   = 24
	RingWaiting  = 28
	RingBell     = 32
	RingAsleep   = 36
	RingConsumer = 64
	RingHeader   = 128
)

// Values of a CQ ring's armed and flags words.
const (
	ArmAny       uint32 = 1
	ArmSolicited uint32 = 2
	FlagOverrun  uint32 = 1
)

// Ring is one ring over mapped memory.
type Ring struct {
	mem       []byte
	Slots     uint32
	SlotBytes uint32
}

// RingBytes is the size of a ring of n slots of size bytes.
func RingBytes(n, size uint32) uint64 { return RingHeader + uint64(n)*uint64(size) }

// NewRing views mem as a ring of n slots of size bytes; mem must be
// RingBytes(n, size) long.
//
// A ring of 0 slots (a work queue of 0 WRs) is a header alone: any WQE
// its producer index claims is past the ring (NewWQEs), so no slot is
// ever read, and a CQ of 0 slots overruns at its first completion.
func NewRing(mem []byte, n, size uint32) (*Ring, error) {
	if size == 0 || uint64(len(mem)) < RingBytes(n, size) {
		return nil, fmt.Errorf("hostif: %d bytes hold no ring of %d slots of %d bytes", len(mem), n, size)
	}
	r := &Ring{mem: mem[:RingBytes(n, size)], Slots: n, SlotBytes: size}
	return r, nil
}

func (r *Ring) word(off int) *uint32 { return (*uint32)(unsafe.Pointer(&r.mem[off])) }

// Load and Store access a header word atomically.
func (r *Ring) Load(off int) uint32     { return atomic.LoadUint32(r.word(off)) }
func (r *Ring) Store(off int, v uint32) { atomic.StoreUint32(r.word(off), v) }

// Producer, Consumer and the rest name the header words.
func (r *Ring) Producer() uint32     { return r.Load(RingProducer) }
func (r *Ring) Consumer() uint32     { return r.Load(RingConsumer) }
func (r *Ring) SetProducer(v uint32) { r.Store(RingProducer, v) }
func (r *Ring) SetConsumer(v uint32) { r.Store(RingConsumer, v) }
func (r *Ring) Armed() uint32        { return r.Load(RingArmed) }
func (r *Ring) SetArmed(v uint32)    { r.Store(RingArmed, v) }
func (r *Ring) Overrun() bool        { return r.Load(RingFlags)&FlagOverrun != 0 }
func (r *Ring) Events() uint32       { return r.Load(RingEvents) }
func (r *Ring) SetWaiting(on bool)   { r.Store(RingWaiting, uint32(b2u(on))) }

// Disarm, TakeWaiter, AddEvent, SetFlag, WriteGeometry and Reset are the
// daemon's halves of the header words, which a client never calls: a CQ's
// arm taken (if it is still v) and its waiter woken once, an event
// counted, a flag (FlagOverrun) set; a new ring's geometry written (and
// asleep, until an engine polls it); a work queue's indices and bell
// cleared (a QP back to RESET).
func (r *Ring) Disarm(v uint32) bool { return atomic.CompareAndSwapUint32(r.word(RingArmed), v, 0) }
func (r *Ring) TakeWaiter() bool     { return atomic.SwapUint32(r.word(RingWaiting), 0) != 0 }
func (r *Ring) AddEvent()            { atomic.AddUint32(r.word(RingEvents), 1) }
func (r *Ring) SetFlag(f uint32)     { atomic.OrUint32(r.word(RingFlags), f) }
func (r *Ring) WriteGeometry() {
	r.Store(RingDepth, r.Slots)
	r.Store(RingSlotSize, r.SlotBytes)
	r.SetAsleep(true)
}
func (r *Ring) Reset() { r.SetProducer(0); r.SetConsumer(0); r.Store(RingBell, 0) }

// EngineAsleep is the client's half of notification suppression, as
// virtio's event index and vhost-user suppress kicks: loaded after the
// client stored the producer index, it reports whether the engine that
// owns the ring sleeps and needs a doorbell message to wake. While it
// polls (0), the engine finds the new producer index itself and a post
// costs no system call. The daemon writes 1 and then reads every producer
// index before it sleeps, the client stores the producer index and then
// reads this word: with both sequentially consistent (Go's sync/atomic,
// __ATOMIC_SEQ_CST in clib), one of the two sees the other's store, so no
// post is left unseen (Dekker's order). A new ring reads asleep until an
// engine polls it; a daemon without one never writes 0.
func (r *Ring) EngineAsleep() bool { return r.Load(RingAsleep) != 0 }

// SetAsleep is the engine's half.
func (r *Ring) SetAsleep(on bool) { r.Store(RingAsleep, uint32(b2u(on))) }

// RingBell is the client's half of doorbell coalescing, called after it
// stored the producer index: it reports whether a doorbell must be sent,
// false when one is already on its way and the daemon has not yet begun
// the fetch it asks for. The daemon clears the word before it reads the
// producer index (ClearBell), so that fetch sees every WQE whose
// doorbell was skipped. While the daemon is busy, a client posting WR
// after WR sends one doorbell per fetch rather than one per post.
func (r *Ring) RingBell() bool { return atomic.SwapUint32(r.word(RingBell), 1) == 0 }

// ClearBell is the daemon's half, before it reads the producer index.
func (r *Ring) ClearBell() { r.Store(RingBell, 0) }
func (r *Ring) Slot(i uint32) []byte {
	off := RingHeader + uint64(i%r.Slots)*uint64(r.SlotBytes)
	return r.mem[off : off+uint64(r.SlotBytes)]
}

// Send WQE slot:
//
//	offset  0 wr_id        uint64
//	offset  8 opcode       uint8 (ibv_wr_opcode)
//	offset  9 send_flags   uint8 (ibv_send_flags)
//	offset 10 num_sge      uint8
//	offset 11 has_ah       uint8 (UD: 1, AH fields valid)
//	offset 12 inline_len   uint32 (with IBV_SEND_INLINE)
//	offset 16 imm_data     uint32 (host order), or
//	offset 20 invalidate_rkey uint32
//	offset 24 remote_addr  uint64
//	offset 32 rkey         uint32
//	offset 36 remote_qpn   uint32 (UD)
//	offset 40 remote_qkey  uint32 (UD)
//	offset 44 hop_limit, traffic_class, sgid_index uint8; 1 byte pad
//	offset 48 flow_label   uint32
//	offset 56 compare_add  uint64
//	offset 64 swap         uint64
//	offset 72 dgid         [16]byte
//	offset 96 sg_list: num_sge x {addr uint64, length uint32, lkey uint32}
//	then      inline data (max_inline bytes)
//
// A BIND_MW WQE (ib.SendWR.Bind) uses the fields as: imm_data the MR's
// lkey, invalidate_rkey the window's rkey, remote_addr the address, rkey
// the window's new rkey, compare_add the length, swap the access flags;
// it has no SGE. LOCAL_INV names its rkey in invalidate_rkey.
const (
	sendFixed = 96
	sgeBytes  = 16
)

// SendSlotBytes is the send slot size of a QP with these caps.
func SendSlotBytes(maxSGE, maxInline int) uint32 {
	return uint32(roundUp(sendFixed+sgeBytes*maxSGE+maxInline, 64))
}

// RecvSlotBytes is the receive slot size for maxSGE SGEs:
//
//	offset  0 wr_id    uint64
//	offset  8 num_sge  uint32; 4 bytes pad
//	offset 16 sg_list: num_sge x {addr uint64, length uint32, lkey uint32}
func RecvSlotBytes(maxSGE int) uint32 { return uint32(roundUp(16+sgeBytes*max(maxSGE, 1), 32)) }

// CQE slot (CQESlotBytes):
//
//	offset  0 wr_id      uint64
//	offset  8 status, opcode, wc_flags uint8; 1 byte pad
//	offset 12 byte_len   uint32
//	offset 16 imm_data   uint32 (or invalidated rkey)
//	offset 20 qp_num     uint32
//	offset 24 src_qp     uint32
//	offset 28 pkey_index uint16; 2 bytes pad
const CQESlotBytes = 32

func roundUp(n, to int) int { return (n + to - 1) / to * to }

var le = binary.LittleEndian

// NewWQEs returns how many WQEs the producer index says were added since
// the consumer fetched fetched of them, or an error if it claims more
// than the ring has room for: the producer index is hostile. done, the
// count of retired WQEs, is read after the producer index: a completion
// may retire a slot, and the producer fill it, between the two reads,
// and the slot counts as free only if done is at least the consumer
// index the producer saw.
func (r *Ring) NewWQEs(fetched uint32, done func() uint32) (uint32, error) {
	prod := r.Producer()
	return countWQEs(prod, fetched, done(), r.Slots)
}

// countWQEs is NewWQEs on the indices read.
func countWQEs(prod, fetched, done, slots uint32) (uint32, error) {
	n := prod - fetched
	if n > slots-(fetched-done) {
		return 0, fmt.Errorf("producer index %d is %d WQEs past the fetch index %d, with %d of %d slots in use",
			prod, n, fetched, fetched-done, slots)
	}
	return n, nil
}

// EncodeSendWQE writes wr into a send slot. The caller (the client)
// checked wr against the QP's caps; a WR that does not fit is an error.
func EncodeSendWQE(slot []byte, wr *ib.SendWR) error {
	inline := wr.Flags&ib.SendInline != 0
	nsge := len(wr.SGL)
	if inline {
		nsge = 0
	}
	need := sendFixed + sgeBytes*nsge
	if inline {
		need += len(wr.InlineData)
	}
	if nsge > 255 || need > len(slot) {
		return fmt.Errorf("hostif: WR of %d SGEs and %d inline bytes does not fit a %d-byte slot", len(wr.SGL), len(wr.InlineData), len(slot))
	}
	clear(slot[:sendFixed])
	le.PutUint64(slot[0:], wr.WRID)
	slot[8], slot[9], slot[10] = uint8(wr.Opcode), uint8(wr.Flags), uint8(nsge)
	if inline {
		le.PutUint32(slot[12:], uint32(len(wr.InlineData)))
	}
	le.PutUint32(slot[16:], wr.Imm)
	le.PutUint32(slot[20:], wr.InvRKey)
	le.PutUint64(slot[24:], wr.RemoteAddr)
	le.PutUint32(slot[32:], wr.RKey)
	le.PutUint32(slot[36:], wr.RemoteQPN)
	le.PutUint32(slot[40:], wr.RemoteQKey)
	le.PutUint32(slot[52:], wr.RemoteSRQN)
	if ah := wr.AH; ah != nil {
		slot[11] = 1
		slot[44], slot[45], slot[46] = ah.HopLimit, ah.TrafficClass, ah.SGIDIndex
		le.PutUint32(slot[48:], ah.FlowLabel)
		copy(slot[72:88], ah.DGID[:])
	}
	le.PutUint64(slot[56:], wr.CompareAdd)
	le.PutUint64(slot[64:], wr.Swap)
	if b := wr.Bind; wr.Opcode == ib.WRBindMW && b != nil {
		le.PutUint32(slot[16:], b.MRLKey)
		le.PutUint32(slot[20:], b.MWRKey)
		le.PutUint64(slot[24:], b.Addr)
		le.PutUint32(slot[32:], b.RKey)
		le.PutUint64(slot[56:], b.Length)
		le.PutUint64(slot[64:], uint64(b.Access))
	}
	off := sendFixed
	for _, s := range wr.SGL[:nsge] {
		putSGE(slot[off:], s)
		off += sgeBytes
	}
	if inline {
		copy(slot[off:], wr.InlineData)
	}
	return nil
}

func putSGE(b []byte, s ib.SGE) {
	le.PutUint64(b[0:], s.Addr)
	le.PutUint32(b[8:], s.Length)
	le.PutUint32(b[12:], s.LKey)
}

func getSGE(b []byte) ib.SGE {
	return ib.SGE{Addr: le.Uint64(b[0:]), Length: le.Uint32(b[8:]), LKey: le.Uint32(b[12:])}
}

// DecodeSendWQE reads a send slot the client wrote, trusting nothing but
// its layout: the SGE count, the inline length and has_ah must fit the
// slot. Whether the WR is one the QP may post (opcode, flags, caps,
// lengths) is the engine's one validator's to say (rnic.Device.PostSend),
// as for every WR. It copies what it keeps, as the client may rewrite the
// slot at any time. An error is a malformed WQE: the WQE completes with
// LOC_QP_OP_ERR.
func DecodeSendWQE(slot []byte) (ib.SendWR, error) {
	var wr ib.SendWR
	if len(slot) < sendFixed {
		return wr, fmt.Errorf("hostif: send slot of %d bytes", len(slot))
	}
	s := make([]byte, len(slot)) // one read of the shared memory
	copy(s, slot)
	wr.WRID = le.Uint64(s[0:])
	wr.Opcode, wr.Flags = ib.WROpcode(s[8]), ib.SendFlags(s[9])
	nsge, inl := int(s[10]), le.Uint32(s[12:])
	if s[11] > 1 {
		return wr, fmt.Errorf("hostif: WQE has_ah %d", s[11])
	}
	wr.Imm, wr.InvRKey = le.Uint32(s[16:]), le.Uint32(s[20:])
	wr.RemoteAddr, wr.RKey = le.Uint64(s[24:]), le.Uint32(s[32:])
	wr.RemoteQPN, wr.RemoteQKey = le.Uint32(s[36:]), le.Uint32(s[40:])
	wr.RemoteSRQN = le.Uint32(s[52:])
	if s[11] == 1 {
		ah := &ib.AH{HopLimit: s[44], TrafficClass: s[45], SGIDIndex: s[46], FlowLabel: le.Uint32(s[48:])}
		copy(ah.DGID[:], s[72:88])
		wr.AH = ah
	}
	wr.CompareAdd, wr.Swap = le.Uint64(s[56:]), le.Uint64(s[64:])
	if wr.Opcode == ib.WRBindMW {
		// Access past 32 bits keeps unknown bits, which the bind refuses.
		wr.Bind = &ib.MWBind{MRLKey: wr.Imm, MWRKey: wr.InvRKey, Addr: wr.RemoteAddr, RKey: wr.RKey,
			Length: wr.CompareAdd, Access: ib.Access(min(wr.Swap, 1<<32-1))}
		wr.Imm, wr.InvRKey, wr.RemoteAddr, wr.RKey, wr.CompareAdd, wr.Swap = 0, 0, 0, 0, 0, 0
	}
	if wr.Flags&ib.SendInline != 0 {
		if nsge != 0 || uint64(sendFixed)+uint64(inl) > uint64(len(s)) {
			return wr, fmt.Errorf("hostif: WQE of %d inline bytes and %d SGEs in a %d-byte slot", inl, nsge, len(s))
		}
		wr.InlineData = s[sendFixed : sendFixed+int(inl)]
		return wr, nil
	}
	if inl != 0 || sendFixed+sgeBytes*nsge > len(s) {
		return wr, fmt.Errorf("hostif: WQE of %d SGEs in a %d-byte slot, inline length %d without IBV_SEND_INLINE", nsge, len(s), inl)
	}
	wr.SGL = make([]ib.SGE, nsge)
	for i := range wr.SGL {
		wr.SGL[i] = getSGE(s[sendFixed+sgeBytes*i:])
	}
	return wr, nil
}

// EncodeRecvWQE writes wr into a receive slot.
func EncodeRecvWQE(slot []byte, wr *ib.RecvWR) error {
	if 16+sgeBytes*len(wr.SGL) > len(slot) {
		return fmt.Errorf("hostif: receive WR of %d SGEs does not fit a %d-byte slot", len(wr.SGL), len(slot))
	}
	le.PutUint64(slot[0:], wr.WRID)
	le.PutUint32(slot[8:], uint32(len(wr.SGL)))
	le.PutUint32(slot[12:], 0)
	for i, s := range wr.SGL {
		putSGE(slot[16+sgeBytes*i:], s)
	}
	return nil
}

// DecodeRecvWQE reads a receive slot the client wrote, trusting nothing.
func DecodeRecvWQE(slot []byte, maxSGE int) (ib.RecvWR, error) {
	var wr ib.RecvWR
	maxSGE = max(maxSGE, 0)
	if len(slot) < 16 {
		return wr, fmt.Errorf("hostif: receive slot of %d bytes", len(slot))
	}
	wr.WRID = le.Uint64(slot[0:])
	n := le.Uint32(slot[8:])
	if n > uint32(maxSGE) || 16+uint64(sgeBytes)*uint64(n) > uint64(len(slot)) {
		return wr, fmt.Errorf("hostif: receive WQE of %d SGEs; queue allows %d", n, maxSGE)
	}
	wr.SGL = make([]ib.SGE, n)
	for i := range wr.SGL {
		wr.SGL[i] = getSGE(slot[16+sgeBytes*i:])
	}
	return wr, nil
}

// PutCQE writes a completion into a CQE slot: every field GetCQE reads.
// The device writes its CQEs with PutSendCQE and PutRecvCQE, from its
// records' fields; this is the codec's whole inverse, which the tests of
// the layout and of the C header compare against.
func PutCQE(slot []byte, wc *ib.WC) {
	le.PutUint64(slot[0:], wc.WRID)
	slot[8], slot[9], slot[10], slot[11] = uint8(wc.Status), uint8(wc.Opcode), uint8(wc.WCFlags), 0
	le.PutUint32(slot[12:], wc.ByteLen)
	le.PutUint32(slot[16:], wc.Imm)
	le.PutUint32(slot[20:], wc.QPNum)
	le.PutUint32(slot[24:], wc.SrcQP)
	le.PutUint16(slot[28:], wc.PKeyIndex)
	le.PutUint16(slot[30:], 0)
}

// PutSendCQE writes the completion of a send WR into a CQE slot straight
// from the fields the engine's WQE holds, with no WC between: a send
// completion has no immediate, source QP or P_Key index (0).
func PutSendCQE(slot []byte, wrid uint64, st ib.WCStatus, op ib.WCOpcode, flags ib.WCFlags, byteLen, qpn uint32) {
	PutRecvCQE(slot, wrid, st, op, flags, byteLen, 0, qpn, 0)
}

// PutRecvCQE writes the completion of a receive WR into a CQE slot
// straight from the device's receive record (the wr_id) and what the
// responder learned of the message, with no WC between: a receive
// completion's P_Key index is 0 (the port has one P_Key).
func PutRecvCQE(slot []byte, wrid uint64, st ib.WCStatus, op ib.WCOpcode, flags ib.WCFlags, byteLen, imm, qpn, srcQP uint32) {
	le.PutUint64(slot[0:], wrid)
	slot[8], slot[9], slot[10], slot[11] = uint8(st), uint8(op), uint8(flags), 0
	le.PutUint32(slot[12:], byteLen)
	le.PutUint32(slot[16:], imm)
	le.PutUint32(slot[20:], qpn)
	le.PutUint32(slot[24:], srcQP)
	clear(slot[28:32])
}

// Wake writes the 8-byte count 1 into the write end of a wake pipe (a
// CQ's waiter, a completion or CM channel), which the client reads. It
// cannot block: the write end's O_NONBLOCK is the daemon's alone. EAGAIN
// means the pipe is full, so already readable; EPIPE means the client
// closed its end; both need nothing more. It calls syscall, not
// x/sys/unix: the ABI depends on ib and the standard library only,
// so a client that links it links nothing more.
func Wake(fd int) {
	var one [8]byte
	le.PutUint64(one[:], 1)
	syscall.Write(fd, one[:])
}

// GetCQE reads a completion from a CQE slot.
func GetCQE(slot []byte, wc *ib.WC) {
	*wc = ib.WC{
		WRID: le.Uint64(slot[0:]), Status: ib.WCStatus(slot[8]), Opcode: ib.WCOpcode(slot[9]),
		WCFlags: ib.WCFlags(slot[10]), ByteLen: le.Uint32(slot[12:]), Imm: le.Uint32(slot[16:]),
		QPNum: le.Uint32(slot[20:]), SrcQP: le.Uint32(slot[24:]), PKeyIndex: le.Uint16(slot[28:]),
	}
}
