package rnic

import (
	"time"

	"github.com/rnicd/rnicd/rnic/flowctl"
	"github.com/rnicd/rnicd/rnic/qpmgr"
	"github.com/rnicd/rnicd/rnic/trace"
)

// The device's side of the Flow Control Manager (rnic/flowctl): waking a
// paced QP and the trace of its reaction point; what /metrics and `rnic
// stat` show of it is the Observer's (CongestionControl, CCParams).

// pace is wqe.Engine.Paced: qp (locked) has work the pacer holds back
// for wait; its requester runs again then.
func (p *pipelines) pace(qp *qpmgr.QP, wait time.Duration) {
	if qp.FC.Wake == nil {
		qp.FC.Wake = time.AfterFunc(wait, func() { p.kick(qp) })
		return
	}
	qp.FC.Wake.Reset(wait)
}

// rateEvent is flowctl's Emit: a reaction point's step, as a trace event.
func (p *pipelines) rateEvent(qpn uint32, ev flowctl.Event) {
	if !p.probe.On() {
		return
	}
	e := trace.Event{Module: trace.ModFlowCtl, Step: trace.StepRate, QPN: qpn, Arg: uint32(ev.Kind),
		Aux: uint32(ev.Current / 1_000_000), Len: uint32(ev.Target / 1_000_000), WRID: uint64(ev.Alpha)}
	p.probe.Emit(e)
}
