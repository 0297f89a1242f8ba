package ibudp

import "sync/atomic"

// TapPoint says where a port (or a fault injector over it) saw a packet.
type TapPoint uint8

const (
	// TapSent: sealed and handed to the kernel.
	TapSent TapPoint = iota + 1
	// TapReceived: received and its ICRC verified (see the icrc argument).
	TapReceived
	// TapICRCError: received with an ICRC that does not match; dropped.
	TapICRCError
	// TapFaultDropTX and TapFaultDropRX: a fault injector dropped the
	// packet on its way out or in; hdr is nil, the wire never carried it
	// (TX) or the engine never sees it (RX).
	TapFaultDropTX
	TapFaultDropRX
	// TapLinkMarkTX/RX and TapLinkDropTX/RX: a fault injector's
	// bottleneck link (fault.Faults.Link) marked the packet CE, or dropped
	// it at the tail of a full queue; only a LinkTap is told of them.
	TapLinkMarkTX
	TapLinkMarkRX
	TapLinkDropTX
	TapLinkDropRX
	// TapSentHeaders: sent as TapSent, but with its payload lent from
	// registered memory and not copied in for a PayloadTap that did not
	// want it: the payload bytes of roce (and an IPv6 UDP checksum over
	// them) are unspecified; headers, length and ICRC are the packet's.
	// A capture must not record it as the packet (pcap.Writer ignores it).
	TapSentHeaders
)

func (p TapPoint) String() string {
	switch p {
	case TapSent:
		return "sent"
	case TapReceived:
		return "received"
	case TapICRCError:
		return "icrc-error"
	case TapFaultDropTX:
		return "fault-drop-tx"
	case TapFaultDropRX:
		return "fault-drop-rx"
	case TapLinkMarkTX:
		return "link-mark-tx"
	case TapLinkMarkRX:
		return "link-mark-rx"
	case TapSentHeaders:
		return "sent-headers"
	case TapLinkDropTX:
		return "link-drop-tx"
	case TapLinkDropRX:
		return "link-drop-rx"
	}
	return "tap-point(?)"
}

// Tap is told of every packet a port sends or receives, as it was on the
// wire: hdr is its IP and UDP headers and roce its RoCE part, BTH through
// ICRC. In ModePacket hdr is what the port wrote or received; in ModeUDP,
// where the kernel writes and strips the headers, hdr is synthesized as
// Linux writes them for the port's socket (DF, TTL 64, IPv4 ID 0 on send,
// the UDP checksum the kernel computes over IPv6; on receive the ID the
// ICRC check found, TTL 64, UDP checksum 0 since the socket does not show
// it), so that the ICRC in roce checks against it. icrc says how a received packet's ICRC was checked.
// qpn is the local QP a sent packet left from (Buf.QPN), 0 on receive.
//
// Packet runs on the goroutine inside Send or Recv, with the port's lock
// held: it must not keep the slices, call the port, or block for long.
type Tap interface {
	Packet(at TapPoint, hdr, roce []byte, icrc ICRCStatus, qpn uint32)
}

// PayloadTap is a Tap that can say it does not read payloads: one whose
// WantsPayload reports false is handed sent packets whose payload is lent
// from registered memory (Buf.SetPayloadRef) without the payload being
// copied in first, as TapSentHeaders: the payload bytes of the roce it
// gets (and an IPv6 header's UDP checksum, which covers them) are
// unspecified; the headers, the length and the sealed ICRC are the
// packet's. rnic's trace reads only those; a capture wants the payload,
// and ignores TapSentHeaders should it start between the question and the
// packet.
type PayloadTap interface {
	Tap
	WantsPayload() bool
}

// LinkTap is a Tap that also wants a fault injector's bottleneck link's
// (fault.Link) marks and tail drops (TapLinkMarkTX/RX, TapLinkDropTX/RX) with the depth, in bytes, of
// the queue the packet met. Like Packet, LinkPacket must not keep roce or
// block.
type LinkTap interface {
	Tap
	LinkPacket(at TapPoint, roce []byte, depth int, qpn uint32)
}

// wantsPayload reports whether t needs a sent packet's payload.
func wantsPayload(t Tap) bool {
	pt, ok := t.(PayloadTap)
	return !ok || pt.WantsPayload()
}

// tapRef boxes a Tap for an atomic pointer.
type tapRef struct{ Tap }

// TapSlot holds a port's tap (or a fault injector's). Loading it is one
// atomic load, so a port without a tap pays a nil check per packet. The
// zero value holds none.
type TapSlot struct{ p atomic.Pointer[tapRef] }

// Set makes t the tap (nil: none).
func (s *TapSlot) Set(t Tap) {
	if t == nil {
		s.p.Store(nil)
		return
	}
	s.p.Store(&tapRef{t})
}

// Load returns the tap, nil if none.
func (s *TapSlot) Load() Tap {
	if r := s.p.Load(); r != nil {
		return r.Tap
	}
	return nil
}

// tapper is a port that takes a tap.
type tapper interface{ SetTap(Tap) }

// SetTap attaches t to port p (nil detaches it) and reports whether p
// takes taps: the ports Open returns and a fault injector over one of
// them (package fault) do; an injector passes the tap to the port it
// wraps and reports its own drops.
func SetTap(p Port, t Tap) bool {
	tp, ok := p.(tapper)
	if ok {
		tp.SetTap(t)
	}
	return ok
}

// SetTap attaches t to the port (SetTap above).
func (s *sockPort) SetTap(t Tap) { s.tap.Set(t) }
