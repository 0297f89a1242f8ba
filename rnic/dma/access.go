package dma

import "github.com/rnicd/rnicd/ib"

// validRegAccess reports whether access is a combination ibv_reg_mr accepts:
// only known flags, and remote write or remote atomic only together with local
// write (IBTA: a region the peer may modify must be locally writable;
// ibv_reg_mr returns EINVAL otherwise).
func validRegAccess(a ib.Access) bool {
	if a&^ib.AccessKnown != 0 {
		return false
	}
	if a&(ib.AccessRemoteWrite|ib.AccessRemoteAtomic) != 0 && a&ib.AccessLocalWrite == 0 {
		return false
	}
	return true
}
