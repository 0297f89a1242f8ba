package rnic

import (
	"encoding/binary"
	"sync/atomic"

	"github.com/rnicd/rnicd/rnic/trace"
	"github.com/rnicd/rnicd/wire/bth"
	"github.com/rnicd/rnicd/wire/ibudp"
)

// portTap is what the device hangs on its port when it traces or
// captures: it turns the packets the port sees into the port's trace
// events (ICRC, transmit, receive, ICRC check, and the fault injector's
// drops) and hands them to the capture.
type portTap struct {
	probe   *trace.Probe
	capture atomic.Pointer[captureRef]
}

type captureRef struct{ ibudp.Tap }

func (t *portTap) Packet(at ibudp.TapPoint, hdr, roce []byte, icrc ibudp.ICRCStatus, qpn uint32) {
	if c := t.capture.Load(); c != nil {
		c.Packet(at, hdr, roce, icrc, qpn)
	}
	if !t.probe.On() || len(roce) < bth.BTHLen+bth.ICRCLen {
		return
	}
	e := trace.Event{Module: trace.ModPort, Opcode: bth.Opcode(roce[0]),
		DestQPN: uint32(roce[5])<<16 | uint32(roce[6])<<8 | uint32(roce[7]),
		PSN:     uint32(roce[9])<<16 | uint32(roce[10])<<8 | uint32(roce[11]),
		Len:     uint32(len(hdr) + len(roce))}
	if e.Opcode.Has(bth.HdrAETH) && len(roce) >= bth.BTHLen+bth.AETHLen+bth.ICRCLen {
		e.Aux = uint32(roce[bth.BTHLen]) // the AETH syndrome: ACK, NAK or RNR NAK
	}
	switch at {
	case ibudp.TapSent, ibudp.TapSentHeaders:
		e.QPN = qpn // the QP it left from, which only the sender knows
		e.Step, e.Arg = trace.StepICRC, binary.LittleEndian.Uint32(roce[len(roce)-bth.ICRCLen:])
		t.probe.Emit(e)
		e.Step, e.Arg = trace.StepTransmit, 0
		t.probe.Emit(e)
	case ibudp.TapReceived, ibudp.TapICRCError:
		e.QPN = e.DestQPN
		e.Step = trace.StepReceive
		t.probe.Emit(e)
		e.Step, e.Arg = trace.StepICRCCheck, uint32(icrc)
		if at == ibudp.TapICRCError {
			e.Arg = trace.ICRCBad
		}
		t.probe.Emit(e)
	case ibudp.TapFaultDropTX, ibudp.TapFaultDropRX:
		e.Module, e.Step, e.Len = trace.ModFault, trace.StepFaultDrop, uint32(len(roce))
		e.QPN = qpn
		if at == ibudp.TapFaultDropRX {
			e.QPN, e.Arg = e.DestQPN, 1
		}
		t.probe.Emit(e)
	}
}

// WantsPayload reports whether a capture is on: the trace reads only a
// packet's headers, length and ICRC, so without a capture the port may
// send payloads from registered memory without copying them in for the
// tap (ibudp.PayloadTap).
func (t *portTap) WantsPayload() bool {
	c := t.capture.Load()
	if c == nil {
		return false
	}
	// A capture that says when it wants payloads is asked; any other
	// wants them all.
	if pt, ok := c.Tap.(ibudp.PayloadTap); ok {
		return pt.WantsPayload()
	}
	return true
}

// LinkPacket turns the fault injector's bottleneck link's marks and tail
// drops into trace events, with the depth of the queue they met.
func (t *portTap) LinkPacket(at ibudp.TapPoint, roce []byte, depth int, qpn uint32) {
	if !t.probe.On() || len(roce) < bth.BTHLen+bth.ICRCLen {
		return
	}
	e := trace.Event{Module: trace.ModFault, Opcode: bth.Opcode(roce[0]),
		DestQPN: uint32(roce[5])<<16 | uint32(roce[6])<<8 | uint32(roce[7]),
		PSN:     uint32(roce[9])<<16 | uint32(roce[10])<<8 | uint32(roce[11]),
		Len:     uint32(len(roce)), Aux: uint32(depth), Step: trace.StepLinkMark, QPN: qpn}
	switch at {
	case ibudp.TapLinkDropTX, ibudp.TapLinkDropRX:
		e.Step = trace.StepLinkDrop
	}
	if at == ibudp.TapLinkMarkRX || at == ibudp.TapLinkDropRX {
		e.QPN, e.Arg = e.DestQPN, 1
	}
	t.probe.Emit(e)
}
