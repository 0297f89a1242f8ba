package bth

// PSNs are 24-bit serial numbers (IBTA 9.7.1): they wrap, so they are
// compared by the sign of their 24-bit difference, never with < directly.

// PSNDiff returns a - b as a signed distance in the 24-bit PSN space, in
// [-2^23, 2^23).
func PSNDiff(a, b uint32) int32 { return int32((a-b)<<8) >> 8 }

// PSNAdd returns psn + n modulo 2^24.
func PSNAdd(psn uint32, n int) uint32 { return (psn + uint32(n)) & PSNMask }
