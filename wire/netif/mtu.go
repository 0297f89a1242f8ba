package netif

// rxeMaxHdrLen is what rxe reserves of the interface MTU for headers
// (RXE_MAX_HDR_LENGTH): Ethernet aside, IP, UDP, BTH, the largest extension
// headers and the ICRC fit in it.
const rxeMaxHdrLen = 80

// ActiveMTU is the IB MTU rxe runs on an interface of MTU ifMTU: ifMTU-80
// rounded down to 256, 512, 1024, 2048 or 4096, and 256 when even that does
// not fit (rxe_set_mtu). 1500 gives 1024, 9000 and loopback's 65536 give
// 4096.
func ActiveMTU(ifMTU int) int {
	v := ifMTU - rxeMaxHdrLen
	for m := 4096; m >= 256; m >>= 1 {
		if v >= m {
			return m
		}
	}
	return 256
}

// ValidIBMTU reports whether m is one of the IB MTUs.
func ValidIBMTU(m int) bool {
	switch m {
	case 256, 512, 1024, 2048, 4096:
		return true
	}
	return false
}

// MTUEnum is the verbs encoding of an IB MTU (IBV_MTU_256 = 1 ...
// IBV_MTU_4096 = 5), 0 if m is not an IB MTU.
func MTUEnum(m int) int {
	for e, v := 1, 256; v <= 4096; e, v = e+1, v<<1 {
		if m == v {
			return e
		}
	}
	return 0
}
