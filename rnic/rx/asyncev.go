package rx

import (
	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/wire/bth"
)

// responderEvent is the asynchronous event of a responder error that
// takes its QP to ERR, by the NAK it answers (IBTA 11.6.3.1, as mlx5
// tells them apart): an invalid request (opcode, sequence, length, a
// message too long) is QP_REQ_ERR, an access violation (R_Key, bounds,
// rights) QP_ACCESS_ERR, anything else (an operation the responder could
// not carry out) the catastrophic QP_FATAL.
func responderEvent(s bth.Syndrome) ib.EventType {
	switch s {
	case bth.NAKInvalidRequest, bth.NAKInvalidRDRequest:
		return ib.EventQPReqErr
	case bth.NAKRemoteAccessError:
		return ib.EventQPAccessErr
	}
	return ib.EventQPFatal
}
