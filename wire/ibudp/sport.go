package ibudp

// RoCEv2 UDP source ports. The destination port is always 4791; the source
// port only spreads flows over paths (ECMP), so any value in
// 0xC000..0xFFFF is right. These give the values rxe picks, so that rnicd's
// packets look like rxe's in a capture.

const (
	sportMin  = 0xc000 // IB_ROCE_UDP_ENCAP_VALID_PORT_MIN
	flowLabel = 0xfffff
)

// SourcePortQPN is the source port rxe gives a QP when it is created (and
// keeps for UD QPs and QP1): 0xC000 plus a 14-bit multiplicative hash of the
// QPN.
func SourcePortQPN(qpn uint32) uint16 {
	const goldenRatio32 = 0x61c88647
	return sportMin | uint16((qpn*goldenRatio32)>>(32-14))
}

// SourcePortFlow is the source port ib_core derives for a connected QP from
// its path's flow label (rdma_get_udp_sport): if the label is 0, one is made
// from the two QPNs (rdma_calc_flow_label); its 20 bits are folded into 14.
func SourcePortFlow(fl, lqpn, rqpn uint32) uint16 {
	if fl == 0 {
		v := uint64(lqpn) * uint64(rqpn)
		v ^= v >> 20
		v ^= v >> 40
		fl = uint32(v) & flowLabel
	}
	fl &= flowLabel
	low, high := fl&0x3fff, fl&0xfc000
	low ^= high >> 14
	return sportMin | uint16(low)
}
