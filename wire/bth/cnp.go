package bth

// The RoCEv2 Congestion Notification Packet (IBTA vol. 1, annex A17.9.3):
// what a notification point (the receiving NIC) sends back to the sending
// QP when a packet arrives marked ECN = CE, so that the sender's reaction
// point lowers its rate. It is a BTH with opcode 0x81 (CNP, transport
// prefix 100b) and BECN set, P_Key 0xFFFF, PSN 0, followed by 16 reserved
// bytes and the ICRC: 32 bytes of UDP payload, an IPv4 datagram of 60. It
// carries no source QP: the IP addresses and the destination QP name the
// flow (rnic/flowctl keys its reaction point on that QP).

// CNPPacketLen is the length of a CNP's RoCE part: BTH, 16 reserved bytes
// and ICRC.
const CNPPacketLen = BTHLen + CNPLen + ICRCLen

// CNPPKey is the P_Key of every CNP (annex A17.9.3: the default partition,
// full member), whatever the partition of the QP it is sent to.
const CNPPKey = 0xffff

// CNPDSCP is the DSCP NVIDIA's RNICs send CNPs with (mlx5 cnp_dscp,
// mlxconfig CNP_DSCP, default 48), so that a switch can give them a queue
// of their own; CNPs are never ECN-capable.
const CNPDSCP = 48

// BuildCNP lays out a CNP to QP destQP in buf, which must hold
// CNPPacketLen bytes, and returns its view. The ICRC is zero: seal it with
// Seal once the envelope is known.
func BuildCNP(buf []byte, destQP uint32) (Packet, error) {
	p, err := Build(buf, CNP, 0)
	if err != nil {
		return p, err
	}
	p.BTH().Encode(&BTHFields{Opcode: CNP, PKey: CNPPKey, BECN: true, DestQP: destQP})
	// Build zeroes only what follows the headers; the reserved bytes are
	// headers here.
	clear(p.b[BTHLen : BTHLen+CNPLen])
	return p, nil
}

// IsCNP reports whether p is a RoCEv2 CNP: opcode 0x81 with BECN set. A
// packet with opcode 0x81 and BECN clear is malformed as a CNP (annex
// A17.9.3 requires the bit); a reaction point counts and ignores it.
func (p Packet) IsCNP() bool {
	return p.op == CNP && p.BTH().BECN()
}

// IsCNP reports whether the decoded packet is a RoCEv2 CNP (see
// Packet.IsCNP).
func (r *RoCE) IsCNP() bool { return r.BTH.Opcode == CNP && r.BTH.BECN }
