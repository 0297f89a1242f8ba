package bth

import "encoding/binary"

var be = binary.BigEndian

// PSNMask keeps the 24 bits of a packet sequence number.
const PSNMask = 0xffffff

// QPNMask keeps the 24 bits of a queue pair number.
const QPNMask = 0xffffff

// DefaultPKey is the default partition key rxe and RoCE NICs use.
const DefaultPKey = 0xffff

// BTH is a view of the 12-byte Base Transport Header (IBTA 9.2, figure 98):
//
//	byte 0     opcode
//	byte 1     SE(1) M(1) PadCnt(2) TVer(4)
//	bytes 2-3  P_Key
//	byte 4     FECN(1) BECN(1) reserved(6)   (RoCEv2 uses FECN/BECN bits only in IB)
//	bytes 5-7  DestQP
//	byte 8     AckReq(1) reserved(7)
//	bytes 9-11 PSN
type BTH []byte

func (b BTH) Opcode() Opcode       { return Opcode(b[0]) }
func (b BTH) SolicitedEvent() bool { return b[1]&0x80 != 0 }
func (b BTH) MigReq() bool         { return b[1]&0x40 != 0 }
func (b BTH) PadCount() int        { return int(b[1]>>4) & 3 }
func (b BTH) TVer() uint8          { return b[1] & 0x0f }
func (b BTH) PKey() uint16         { return be.Uint16(b[2:]) }
func (b BTH) FECN() bool           { return b[4]&0x80 != 0 }
func (b BTH) BECN() bool           { return b[4]&0x40 != 0 }
func (b BTH) DestQP() uint32       { return be.Uint32(b[4:]) & QPNMask }
func (b BTH) AckReq() bool         { return b[8]&0x80 != 0 }
func (b BTH) PSN() uint32          { return be.Uint32(b[8:]) & PSNMask }

// BTHFields are the values Encode writes into a BTH.
type BTHFields struct {
	Opcode         Opcode
	SolicitedEvent bool
	MigReq         bool
	PadCount       int
	TVer           uint8
	PKey           uint16
	FECN, BECN     bool
	DestQP         uint32
	AckReq         bool
	PSN            uint32
}

// Encode writes f into b, which must be at least BTHLen long. Reserved bits
// are written as zero.
func (b BTH) Encode(f *BTHFields) {
	b[0] = byte(f.Opcode)
	b[1] = byte(f.PadCount&3)<<4 | f.TVer&0x0f
	if f.SolicitedEvent {
		b[1] |= 0x80
	}
	if f.MigReq {
		b[1] |= 0x40
	}
	be.PutUint16(b[2:], f.PKey)
	be.PutUint32(b[4:], f.DestQP&QPNMask)
	if f.FECN {
		b[4] |= 0x80
	}
	if f.BECN {
		b[4] |= 0x40
	}
	be.PutUint32(b[8:], f.PSN&PSNMask)
	if f.AckReq {
		b[8] |= 0x80
	}
}

// Fields decodes the view into a BTHFields.
func (b BTH) Fields() BTHFields {
	return BTHFields{
		Opcode: b.Opcode(), SolicitedEvent: b.SolicitedEvent(), MigReq: b.MigReq(),
		PadCount: b.PadCount(), TVer: b.TVer(), PKey: b.PKey(), FECN: b.FECN(),
		BECN: b.BECN(), DestQP: b.DestQP(), AckReq: b.AckReq(), PSN: b.PSN(),
	}
}

// SetPSN rewrites the PSN, keeping the AckReq bit.
func (b BTH) SetPSN(psn uint32) { be.PutUint32(b[8:], uint32(b[8]&0x80)<<24|psn&PSNMask) }

// SetAckReq sets or clears the AckReq bit.
func (b BTH) SetAckReq(v bool) {
	if v {
		b[8] |= 0x80
	} else {
		b[8] &^= 0x80
	}
}

// RETH is a view of the 16-byte RDMA Extended Transport Header (IBTA 9.3.3):
// virtual address, R_Key and DMA length.
type RETH []byte

func (r RETH) VA() uint64        { return be.Uint64(r[0:]) }
func (r RETH) RKey() uint32      { return be.Uint32(r[8:]) }
func (r RETH) DMALength() uint32 { return be.Uint32(r[12:]) }

// Encode writes the RETH fields.
func (r RETH) Encode(va uint64, rkey, dmaLen uint32) {
	be.PutUint64(r[0:], va)
	be.PutUint32(r[8:], rkey)
	be.PutUint32(r[12:], dmaLen)
}

// AtomicETH is a view of the 28-byte Atomic Extended Transport Header
// (IBTA 9.3.4): VA, R_Key, swap (or add) data, compare data.
type AtomicETH []byte

func (a AtomicETH) VA() uint64          { return be.Uint64(a[0:]) }
func (a AtomicETH) RKey() uint32        { return be.Uint32(a[8:]) }
func (a AtomicETH) SwapAddData() uint64 { return be.Uint64(a[12:]) }
func (a AtomicETH) CompareData() uint64 { return be.Uint64(a[20:]) }

// Encode writes the AtomicETH fields.
func (a AtomicETH) Encode(va uint64, rkey uint32, swapAdd, compare uint64) {
	be.PutUint64(a[0:], va)
	be.PutUint32(a[8:], rkey)
	be.PutUint64(a[12:], swapAdd)
	be.PutUint64(a[20:], compare)
}

// AETH is a view of the 4-byte ACK Extended Transport Header (IBTA 9.3.5):
// an 8-bit syndrome and the 24-bit message sequence number (MSN).
type AETH []byte

func (a AETH) Syndrome() Syndrome { return Syndrome(a[0]) }
func (a AETH) MSN() uint32        { return be.Uint32(a[0:]) & PSNMask }

// Encode writes the syndrome and MSN.
func (a AETH) Encode(s Syndrome, msn uint32) { be.PutUint32(a, uint32(s)<<24|msn&PSNMask) }

// AtomicAckETH is a view of the 8-byte Atomic ACK Extended Transport Header:
// the original value at the target address.
type AtomicAckETH []byte

func (a AtomicAckETH) OrigData() uint64   { return be.Uint64(a) }
func (a AtomicAckETH) Encode(orig uint64) { be.PutUint64(a, orig) }

// ImmDt is a view of the 4-byte Immediate Data header. The value is carried
// in network order and handed to the application as it is (libibverbs'
// imm_data is __be32).
type ImmDt []byte

func (i ImmDt) Imm() uint32       { return be.Uint32(i) }
func (i ImmDt) Encode(imm uint32) { be.PutUint32(i, imm) }

// IETH is a view of the 4-byte Invalidate Extended Transport Header: the
// R_Key to invalidate.
type IETH []byte

func (i IETH) RKey() uint32       { return be.Uint32(i) }
func (i IETH) Encode(rkey uint32) { be.PutUint32(i, rkey) }

// DETH is a view of the 8-byte Datagram Extended Transport Header (IBTA
// 9.3.2): Q_Key and source QP.
type DETH []byte

func (d DETH) QKey() uint32  { return be.Uint32(d[0:]) }
func (d DETH) SrcQP() uint32 { return be.Uint32(d[4:]) & QPNMask }

// Encode writes Q_Key and source QP (the reserved byte is zero).
func (d DETH) Encode(qkey, srcQP uint32) {
	be.PutUint32(d[0:], qkey)
	be.PutUint32(d[4:], srcQP&QPNMask)
}

// Syndrome is the AETH syndrome byte (IBTA 9.7.5.1, table 43): bits 6-5 give
// the kind (ACK, RNR NAK, NAK), bits 4-0 its value (credit count, RNR timer
// code, NAK code).
type Syndrome uint8

// Syndrome kinds.
const (
	SyndromeACK    Syndrome = 0x00
	SyndromeRNRNAK Syndrome = 0x20
	SyndromeNAK    Syndrome = 0x60
	syndromeKind   Syndrome = 0x60
)

// NAK codes (IBTA table 44).
const (
	NAKPSNSeqError       Syndrome = SyndromeNAK | 0
	NAKInvalidRequest    Syndrome = SyndromeNAK | 1
	NAKRemoteAccessError Syndrome = SyndromeNAK | 2
	NAKRemoteOpError     Syndrome = SyndromeNAK | 3
	NAKInvalidRDRequest  Syndrome = SyndromeNAK | 4
)

// CreditsInvalid is the ACK credit count meaning "no credit information";
// rxe sends it on every ACK since it does not do end-to-end credits.
const CreditsInvalid = 0x1f

// ACK returns an ACK syndrome with the given credit count code.
func ACK(credits uint8) Syndrome { return SyndromeACK | Syndrome(credits&0x1f) }

// RNRNAK returns an RNR NAK syndrome with the given 5-bit timer code.
func RNRNAK(timer uint8) Syndrome { return SyndromeRNRNAK | Syndrome(timer&0x1f) }

func (s Syndrome) IsACK() bool    { return s&0x80 == 0 && s&syndromeKind == SyndromeACK }
func (s Syndrome) IsRNRNAK() bool { return s&0x80 == 0 && s&syndromeKind == SyndromeRNRNAK }
func (s Syndrome) IsNAK() bool    { return s&0x80 == 0 && s&syndromeKind == SyndromeNAK }

// Value is the low five bits: credits, RNR timer code or NAK code.
func (s Syndrome) Value() uint8 { return uint8(s & 0x1f) }

func (s Syndrome) String() string {
	switch {
	case s.IsACK():
		return "ACK"
	case s.IsRNRNAK():
		return "RNR_NAK"
	case s == NAKPSNSeqError:
		return "NAK_PSN_SEQ_ERR"
	case s == NAKInvalidRequest:
		return "NAK_INVALID_REQUEST"
	case s == NAKRemoteAccessError:
		return "NAK_REM_ACCESS_ERR"
	case s == NAKRemoteOpError:
		return "NAK_REM_OP_ERR"
	case s == NAKInvalidRDRequest:
		return "NAK_INVALID_RD_REQUEST"
	}
	return "RESERVED_SYNDROME"
}

// RNRTimerMicros returns the RNR NAK delay, in microseconds, of a 5-bit timer code
// (IBTA table 45). Code 0 is 655.36 ms.
func RNRTimerMicros(code uint8) uint32 { return rnrTimerMicros[code&0x1f] }

var rnrTimerMicros = [32]uint32{
	655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280,
	1920, 2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440,
	81920, 122880, 163840, 245760, 327680, 491520,
}
