package bth

import (
	"fmt"
	"math/bits"
)

// Opcode is the BTH opcode byte: the top three bits name the transport
// service (IBTA 9.2.1, table 35), the low five bits the operation.
type Opcode uint8

// Transport service prefixes of the opcode (IBTA table 35).
const (
	TransportRC  Opcode = 0x00
	TransportUC  Opcode = 0x20
	TransportRD  Opcode = 0x40
	TransportUD  Opcode = 0x60
	TransportCNP Opcode = 0x80
	TransportXRC Opcode = 0xa0 // IBTA annex A14, table 1
)

// Opcodes of the reliable connected service (IBTA table 36).
const (
	RCSendFirst              Opcode = 0x00
	RCSendMiddle             Opcode = 0x01
	RCSendLast               Opcode = 0x02
	RCSendLastImm            Opcode = 0x03
	RCSendOnly               Opcode = 0x04
	RCSendOnlyImm            Opcode = 0x05
	RCRDMAWriteFirst         Opcode = 0x06
	RCRDMAWriteMiddle        Opcode = 0x07
	RCRDMAWriteLast          Opcode = 0x08
	RCRDMAWriteLastImm       Opcode = 0x09
	RCRDMAWriteOnly          Opcode = 0x0a
	RCRDMAWriteOnlyImm       Opcode = 0x0b
	RCRDMAReadRequest        Opcode = 0x0c
	RCRDMAReadResponseFirst  Opcode = 0x0d
	RCRDMAReadResponseMiddle Opcode = 0x0e
	RCRDMAReadResponseLast   Opcode = 0x0f
	RCRDMAReadResponseOnly   Opcode = 0x10
	RCAcknowledge            Opcode = 0x11
	RCAtomicAcknowledge      Opcode = 0x12
	RCCompareSwap            Opcode = 0x13
	RCFetchAdd               Opcode = 0x14
	RCSendLastInvalidate     Opcode = 0x16
	RCSendOnlyInvalidate     Opcode = 0x17
	UCSendFirst              Opcode = 0x20
	UCSendMiddle             Opcode = 0x21
	UCSendLast               Opcode = 0x22
	UCSendLastImm            Opcode = 0x23
	UCSendOnly               Opcode = 0x24
	UCSendOnlyImm            Opcode = 0x25
	UCRDMAWriteFirst         Opcode = 0x26
	UCRDMAWriteMiddle        Opcode = 0x27
	UCRDMAWriteLast          Opcode = 0x28
	UCRDMAWriteLastImm       Opcode = 0x29
	UCRDMAWriteOnly          Opcode = 0x2a
	UCRDMAWriteOnlyImm       Opcode = 0x2b
	UDSendOnly               Opcode = 0x64
	UDSendOnlyImm            Opcode = 0x65
	CNP                      Opcode = 0x81

	// The XRC opcodes (IBTA annex A14.2) are the RC operations under
	// the XRC prefix; requests carry an XRCETH after the BTH, responses
	// do not.
	XRCSendFirst              = TransportXRC | RCSendFirst
	XRCSendMiddle             = TransportXRC | RCSendMiddle
	XRCSendLast               = TransportXRC | RCSendLast
	XRCSendLastImm            = TransportXRC | RCSendLastImm
	XRCSendOnly               = TransportXRC | RCSendOnly
	XRCSendOnlyImm            = TransportXRC | RCSendOnlyImm
	XRCRDMAWriteFirst         = TransportXRC | RCRDMAWriteFirst
	XRCRDMAWriteMiddle        = TransportXRC | RCRDMAWriteMiddle
	XRCRDMAWriteLast          = TransportXRC | RCRDMAWriteLast
	XRCRDMAWriteLastImm       = TransportXRC | RCRDMAWriteLastImm
	XRCRDMAWriteOnly          = TransportXRC | RCRDMAWriteOnly
	XRCRDMAWriteOnlyImm       = TransportXRC | RCRDMAWriteOnlyImm
	XRCRDMAReadRequest        = TransportXRC | RCRDMAReadRequest
	XRCRDMAReadResponseFirst  = TransportXRC | RCRDMAReadResponseFirst
	XRCRDMAReadResponseMiddle = TransportXRC | RCRDMAReadResponseMiddle
	XRCRDMAReadResponseLast   = TransportXRC | RCRDMAReadResponseLast
	XRCRDMAReadResponseOnly   = TransportXRC | RCRDMAReadResponseOnly
	XRCAcknowledge            = TransportXRC | RCAcknowledge
	XRCAtomicAcknowledge      = TransportXRC | RCAtomicAcknowledge
	XRCCompareSwap            = TransportXRC | RCCompareSwap
	XRCFetchAdd               = TransportXRC | RCFetchAdd
	XRCSendLastInvalidate     = TransportXRC | RCSendLastInvalidate
	XRCSendOnlyInvalidate     = TransportXRC | RCSendOnlyInvalidate

	opcodeCount          = 256
	transportMask Opcode = 0xe0
)

// Header is a set of headers that may follow the BTH.
type Header uint16

// Extension headers, in the order they appear on the wire (IBTA 9.2).
const (
	HdrDETH Header = 1 << iota
	HdrRETH
	HdrAtomicETH
	HdrAETH
	HdrAtomicAckETH
	HdrImmDt
	HdrIETH
	HdrCNP    // the 16 reserved bytes that follow the BTH of a RoCEv2 CNP
	HdrXRCETH // the XRC SRQ number of an XRC request (IBTA A14.3.1)
)

// Header sizes in bytes.
const (
	BTHLen          = 12
	DETHLen         = 8
	RETHLen         = 16
	AtomicETHLen    = 28
	AETHLen         = 4
	AtomicAckETHLen = 8
	ImmDtLen        = 4
	IETHLen         = 4
	CNPLen          = 16
	XRCETHLen       = 4
	ICRCLen         = 4
)

// headerOrder lists the extension headers in wire order with their sizes.
var headerOrder = [...]struct {
	h Header
	n int
}{
	{HdrDETH, DETHLen},
	{HdrXRCETH, XRCETHLen}, // right after the BTH (IBTA A14.3.1)
	{HdrRETH, RETHLen},
	{HdrAtomicETH, AtomicETHLen},
	{HdrAETH, AETHLen},
	{HdrAtomicAckETH, AtomicAckETHLen},
	{HdrImmDt, ImmDtLen},
	{HdrIETH, IETHLen},
	{HdrCNP, CNPLen},
}

// Flags describe where an opcode sits in a message and what it carries.
type Flags uint16

const (
	FlagPayload    Flags = 1 << iota // carries a data payload (possibly empty)
	FlagFirst                        // first packet of a multi-packet message
	FlagMiddle                       // middle packet
	FlagLast                         // last packet
	FlagOnly                         // the only packet of a message
	FlagSend                         // a SEND (consumes a receive WQE)
	FlagWrite                        // an RDMA WRITE
	FlagRead                         // an RDMA READ request
	FlagReadResp                     // an RDMA READ response
	FlagAtomic                       // an atomic request
	FlagAck                          // ACKNOWLEDGE or ATOMIC ACKNOWLEDGE
	FlagImm                          // carries immediate data
	FlagInvalidate                   // carries an rkey to invalidate
	FlagRequest                      // sent by a requester (vs. a responder)
)

// OpInfo is one row of the opcode table.
type OpInfo struct {
	Name    string
	Headers Header
	Flags   Flags
	HdrLen  int // BTH plus all extension headers

	offsets [len(headerOrder)]uint8 // offset of each header present, by its bit index (not its wire position)
}

var opTable [opcodeCount]OpInfo

func init() {
	const (
		first  = FlagFirst | FlagPayload | FlagRequest
		middle = FlagMiddle | FlagPayload | FlagRequest
		last   = FlagLast | FlagPayload | FlagRequest
		only   = FlagOnly | FlagPayload | FlagRequest
	)
	type row struct {
		op    Opcode
		name  string
		hdrs  Header
		flags Flags
	}
	// The send and write families are the same for RC and UC (IBTA
	// tables 36 and 37); UC lacks everything else.
	sendWrite := []row{
		{0x00, "SEND_FIRST", 0, first | FlagSend},
		{0x01, "SEND_MIDDLE", 0, middle | FlagSend},
		{0x02, "SEND_LAST", 0, last | FlagSend},
		{0x03, "SEND_LAST_WITH_IMMEDIATE", HdrImmDt, last | FlagSend | FlagImm},
		{0x04, "SEND_ONLY", 0, only | FlagSend},
		{0x05, "SEND_ONLY_WITH_IMMEDIATE", HdrImmDt, only | FlagSend | FlagImm},
		{0x06, "RDMA_WRITE_FIRST", HdrRETH, first | FlagWrite},
		{0x07, "RDMA_WRITE_MIDDLE", 0, middle | FlagWrite},
		{0x08, "RDMA_WRITE_LAST", 0, last | FlagWrite},
		{0x09, "RDMA_WRITE_LAST_WITH_IMMEDIATE", HdrImmDt, last | FlagWrite | FlagImm},
		{0x0a, "RDMA_WRITE_ONLY", HdrRETH, only | FlagWrite},
		{0x0b, "RDMA_WRITE_ONLY_WITH_IMMEDIATE", HdrRETH | HdrImmDt, only | FlagWrite | FlagImm},
	}
	rcOnly := []row{
		{0x0c, "RDMA_READ_REQUEST", HdrRETH, FlagOnly | FlagRead | FlagRequest},
		{0x0d, "RDMA_READ_RESPONSE_FIRST", HdrAETH, FlagFirst | FlagPayload | FlagReadResp},
		{0x0e, "RDMA_READ_RESPONSE_MIDDLE", 0, FlagMiddle | FlagPayload | FlagReadResp},
		{0x0f, "RDMA_READ_RESPONSE_LAST", HdrAETH, FlagLast | FlagPayload | FlagReadResp},
		{0x10, "RDMA_READ_RESPONSE_ONLY", HdrAETH, FlagOnly | FlagPayload | FlagReadResp},
		{0x11, "ACKNOWLEDGE", HdrAETH, FlagOnly | FlagAck},
		{0x12, "ATOMIC_ACKNOWLEDGE", HdrAETH | HdrAtomicAckETH, FlagOnly | FlagAck},
		{0x13, "COMPARE_SWAP", HdrAtomicETH, FlagOnly | FlagAtomic | FlagRequest},
		{0x14, "FETCH_ADD", HdrAtomicETH, FlagOnly | FlagAtomic | FlagRequest},
		{0x16, "SEND_LAST_WITH_INVALIDATE", HdrIETH, last | FlagSend | FlagInvalidate},
		{0x17, "SEND_ONLY_WITH_INVALIDATE", HdrIETH, only | FlagSend | FlagInvalidate},
	}
	add := func(prefix Opcode, svc string, r row) {
		op := prefix | r.op
		info := OpInfo{Name: svc + "_" + r.name, Headers: r.hdrs, Flags: r.flags}
		n := BTHLen
		for _, h := range headerOrder {
			if r.hdrs&h.h != 0 {
				info.offsets[bits.TrailingZeros16(uint16(h.h))] = uint8(n)
				n += h.n
			}
		}
		info.HdrLen = n
		opTable[op] = info
	}
	for _, r := range sendWrite {
		add(TransportRC, "RC", r)
		add(TransportUC, "UC", r)
	}
	for _, r := range rcOnly {
		add(TransportRC, "RC", r)
	}
	// XRC is RC's operations with an XRCETH on every request (IBTA
	// A14.2, table 1).
	for _, r := range append(sendWrite, rcOnly...) {
		if r.flags&FlagRequest != 0 {
			r.hdrs |= HdrXRCETH
		}
		add(TransportXRC, "XRC", r)
	}
	add(TransportUD, "UD", row{0x04, "SEND_ONLY", HdrDETH, only | FlagSend})
	add(TransportUD, "UD", row{0x05, "SEND_ONLY_WITH_IMMEDIATE", HdrDETH | HdrImmDt, only | FlagSend | FlagImm})
	add(TransportCNP, "ROCE", row{0x01, "CNP", HdrCNP, 0})
}

// Info returns the opcode's row of the table; Valid reports whether it has one.
func (op Opcode) Info() *OpInfo { return &opTable[op] }

// Valid reports whether op is an opcode this NIC knows (RC, UC, UD, XRC or
// CNP).
func (op Opcode) Valid() bool { return opTable[op].HdrLen != 0 }

// Transport returns the transport service prefix (TransportRC, ...).
func (op Opcode) Transport() Opcode { return op & transportMask }

// Operation is the opcode without its transport prefix: for RC and XRC
// opcodes, the RC opcode of the same operation (XRCFetchAdd.Operation()
// == RCFetchAdd).
func (op Opcode) Operation() Opcode { return op &^ transportMask }

// Has reports whether packets of this opcode carry header h.
func (op Opcode) Has(h Header) bool { return opTable[op].Headers&h != 0 }

// Is reports whether the opcode has every flag in f.
func (op Opcode) Is(f Flags) bool { return opTable[op].Flags&f == f }

// HdrLen is the length of the BTH and the extension headers of op.
func (op Opcode) HdrLen() int { return opTable[op].HdrLen }

func (op Opcode) String() string {
	if n := opTable[op].Name; n != "" {
		return n
	}
	return fmt.Sprintf("OPCODE_%#02x", uint8(op))
}

// Offset returns the offset of header h (a single Header bit) from the
// start of the BTH in a packet of this opcode, or -1 if the opcode does not
// carry it.
func (op Opcode) Offset(h Header) int {
	info := &opTable[op]
	if info.Headers&h == 0 || h&(h-1) != 0 {
		return -1
	}
	return int(info.offsets[bits.TrailingZeros16(uint16(h))])
}
