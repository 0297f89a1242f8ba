package rnic

import (
	"net/netip"
	"sort"

	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/rnic/flowctl"
	"github.com/rnicd/rnicd/rnic/qpmgr"
	"github.com/rnicd/rnicd/wire/ibudp"
)

// Observer is the device's statistics and capture block, as a NIC's
// counters and port mirroring sit beside its data path: it reads what
// the engines count (per queue, added up here), the QPs' state under
// their locks, and the port's counters, and hangs the capture on the
// port (tap.go). Nothing on the data path calls it; the monitor, the
// host interface's listings and the tools do (Device.Observer).
type Observer struct {
	qps   *qpmgr.Table
	pipes *pipelines
	mcast *mcastTable
	tap   portTap
}

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
	// SQPosted counts the send WQEs posted since the QP was created (the
	// ring's producer index): the web view's WRs posted per second.
	SQPosted uint64
	// CC is the QP's congestion control: its current and target rate and
	// alpha (rnic/flowctl), zero while it has had no CNP.
	CC flowctl.QPState
}

// QPStatus is one QP's attributes and the engine's state behind them,
// taken together under the QP's lock: what listings show (QPInfo, the
// host interface's ListQPs).
type QPStatus struct {
	Attr                      ib.QPAttr
	SQPSN, UnaPSN, RQPSN      uint32 // as in QPInfo
	PathMTU                   int    // bytes; a UD QP's is the port's
	SQUsed, SQCap, SQInFlight int
	RQUsed                    int // of the SRQ when the QP uses one
	SQPosted                  uint64
	CC                        flowctl.QPState
}

// Status returns qp's status.
func (o *Observer) Status(qp *QP) QPStatus {
	qp.Lock()
	st := QPStatus{
		Attr: qp.Attr, SQPSN: qp.Req.PSN, UnaPSN: qp.Comp.PSN, RQPSN: qp.Resp.EPSN, PathMTU: qp.MTU(),
		SQUsed: qp.SQ.Len(), SQCap: qp.SQ.Cap(), SQInFlight: int(qp.SQ.Next - qp.SQ.Head),
		SQPosted: qp.SQ.Tail, CC: o.pipes.fc.State(&qp.FC),
	}
	st.Attr.State = qp.State()
	st.RQUsed = qp.Recv().Len() // an XRC target's queue is its request's (qpmgr.QP.Recv)
	qp.Unlock()
	return st
}

// QPInfo returns the QP table, in QPN order.
func (o *Observer) QPInfo() []QPInfo {
	qps := o.qps.All()
	sort.Slice(qps, func(i, j int) bool { return qps[i].QPN < qps[j].QPN })
	out := make([]QPInfo, 0, len(qps))
	for _, qp := range qps {
		st := o.Status(qp)
		in := QPInfo{
			QPN: qp.QPN, Type: qp.VerbsType().String(), State: st.Attr.State.String(),
			SQPSN: st.SQPSN, UnaPSN: st.UnaPSN, RQPSN: st.RQPSN,
			DestQPN: st.Attr.DestQPN, PathMTU: st.PathMTU,
			SQUsed: st.SQUsed, SQCap: st.SQCap, SQInFlight: st.SQInFlight, RQUsed: st.RQUsed, SQPosted: st.SQPosted, CC: st.CC,
		}
		if dest := st.Attr.AH.Addr(); dest.IsValid() && !dest.IsUnspecified() {
			in.Dest = dest
		}
		if qp.SRQ == nil {
			in.RQCap = qp.Caps.MaxRecvWR
		}
		out = append(out, in)
	}
	return out
}

// DoorbellDepth is the number of QPs waiting on the send pipeline's run
// list: rung doorbells and timer expiries not yet served.
func (o *Observer) DoorbellDepth() int {
	n := 0
	for _, q := range o.pipes.queues {
		q.mu.Lock()
		n += len(q.runq)
		q.mu.Unlock()
	}
	return n
}

// PortStats returns the counters of the device's port: of all its
// engines' sockets together.
func (o *Observer) PortStats() ibudp.Stats {
	var st ibudp.Stats
	for _, q := range o.pipes.queues {
		st.Add(q.port.Stats())
	}
	return st
}

// Counters returns the device's counters by name, the port's ICRC error
// count and the Flow Control Manager's (mlx5's names) among them.
func (o *Observer) Counters() map[string]uint64 {
	m := o.pipes.queues[0].counters.Snapshot()
	for _, q := range o.pipes.queues[1:] {
		for name, v := range q.counters.Snapshot() {
			m[name] += v
		}
	}
	m[ib.ICRCErrors.String()] = o.PortStats().RxICRCErrors
	o.pipes.fc.Counters().Each(func(name string, v uint64) { m[name] = v })
	return m
}

// Engines is the number of engines (queues) the device runs.
func (o *Observer) Engines() int { return len(o.pipes.queues) }

// EngineStats are one engine's counters.
type EngineStats struct {
	RxPackets  uint64 // packets its RX packet handler took from its socket
	TxPackets  uint64 // packets it handed its socket
	HostQueues int    // client rings it polls (QPs and SRQs)
}

// EngineStats returns each engine's counters, by engine.
func (o *Observer) EngineStats() []EngineStats {
	out := make([]EngineStats, len(o.pipes.queues))
	for i, q := range o.pipes.queues {
		out[i] = EngineStats{RxPackets: q.rxPackets.Load(), TxPackets: q.txPackets.Load()}
		if e := q.eng; e != nil {
			e.mu.Lock()
			out[i].HostQueues = len(e.hosts)
			e.mu.Unlock()
		}
	}
	return out
}

// CongestionControl is the name of the device's congestion control:
// "dcqcn" or "none".
func (o *Observer) CongestionControl() string { return o.pipes.fc.Name() }

// CCParams are the device's congestion-control parameters, by mlx5 name.
func (o *Observer) CCParams() flowctl.Params { return o.pipes.fc.Params() }

// McastGroups lists the groups QPs are attached to, sorted by address.
func (o *Observer) McastGroups() []McastGroup { return o.mcast.list() }

// SetCapture hands every packet the port sends and receives, as it was
// on the wire, to c (a pcap writer, say) until called again with nil.
func (o *Observer) SetCapture(c ibudp.Tap) {
	if c == nil {
		o.tap.capture.Store(nil)
	} else {
		o.tap.capture.Store(&captureRef{c})
	}
	o.updateTap()
}

// updateTap puts the device's tap on its port when it traces or
// captures, and takes it off otherwise, so that a port nobody watches
// pays one nil check per packet.
func (o *Observer) updateTap() {
	for _, q := range o.pipes.queues {
		if o.tap.probe == nil && o.tap.capture.Load() == nil {
			ibudp.SetTap(q.port, nil)
		} else {
			ibudp.SetTap(q.port, &o.tap)
		}
	}
}
