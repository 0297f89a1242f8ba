package verbs

import (
	"net/netip"

	"github.com/rnicd/rnicd/abi"
)

// CMIDInfo is one CM ID of the device as `rdma res show cm_id` shows it.
type CMIDInfo struct {
	IDN      uint32 // cm-idn
	QPN      uint32 // the QP bound by connect or accept; 0: none
	State    string // rdma_cm's: IDLE, LISTEN, CONNECT, DISCONNECT
	PS       uint16 // port space (0x0106 TCP, 0x0111 UDP, ...)
	PID      uint32
	Comm     string
	Src, Dst netip.AddrPort // invalid: not known to the daemon
}

// CMIDs lists every CM ID of the device, other clients' among them, in
// cm-idn order.
func (c *Context) CMIDs() ([]CMIDInfo, error) {
	var out []CMIDInfo
	from := uint32(0)
	for {
		var r abi.ListCMIDsReply
		if _, err := c.call(abi.KindListCMIDs, &abi.ListCMIDsReq{From: from}, nil, &r); err != nil {
			return nil, err
		}
		for _, row := range r.Rows {
			out = append(out, CMIDInfo(row))
		}
		if !r.More {
			return out, nil
		}
		from = r.Next
	}
}
