package rnic

import (
	"net/netip"
	"sort"

	"github.com/rnicd/rnicd/rnic/flowctl"
	"github.com/rnicd/rnicd/wire/ibudp"
)

// QPInfo is one row of the device's QP table, as `rdma res show qp` and
// the web view show it.
type QPInfo struct {
	QPN     uint32
	Type    string // RC, UC, UD
	State   string // RESET, INIT, RTR, RTS, SQD, SQE, ERR
	SQPSN   uint32 // next new PSN the requester will send
	UnaPSN  uint32 // oldest PSN not yet acknowledged (the completer's)
	RQPSN   uint32 // PSN the responder expects next
	DestQPN uint32
	Dest    netip.Addr // the peer, for connected QPs
	PathMTU int
	// Ring occupancy: WQEs posted and not completed, and the ring size;
	// WQEs sent and not yet acknowledged; receive WRs posted (of the SRQ
	// when the QP uses one, whose size is then not shown: RQCap 0).
	SQUsed, SQCap, SQInFlight int
	RQUsed, RQCap             int
	// CC is the QP's congestion control: its current and target rate and
	// alpha (rnic/flowctl), zero while it has had no CNP.
	CC flowctl.QPState
}

// QPInfo returns the QP table, in QPN order.
func (d *Device) QPInfo() []QPInfo {
	qps := d.qps.All()
	sort.Slice(qps, func(i, j int) bool { return qps[i].QPN < qps[j].QPN })
	out := make([]QPInfo, 0, len(qps))
	for _, qp := range qps {
		qp.Lock()
		in := QPInfo{
			QPN: qp.QPN, Type: qp.Type.String(), State: qp.State().String(),
			SQPSN: qp.Req.PSN, UnaPSN: qp.Comp.PSN, RQPSN: qp.Resp.EPSN,
			DestQPN: qp.Attr.DestQPN, PathMTU: qp.MTU(),
			SQUsed: qp.SQ.Len(), SQCap: qp.SQ.Cap(), SQInFlight: int(qp.SQ.Next - qp.SQ.Head),
			CC: d.fc.State(&qp.FC),
		}
		if qp.Dest().IsValid() && !qp.Dest().IsUnspecified() {
			in.Dest = qp.Dest()
		}
		qp.Unlock()
		in.RQUsed = qp.Recv().Len()
		if qp.SRQ == nil {
			in.RQCap = qp.Caps.MaxRecvWR
		}
		out = append(out, in)
	}
	return out
}

// DoorbellDepth is the number of QPs waiting on the send pipeline's run
// list: rung doorbells and timer expiries not yet served.
func (d *Device) DoorbellDepth() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.runq)
}

// PortStats returns the counters of the device's port.
func (d *Device) PortStats() ibudp.Stats { return d.port.Stats() }
