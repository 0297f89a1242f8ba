package bth

import (
	"encoding/binary"
	"fmt"
)

// Reason says why a packet failed to decode. The NIC counts drops by it.
type Reason uint8

const (
	ReasonNone              Reason = iota
	ReasonShort                    // shorter than a BTH and an ICRC
	ReasonUnknownOpcode            // opcode not in the RC, UC, UD or CNP tables
	ReasonBadVersion               // BTH transport header version is not 0
	ReasonTruncated                // shorter than its opcode's headers and ICRC
	ReasonPadTooLarge              // pad count larger than the payload
	ReasonUnexpectedPayload        // bytes after the headers of an opcode with no payload
	ReasonBadICRC                  // ICRC does not match

	// Reasons of ParseIP, for the IP and UDP headers around the packet.

	ReasonIPShort     // shorter than its IP and UDP headers
	ReasonIPVersion   // IP version is neither 4 nor 6
	ReasonIPLength    // IP header or total length does not fit the datagram
	ReasonNotUDP      // IP protocol (IPv6 next header) is not UDP
	ReasonFragmented  // an IPv4 fragment (MF set or nonzero offset)
	ReasonUDPLength   // UDP length disagrees with the IP length
	ReasonNotRoCEPort // UDP destination port is not 4791
	numReasons
)

var reasonNames = [numReasons]string{
	"none", "short packet", "unknown opcode", "bad transport version",
	"truncated headers", "pad count larger than payload",
	"payload on an opcode that carries none", "bad ICRC",
	"short IP datagram", "bad IP version", "bad IP length", "not UDP",
	"fragmented IPv4 datagram", "bad UDP length", "not the RoCEv2 port",
}

func (r Reason) String() string {
	if r < numReasons {
		return reasonNames[r]
	}
	return fmt.Sprintf("reason(%d)", uint8(r))
}

// DecodeError is returned by Parse and ParseIP: what is wrong and the
// lengths or values involved.
type DecodeError struct {
	Reason Reason
	Opcode Opcode
	Len    int // bytes available
	Need   int // bytes the opcode needs, or the offending value (see Error)
}

func (e *DecodeError) Error() string {
	switch e.Reason {
	case ReasonShort:
		return fmt.Sprintf("bth: %d-byte packet is shorter than BTH+ICRC (%d bytes)", e.Len, e.Need)
	case ReasonTruncated:
		return fmt.Sprintf("bth: %s needs %d bytes of headers and ICRC, packet has %d", e.Opcode, e.Need, e.Len)
	case ReasonPadTooLarge:
		return fmt.Sprintf("bth: %s: pad count %d is larger than the %d-byte payload", e.Opcode, e.Need, e.Len)
	case ReasonUnexpectedPayload:
		return fmt.Sprintf("bth: %s carries no payload but has %d extra bytes", e.Opcode, e.Len)
	case ReasonBadVersion:
		return fmt.Sprintf("bth: transport header version %d, want 0", e.Need)
	case ReasonBadICRC:
		return fmt.Sprintf("bth: %s: bad ICRC", e.Opcode)
	case ReasonUnknownOpcode:
		return fmt.Sprintf("bth: unknown opcode %#02x", uint8(e.Opcode))
	case ReasonIPShort:
		return fmt.Sprintf("bth: %d-byte datagram is shorter than its IP and UDP headers (%d bytes)", e.Len, e.Need)
	case ReasonIPVersion:
		return fmt.Sprintf("bth: IP version %d, want 4 or 6", e.Need)
	case ReasonIPLength:
		return fmt.Sprintf("bth: IP header and total length (%d) do not fit the %d-byte datagram", e.Need, e.Len)
	case ReasonNotUDP:
		return fmt.Sprintf("bth: IP protocol %d is not UDP (17)", e.Need)
	case ReasonFragmented:
		return fmt.Sprintf("bth: fragmented IPv4 datagram (flags and offset %#04x)", e.Need)
	case ReasonUDPLength:
		return fmt.Sprintf("bth: UDP length %d, IP says %d", e.Need, e.Len)
	case ReasonNotRoCEPort:
		return fmt.Sprintf("bth: UDP destination port %d is not %d", e.Need, UDPPort)
	}
	return fmt.Sprintf("bth: %s: %s", e.Opcode, e.Reason)
}

// Packet is a checked view of the RoCE part of a datagram: BTH, extension
// headers, payload, pad and ICRC. Its zero value is an empty packet; make one
// with Parse (inbound) or Build (outbound).
type Packet struct {
	b  []byte
	op Opcode
}

// Parse checks that b is a well-formed transport packet: a known opcode,
// version 0, room for every header its opcode needs and for the ICRC, a pad
// count that fits the payload, and no payload on opcodes that carry none.
// It does not check the ICRC (that needs the IP and UDP headers; see
// VerifyICRC). Parse does not allocate on success.
func Parse(b []byte) (Packet, error) {
	if len(b) < BTHLen+ICRCLen {
		return Packet{}, &DecodeError{Reason: ReasonShort, Len: len(b), Need: BTHLen + ICRCLen}
	}
	h := BTH(b)
	op := h.Opcode()
	if !op.Valid() {
		return Packet{}, &DecodeError{Reason: ReasonUnknownOpcode, Opcode: op, Len: len(b)}
	}
	if v := h.TVer(); v != 0 {
		return Packet{}, &DecodeError{Reason: ReasonBadVersion, Opcode: op, Need: int(v)}
	}
	need := op.HdrLen() + ICRCLen
	if len(b) < need {
		return Packet{}, &DecodeError{Reason: ReasonTruncated, Opcode: op, Len: len(b), Need: need}
	}
	rest := len(b) - need
	if !op.Is(FlagPayload) && rest != 0 {
		return Packet{}, &DecodeError{Reason: ReasonUnexpectedPayload, Opcode: op, Len: rest}
	}
	if pad := h.PadCount(); pad > rest {
		return Packet{}, &DecodeError{Reason: ReasonPadTooLarge, Opcode: op, Len: rest, Need: pad}
	}
	return Packet{b: b, op: op}, nil
}

// PadFor is the pad count that brings a payload of n bytes to a multiple of
// four.
func PadFor(n int) int { return -n & 3 }

// PacketLen is the length of a packet of opcode op with an n-byte payload,
// pad and ICRC included.
func PacketLen(op Opcode, n int) int { return op.HdrLen() + n + PadFor(n) + ICRCLen }

// Build lays out a packet of opcode op with a payload of n bytes in buf,
// which must hold PacketLen(op, n) bytes: it writes the opcode, version 0
// and pad count, zeroes the pad and the ICRC, and returns the view for the
// caller to fill in the rest of the headers and the payload.
func Build(buf []byte, op Opcode, n int) (Packet, error) {
	total := PacketLen(op, n)
	if !op.Valid() {
		return Packet{}, &DecodeError{Reason: ReasonUnknownOpcode, Opcode: op}
	}
	if n > 0 && !op.Is(FlagPayload) {
		return Packet{}, &DecodeError{Reason: ReasonUnexpectedPayload, Opcode: op, Len: n}
	}
	if len(buf) < total {
		return Packet{}, &DecodeError{Reason: ReasonTruncated, Opcode: op, Len: len(buf), Need: total}
	}
	b := buf[:total]
	pad := PadFor(n)
	b[0] = byte(op)
	b[1] = byte(pad) << 4
	clear(b[op.HdrLen()+n:])
	return Packet{b: b, op: op}, nil
}

// Bytes returns the whole packet, BTH through ICRC.
func (p Packet) Bytes() []byte { return p.b }

// Len is the length of the whole packet.
func (p Packet) Len() int { return len(p.b) }

// Opcode of the packet.
func (p Packet) Opcode() Opcode { return p.op }

// BTH returns the base transport header.
func (p Packet) BTH() BTH { return BTH(p.b[:BTHLen]) }

func (p Packet) ext(h Header, n int) []byte {
	off := p.op.Offset(h)
	if off < 0 {
		return nil
	}
	return p.b[off : off+n : off+n]
}

// The extension header accessors return nil when the opcode does not carry
// the header; check Opcode().Has first where that matters.

func (p Packet) DETH() DETH                 { return p.ext(HdrDETH, DETHLen) }
func (p Packet) RETH() RETH                 { return p.ext(HdrRETH, RETHLen) }
func (p Packet) AtomicETH() AtomicETH       { return p.ext(HdrAtomicETH, AtomicETHLen) }
func (p Packet) AETH() AETH                 { return p.ext(HdrAETH, AETHLen) }
func (p Packet) AtomicAckETH() AtomicAckETH { return p.ext(HdrAtomicAckETH, AtomicAckETHLen) }
func (p Packet) ImmDt() ImmDt               { return p.ext(HdrImmDt, ImmDtLen) }
func (p Packet) IETH() IETH                 { return p.ext(HdrIETH, IETHLen) }

// Payload returns the data payload without pad and ICRC.
func (p Packet) Payload() []byte {
	end := len(p.b) - ICRCLen - p.BTH().PadCount()
	return p.b[p.op.HdrLen():end]
}

// PayloadLen is len(Payload()).
func (p Packet) PayloadLen() int {
	return len(p.b) - ICRCLen - p.BTH().PadCount() - p.op.HdrLen()
}

// ICRC returns the ICRC stored in the packet.
func (p Packet) ICRC() uint32 { return binary.LittleEndian.Uint32(p.b[len(p.b)-ICRCLen:]) }

// SetICRC stores v as the packet's ICRC.
func (p Packet) SetICRC(v uint32) { binary.LittleEndian.PutUint32(p.b[len(p.b)-ICRCLen:], v) }
