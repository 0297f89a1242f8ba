package ibudp

// ECN is the Explicit Congestion Notification codepoint of an IP packet
// (RFC 3168 section 5): the two low bits of the IPv4 TOS byte and of the
// IPv6 traffic class, which Buf.TOS holds whole. DCQCN runs on it: a RoCEv2
// sender marks its data ECN-capable, a switch whose queue grows marks such
// packets CE instead of dropping them, and the receiver answers a CE packet
// with a CNP.
//
// The ICRC masks the whole TOS / traffic class (IBA A17.8.2), so a switch
// may rewrite the codepoint in flight and the packet still verifies; a port
// reports the codepoint a packet arrived with, after any such rewrite.
type ECN uint8

// The four codepoints.
const (
	// NotECT: not ECN-capable; a switch drops rather than marks it. ACKs,
	// NAKs and CNPs are sent so, and all packets when no congestion
	// control runs.
	NotECT ECN = 0b00
	// ECT1: ECN-capable, the codepoint L4S uses; RoCEv2 NICs do not send it.
	ECT1 ECN = 0b01
	// ECT0: ECN-capable; RoCEv2 data packets are sent so when DCQCN is on,
	// as ConnectX sends them.
	ECT0 ECN = 0b10
	// CE: congestion experienced, set by a switch on an ECN-capable packet.
	CE ECN = 0b11
)

// ecnMask selects the ECN field of a TOS byte.
const ecnMask = 0b11

func (e ECN) String() string {
	switch e {
	case NotECT:
		return "Not-ECT"
	case ECT1:
		return "ECT(1)"
	case ECT0:
		return "ECT(0)"
	case CE:
		return "CE"
	}
	return "ecn(?)"
}

// ECN returns the codepoint of b's TOS: as received, or as b will be sent.
func (b *Buf) ECN() ECN { return ECN(b.TOS & ecnMask) }

// SetECN sets the codepoint b is sent with, keeping the DSCP (the traffic
// class of the QP's address vector) in the upper six bits of TOS.
func (b *Buf) SetECN(e ECN) { b.TOS = b.TOS&^ecnMask | uint8(e)&ecnMask }
