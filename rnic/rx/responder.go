package rx

import (
	"encoding/binary"
	"errors"
	"net/netip"

	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/rnic/dma"
	"github.com/rnicd/rnicd/rnic/qpmgr"
	"github.com/rnicd/rnicd/rnic/trace"
	"github.com/rnicd/rnicd/wire/bth"
	"github.com/rnicd/rnicd/wire/ibudp"
)

// Responder is the responder of one device (IBTA 9.7.5; rxe_resp.c): it
// takes the requests that arrive at a QP as their target, consumes its
// receive WQEs, carries out SENDs, WRITEs, READs and atomics, and answers
// them through its Acker. It owns the QP's responder state,
// qpmgr.QP.Resp; it never touches the completer's, qpmgr.QP.Comp, nor the
// requester's (roles_test.go holds it to that).
//
// All its methods run with the QP locked, on the receive pipeline's
// goroutine, but for the Acker's Release, Expire and SendHeld.
type Responder struct {
	DMA      *dma.Table
	Counters *qpmgr.Counters
	// LocalAddr is the port's address, the destination in the GRH of UD
	// receives.
	LocalAddr netip.Addr
	// Trace is the device's trace probe, nil when it traces nothing.
	Trace *trace.Probe
	// Ack is the responder's ACK: every ACK and NAK leaves by it.
	Ack Acker
	// XRCSRQs are the device's XRC SRQs, for XRC targets (xrc.go).
	XRCSRQs *qpmgr.XRCSRQTable
}

// respond hands a request to the responder of qp's transport
// (rxe_responder). The QP lock is held.
func (r *Responder) respond(qp *qpmgr.QP, p bth.Packet, b *ibudp.Buf, tx qpmgr.TX) {
	if qp.XRC == ib.QPTypeXRCRecv && !r.xrcTarget(qp, p, tx) {
		return
	}
	switch qp.Type {
	case ib.QPTypeRC:
		r.respondRC(qp, p, tx)
	case ib.QPTypeUC:
		r.respondUC(qp, p)
	case ib.QPTypeUD:
		r.respondUD(qp, p, b)
	}
}

// respondRC is the RC responder (IBTA 9.7.5.1). The QP lock is held.
func (r *Responder) respondRC(qp *qpmgr.QP, p bth.Packet, tx qpmgr.TX) {
	rs := &qp.Resp
	psn := p.BTH().PSN()
	d := bth.PSNDiff(psn, rs.EPSN)
	if r.Trace.On() {
		r.tracePSN(qp, p, d)
	}
	switch {
	case d > 0:
		// A gap: NAK it, drop everything until the expected PSN comes
		// (IBTA 9.7.5.1.2, C9-95). The NAK goes again if the gap
		// outlives the round trip once it went quiet (Acker.nakAgain,
		// Acker.quietGap).
		r.Counters.Inc(ib.OutOfSeqRequest)
		r.Ack.gap(qp, tx)
		return
	case d < 0:
		r.duplicate(qp, p, tx)
		return
	}
	r.Ack.inSequence(qp)
	op := p.Opcode()
	if syn, ok := r.checkRequest(qp, p); !ok {
		r.fatal(qp, tx, syn, psn, ib.WCRemInvReqErr)
		return
	}
	switch {
	case op.Is(bth.FlagRead):
		r.read(qp, p, tx)
		return
	case op.Is(bth.FlagAtomic):
		r.atomic(qp, p, tx)
		return
	case op.Is(bth.FlagSend):
		if !r.send(qp, p, tx) {
			return
		}
	case op.Is(bth.FlagWrite):
		if !r.write(qp, p, tx) {
			return
		}
	}
	rs.EPSN = bth.PSNAdd(psn, 1)
	if op.Is(bth.FlagLast) || op.Is(bth.FlagOnly) {
		rs.MSN = (rs.MSN + 1) & bth.PSNMask
		rs.InMsg = 0
	}
	if p.BTH().AckReq() {
		r.Ack.deferAck(qp, psn)
	}
}

// completeRecv completes the receive WQE wr with c, telling the trace.
// The CQE is written from wr's wr_id and c (qpmgr.CQ.PushRecv): no WC is
// made on the way. It reports false if the CQE found the CQ full: the
// QP is in ERR and the request goes unacknowledged, as in rxe.
func (r *Responder) completeRecv(qp *qpmgr.QP, wr *ib.RecvWR, c *qpmgr.RecvCompletion) bool {
	if r.Trace.On() {
		r.Trace.Emit(qpmgr.RecvCompletionEvent(qp, wr.WRID, c))
	}
	return qp.CompleteRecv(wr, c)
}

// tracePSN tells the trace of the responder's PSN check: d is the PSN's
// distance from the expected one.
func (r *Responder) tracePSN(qp *qpmgr.QP, p bth.Packet, d int32) {
	v := trace.PSNOk
	switch {
	case d > 0:
		v = trace.PSNOutOfOrder
	case d < 0:
		v = trace.PSNDuplicate
	}
	r.Trace.Emit(trace.Event{Module: trace.ModRX, Step: trace.StepPSNCheck, QPN: qp.QPN, PSN: p.BTH().PSN(),
		Opcode: p.Opcode(), Arg: uint32(v), Aux: qp.Resp.EPSN})
}

// checkRequest checks the opcode sequence, the QP's remote access flags
// and the packet length (rxe: check_op_seq, check_op_valid, check_length).
func (r *Responder) checkRequest(qp *qpmgr.QP, p bth.Packet) (bth.Syndrome, bool) {
	op := p.Opcode()
	rs := &qp.Resp
	kind := op.Info().Flags & (bth.FlagSend | bth.FlagWrite)
	cont := op.Is(bth.FlagMiddle) || op.Is(bth.FlagLast)
	if rs.InMsg != 0 && (!cont || kind != rs.InMsg) || rs.InMsg == 0 && cont {
		return bth.NAKInvalidRequest, false
	}
	acc := qp.Attr.AccessFlags
	switch {
	case op.Is(bth.FlagWrite) && acc&ib.AccessRemoteWrite == 0,
		op.Is(bth.FlagRead) && acc&ib.AccessRemoteRead == 0,
		op.Is(bth.FlagAtomic) && acc&ib.AccessRemoteAtomic == 0:
		return bth.NAKInvalidRequest, false
	}
	n, mtu := p.PayloadLen(), qp.MTU()
	switch {
	case op.Is(bth.FlagOnly):
		return bth.NAKInvalidRequest, n <= mtu
	case op.Is(bth.FlagFirst), op.Is(bth.FlagMiddle):
		return bth.NAKInvalidRequest, n == mtu
	case op.Is(bth.FlagLast):
		return bth.NAKInvalidRequest, n > 0 && n <= mtu
	}
	return 0, true
}

// fatal answers a request the responder cannot carry out: a NAK, the
// receive WQE in progress completed in error, and the QP to ERR (IBTA
// 9.9.3.1, class B and C errors).
func (r *Responder) fatal(qp *qpmgr.QP, tx qpmgr.TX, s bth.Syndrome, psn uint32, st ib.WCStatus) {
	r.Ack.nak(qp, tx, s, psn)
	if qp.Resp.HaveWQE {
		r.completeRecv(qp, &qp.Resp.WQE, &qpmgr.RecvCompletion{Status: st, Opcode: ib.WCRecv})
		qp.Resp.HaveWQE = false
	}
	qp.EnterErrorFor(responderEvent(s))
}

// takeWQE makes sure a receive WQE is at hand for a SEND or a WRITE with
// immediate; without one an RC responder sends an RNR NAK.
func (r *Responder) takeWQE(qp *qpmgr.QP, tx qpmgr.TX, psn uint32) bool {
	rs := &qp.Resp
	if rs.HaveWQE {
		return true
	}
	wr, ok := qp.Recv().Pop()
	if !ok {
		r.Counters.Inc(ib.SendRNRErr)
		r.Ack.rnrNAK(qp, tx, psn)
		return false
	}
	rs.WQE, rs.HaveWQE = wr, true
	return true
}

// send places one SEND packet into the receive WQE.
func (r *Responder) send(qp *qpmgr.QP, p bth.Packet, tx qpmgr.TX) bool {
	rs := &qp.Resp
	op, psn := p.Opcode(), p.BTH().PSN()
	if !r.takeWQE(qp, tx, psn) {
		return false
	}
	if op.Is(bth.FlagFirst) || op.Is(bth.FlagOnly) {
		rs.Offset = 0
	}
	payload := p.Payload()
	if err := r.DMA.Scatter(qp.PD, rs.WQE.SGL, rs.Offset, payload); err != nil {
		st, s := ib.WCLocProtErr, bth.NAKRemoteOpError
		if rs.Offset+len(payload) > sglLen(rs.WQE.SGL) {
			st, s = ib.WCLocLenErr, bth.NAKInvalidRequest // C9-49: message too long
		}
		r.fatal(qp, tx, s, psn, st)
		return false
	}
	if r.Trace.On() {
		traceDMAWrite(r.Trace, qp, p, rs.WQE.WRID, len(payload), rs.Offset, true)
	}
	rs.Offset += len(payload)
	if op.Is(bth.FlagFirst) {
		rs.InMsg = bth.FlagSend
	}
	if op.Is(bth.FlagLast) || op.Is(bth.FlagOnly) {
		c := qpmgr.RecvCompletion{Opcode: ib.WCRecv, ByteLen: uint32(rs.Offset), Solicited: p.BTH().SolicitedEvent()}
		if op.Is(bth.FlagImm) {
			c.Flags, c.Imm = ib.WCFlagWithImm, p.ImmDt().Imm()
		}
		if op.Is(bth.FlagInvalidate) {
			rkey := p.IETH().RKey()
			c.Flags, c.Imm = ib.WCFlagWithInv, rkey
			if err := r.DMA.Invalidate(qp.PD, rkey); err != nil {
				r.fatal(qp, tx, bth.NAKInvalidRequest, psn, ib.WCRemInvReqErr)
				return false
			}
		}
		rs.HaveWQE = false
		r.Counters.Inc(ib.RDMARecvs)
		return r.completeRecv(qp, &rs.WQE, &c)
	}
	return true
}

// write places one RDMA WRITE packet into the region its RETH named.
func (r *Responder) write(qp *qpmgr.QP, p bth.Packet, tx qpmgr.TX) bool {
	rs := &qp.Resp
	op, psn := p.Opcode(), p.BTH().PSN()
	last := op.Is(bth.FlagLast) || op.Is(bth.FlagOnly)
	if op.Is(bth.FlagImm) && !r.takeWQE(qp, tx, psn) {
		return false
	}
	if op.Has(bth.HdrRETH) {
		reth := p.RETH()
		rs.WriteVA, rs.WriteRKey, rs.WriteLen, rs.Offset = reth.VA(), reth.RKey(), reth.DMALength(), 0
		if _, err := r.DMA.Remote(qp.PD, qp.QPN, rs.WriteRKey, rs.WriteVA, rs.WriteLen, ib.AccessRemoteWrite); err != nil {
			r.fatal(qp, tx, bth.NAKRemoteAccessError, psn, ib.WCRemAccessErr)
			return false
		}
	}
	n := p.PayloadLen()
	if uint64(rs.Offset)+uint64(n) > uint64(rs.WriteLen) || last && uint64(rs.Offset+n) != uint64(rs.WriteLen) {
		r.fatal(qp, tx, bth.NAKInvalidRequest, psn, ib.WCRemInvReqErr) // C9-49: length mismatch
		return false
	}
	if n > 0 {
		dst, err := r.DMA.Remote(qp.PD, qp.QPN, rs.WriteRKey, rs.WriteVA+uint64(rs.Offset), uint32(n), ib.AccessRemoteWrite)
		if err != nil {
			r.fatal(qp, tx, bth.NAKRemoteAccessError, psn, ib.WCRemAccessErr)
			return false
		}
		copy(dst, p.Payload())
		if r.Trace.On() {
			traceDMAWrite(r.Trace, qp, p, 0, n, rs.Offset, false)
		}
	}
	rs.Offset += n
	if op.Is(bth.FlagFirst) {
		rs.InMsg = bth.FlagWrite
	}
	if last && op.Is(bth.FlagImm) {
		rs.HaveWQE = false
		r.Counters.Inc(ib.RDMARecvs)
		return r.completeRecv(qp, &rs.WQE, &qpmgr.RecvCompletion{Opcode: ib.WCRecvRDMAWithImm, ByteLen: rs.WriteLen,
			Flags: ib.WCFlagWithImm, Imm: p.ImmDt().Imm(), Solicited: p.BTH().SolicitedEvent()})
	}
	return true
}

// read serves a new RDMA READ request and keeps it for replay.
func (r *Responder) read(qp *qpmgr.QP, p bth.Packet, tx qpmgr.TX) {
	rs := &qp.Resp
	psn, reth := p.BTH().PSN(), p.RETH()
	va, rkey, n := reth.VA(), reth.RKey(), reth.DMALength()
	if n > ib.MaxMsgSize {
		r.fatal(qp, tx, bth.NAKInvalidRequest, psn, ib.WCRemInvReqErr)
		return
	}
	if _, err := r.DMA.Remote(qp.PD, qp.QPN, rkey, va, n, ib.AccessRemoteRead); err != nil {
		r.fatal(qp, tx, bth.NAKRemoteAccessError, psn, ib.WCRemAccessErr)
		return
	}
	npkts := qpmgr.NumPkts(ib.WRRDMARead, int(n), qp.MTU())
	rs.MSN = (rs.MSN + 1) & bth.PSNMask // the MSN counts the READ when it arrives
	res := r.newResource(qp)
	*res = qpmgr.RespResource{Valid: true, PSN: psn, LastPSN: bth.PSNAdd(psn, npkts-1),
		VA: va, RKey: rkey, Len: n, MSN: rs.MSN}
	rs.EPSN = bth.PSNAdd(psn, npkts)
	r.readResponses(qp, tx, res, psn, va, n)
}

// newResource takes the oldest slot of the replay ring (rxe: resp.res_head).
func (r *Responder) newResource(qp *qpmgr.QP) *qpmgr.RespResource {
	rs := &qp.Resp
	res := &rs.Resources[rs.NextRes]
	rs.NextRes = (rs.NextRes + 1) % len(rs.Resources)
	return res
}

// readResponses sends the READ response packets for n bytes at va, the
// first with PSN psn: AETH on FIRST, LAST and ONLY (IBTA 9.7.5.1.5).
func (r *Responder) readResponses(qp *qpmgr.QP, tx qpmgr.TX, res *qpmgr.RespResource, psn uint32, va uint64, n uint32) {
	mtu := uint32(qp.MTU())
	off := uint32(0)
	for first := true; first || off < n; first = false {
		k := min(mtu, n-off)
		last := off+k == n
		op := bth.RCRDMAReadResponseMiddle
		switch {
		case first && last:
			op = bth.RCRDMAReadResponseOnly
		case first:
			op = bth.RCRDMAReadResponseFirst
		case last:
			op = bth.RCRDMAReadResponseLast
		}
		src, err := r.DMA.Remote(qp.PD, qp.QPN, res.RKey, va+uint64(off), k, ib.AccessRemoteRead)
		if err != nil { // the region went away under the READ
			r.fatal(qp, tx, bth.NAKRemoteAccessError, psn, ib.WCRemAccessErr)
			return
		}
		b, p := response(qp, tx, op, int(k), psn)
		if op.Has(bth.HdrAETH) {
			p.AETH().Encode(bth.ACK(bth.CreditsInvalid), res.MSN)
		}
		copy(p.Payload(), src)
		if r.Trace.On() {
			r.Trace.Emit(trace.Event{Module: trace.ModDMA, Step: trace.StepDMARead, QPN: qp.QPN, PSN: psn,
				Opcode: op, Len: k, Arg: off})
		}
		r.Counters.Inc(ib.SentPkts)
		tx.Send(b)
		off += k
		psn = bth.PSNAdd(psn, 1)
	}
}

// atomic executes a new atomic request and keeps its result for replay.
func (r *Responder) atomic(qp *qpmgr.QP, p bth.Packet, tx qpmgr.TX) {
	rs := &qp.Resp
	psn, a := p.BTH().PSN(), p.AtomicETH()
	var orig uint64
	var err error
	if p.Opcode().Operation() == bth.RCCompareSwap { // or XRC's
		orig, err = r.DMA.AtomicCompareSwap(qp.PD, qp.QPN, a.RKey(), a.VA(), a.CompareData(), a.SwapAddData())
	} else {
		orig, err = r.DMA.AtomicFetchAdd(qp.PD, qp.QPN, a.RKey(), a.VA(), a.SwapAddData())
	}
	switch {
	case errors.Is(err, dma.ErrAlign):
		r.fatal(qp, tx, bth.NAKInvalidRequest, psn, ib.WCRemInvReqErr) // C9-76: misaligned atomic
		return
	case err != nil:
		r.fatal(qp, tx, bth.NAKRemoteAccessError, psn, ib.WCRemAccessErr)
		return
	}
	rs.MSN = (rs.MSN + 1) & bth.PSNMask
	res := r.newResource(qp)
	*res = qpmgr.RespResource{Valid: true, Atomic: true, PSN: psn, LastPSN: psn, OrigData: orig, MSN: rs.MSN}
	rs.EPSN = bth.PSNAdd(psn, 1)
	sendAtomicAck(qp, tx, res)
}

func sendAtomicAck(qp *qpmgr.QP, tx qpmgr.TX, res *qpmgr.RespResource) {
	b, p := response(qp, tx, bth.RCAtomicAcknowledge, 0, res.PSN)
	p.AETH().Encode(bth.ACK(bth.CreditsInvalid), res.MSN)
	p.AtomicAckETH().Encode(res.OrigData)
	qp.Counters.Inc(ib.SentPkts)
	tx.Send(b)
}

// duplicate answers a request whose PSN is behind the expected one (IBTA
// 9.7.5.1.1; rxe: duplicate_request): SENDs and WRITEs are ACKed again,
// READs served again, atomics answered from the replay ring, never
// executed twice.
func (r *Responder) duplicate(qp *qpmgr.QP, p bth.Packet, tx qpmgr.TX) {
	r.Counters.Inc(ib.DuplicateRequest)
	psn := p.BTH().PSN()
	op := p.Opcode()
	if !op.Is(bth.FlagRead) && !op.Is(bth.FlagAtomic) {
		r.Ack.deferAck(qp, bth.PSNAdd(qp.Resp.EPSN, -1))
		return
	}
	for i := range qp.Resp.Resources {
		res := &qp.Resp.Resources[i]
		if !res.Valid || res.Atomic != op.Is(bth.FlagAtomic) ||
			bth.PSNDiff(psn, res.PSN) < 0 || bth.PSNDiff(psn, res.LastPSN) > 0 {
			continue
		}
		if res.Atomic {
			if psn == res.PSN {
				sendAtomicAck(qp, tx, res)
			}
			return
		}
		// A retried READ may ask for the tail only: serve what its RETH
		// says, with the PSNs the original gave those bytes.
		reth := p.RETH()
		end := uint64(res.VA) + uint64(res.Len)
		off := uint64(bth.PSNDiff(psn, res.PSN)) * uint64(qp.MTU())
		if reth.RKey() != res.RKey || reth.VA() != res.VA+off || uint64(reth.VA())+uint64(reth.DMALength()) != end {
			return // not the same READ: drop
		}
		r.readResponses(qp, tx, res, psn, reth.VA(), reth.DMALength())
		return
	}
	// Too old to replay: the replay ring holds max_dest_rd_atomic
	// requests. Dropped; the requester times out.
	r.Counters.Inc(ib.DropUnexpectedResp)
}

// respondUC is the UC responder: like RC without ACKs, NAKs or replay; a
// message broken by a lost packet is dropped whole (IBTA 9.8.3).
func (r *Responder) respondUC(qp *qpmgr.QP, p bth.Packet) {
	rs := &qp.Resp
	op, psn := p.Opcode(), p.BTH().PSN()
	start := op.Is(bth.FlagFirst) || op.Is(bth.FlagOnly)
	if psn != rs.EPSN || rs.UCDrop {
		// Resynchronise on the packet; a message continues only if its
		// earlier packets all arrived.
		rs.InMsg, rs.Offset = 0, 0
		rs.UCDrop = !start
	}
	rs.EPSN = bth.PSNAdd(psn, 1)
	if rs.UCDrop {
		r.Counters.Inc(ib.DropUCMessage)
		return
	}
	if start { // a new message; the previous one may have lost its end
		rs.InMsg, rs.Offset = 0, 0
	}
	if _, ok := r.checkRequest(qp, p); !ok {
		r.ucDrop(qp, start)
		return
	}
	last := op.Is(bth.FlagLast) || op.Is(bth.FlagOnly)
	if op.Is(bth.FlagSend) || op.Is(bth.FlagImm) {
		if !rs.HaveWQE {
			wr, ok := qp.Recv().Pop()
			if !ok {
				r.Counters.Inc(ib.DropNoRecvWQE)
				r.ucDrop(qp, !last)
				return
			}
			rs.WQE, rs.HaveWQE = wr, true
		}
	}
	if op.Has(bth.HdrRETH) {
		reth := p.RETH()
		rs.WriteVA, rs.WriteRKey, rs.WriteLen, rs.Offset = reth.VA(), reth.RKey(), reth.DMALength(), 0
	}
	n := p.PayloadLen()
	var err error
	if op.Is(bth.FlagSend) {
		err = r.DMA.Scatter(qp.PD, rs.WQE.SGL, rs.Offset, p.Payload())
	} else if uint64(rs.Offset)+uint64(n) > uint64(rs.WriteLen) {
		err = dma.ErrBounds
	} else if n > 0 {
		var dst []byte
		dst, err = r.DMA.Remote(qp.PD, qp.QPN, rs.WriteRKey, rs.WriteVA+uint64(rs.Offset), uint32(n), ib.AccessRemoteWrite)
		copy(dst, p.Payload())
	}
	if err != nil {
		r.ucDrop(qp, !last)
		return
	}
	rs.Offset += n
	if !last {
		rs.InMsg = op.Info().Flags & (bth.FlagSend | bth.FlagWrite)
		return
	}
	rs.InMsg = 0
	if rs.HaveWQE && (op.Is(bth.FlagSend) || op.Is(bth.FlagImm)) {
		c := qpmgr.RecvCompletion{Opcode: ib.WCRecv, ByteLen: uint32(rs.Offset), Solicited: p.BTH().SolicitedEvent()}
		if op.Is(bth.FlagWrite) {
			c.Opcode, c.ByteLen = ib.WCRecvRDMAWithImm, rs.WriteLen
		}
		if op.Is(bth.FlagImm) {
			c.Flags, c.Imm = ib.WCFlagWithImm, p.ImmDt().Imm()
		}
		rs.HaveWQE = false
		r.Counters.Inc(ib.RDMARecvs)
		r.completeRecv(qp, &rs.WQE, &c)
	}
}

// ucDrop abandons the current UC message; the receive WQE stays for the
// next one (rxe keeps it too).
func (r *Responder) ucDrop(qp *qpmgr.QP, rest bool) {
	r.Counters.Inc(ib.DropUCMessage)
	qp.Resp.InMsg, qp.Resp.Offset = 0, 0
	qp.Resp.UCDrop = rest
}

// grhLen is the room a UD receive gives the GRH (IBTA 11.4.1.2): 40 bytes,
// holding for RoCEv2 over IPv4 the IPv4 header in its last 20 (as rxe).
const grhLen = 40

// respondUD is the UD responder: Q_Key check, one receive WQE per
// datagram, the GRH area first.
func (r *Responder) respondUD(qp *qpmgr.QP, p bth.Packet, b *ibudp.Buf) {
	deth := p.DETH()
	if deth.QKey() != qp.Attr.QKey {
		r.Counters.Inc(ib.DropBadQKey)
		return
	}
	wr, ok := qp.Recv().Pop()
	if !ok {
		r.Counters.Inc(ib.DropNoRecvWQE)
		return
	}
	var grh [grhLen]byte
	local := r.LocalAddr
	if b.Dst.IsValid() {
		local = b.Dst // a multicast group's: the GRH's DGID is the MGID
	}
	putGRH(grh[:], b, local)
	c := qpmgr.RecvCompletion{Opcode: ib.WCRecv, ByteLen: uint32(grhLen + p.PayloadLen()),
		SrcQP: deth.SrcQP(), Flags: ib.WCFlagGRH, Solicited: p.BTH().SolicitedEvent()}
	if p.Opcode().Is(bth.FlagImm) {
		c.Flags |= ib.WCFlagWithImm
		c.Imm = p.ImmDt().Imm()
	}
	err := r.DMA.Scatter(qp.PD, wr.SGL, 0, grh[:])
	if err == nil {
		err = r.DMA.Scatter(qp.PD, wr.SGL, grhLen, p.Payload())
	}
	if err != nil {
		c.Status = ib.WCLocProtErr
		if grhLen+p.PayloadLen() > sglLen(wr.SGL) {
			c.Status = ib.WCLocLenErr
		}
	}
	r.Counters.Inc(ib.RDMARecvs)
	r.completeRecv(qp, &wr, &c)
}

// putGRH writes the GRH area of a UD receive: for IPv4 the IPv4 header the
// packet came with, in bytes 20-39; for IPv6 the IPv6 header.
func putGRH(g []byte, b *ibudp.Buf, local interface{ As16() [16]byte }) {
	src := b.Peer.Unmap()
	udpLen := bth.UDPHeaderLen + b.N
	if src.Is4() {
		ip := g[20:40]
		ip[0] = 0x45
		ip[1] = b.TOS
		binary.BigEndian.PutUint16(ip[2:], uint16(bth.IPv4HeaderLen+udpLen))
		binary.BigEndian.PutUint16(ip[4:], b.IPID)
		binary.BigEndian.PutUint16(ip[6:], 0x4000)
		ip[8] = 64
		ip[9] = 17
		s4 := src.As4()
		l16 := local.As16()
		copy(ip[12:16], s4[:])
		copy(ip[16:20], l16[12:16])
		var sum uint32
		for i := 0; i < 20; i += 2 {
			sum += uint32(binary.BigEndian.Uint16(ip[i:]))
		}
		for sum > 0xffff {
			sum = sum&0xffff + sum>>16
		}
		binary.BigEndian.PutUint16(ip[10:], ^uint16(sum))
		return
	}
	g[0] = 0x60 | b.TOS>>4
	g[1] = b.TOS << 4
	binary.BigEndian.PutUint16(g[4:], uint16(udpLen))
	g[6] = 17
	g[7] = 64
	s16, l16 := src.As16(), local.As16()
	copy(g[8:24], s16[:])
	copy(g[24:40], l16[:])
}

// sglLen is the length of the message an SGL describes.
func sglLen(sgl []ib.SGE) int {
	n := 0
	for _, s := range sgl {
		n += int(s.Length)
	}
	return n
}

// response builds a responder packet of opcode op with an n-byte payload.
func response(qp *qpmgr.QP, tx qpmgr.TX, op bth.Opcode, n int, psn uint32) (*ibudp.Buf, bth.Packet) {
	if qp.XRC != 0 {
		op |= bth.TransportXRC // an XRC target answers with XRC's opcodes (IBTA A14, table 1)
	}
	b := tx.Alloc()
	p, err := bth.Build(b.Room(), op, n)
	if err != nil {
		panic("rx: response does not fit a buffer: " + err.Error()) // n <= path MTU always
	}
	p.BTH().Encode(&bth.BTHFields{Opcode: op, PadCount: bth.PadFor(n), PKey: bth.DefaultPKey, DestQP: qp.Attr.DestQPN, PSN: psn})
	b.N = p.Len()
	b.Peer, b.SrcPort, b.TOS, b.QPN = qp.Dest(), qp.SrcPort(), qp.Attr.AH.TrafficClass, qp.QPN
	return b, p
}
