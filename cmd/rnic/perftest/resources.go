package perftest

// One side's NIC objects for a run (perftest's ctx_init and
// set_up_connection) and the addresses of its messages.

import (
	"fmt"
	"math/rand/v2"

	"github.com/rnicd/rnicd/verbs"
)

// resources are the PD's objects of a run: one buffer holding every QP's
// send area and then their receive areas, its MR, the CQs, the QPs and
// the Dests that describe them to the peer.
type resources struct {
	p   *Params
	ctx *verbs.Context
	link
	gidIndex int
	outReads int

	gid    verbs.GID // the port's GID at gidIndex
	pd     *verbs.PD
	access verbs.Access // the MR's

	buf    []byte // send areas of every QP, then their receive areas
	bufLen int    // BUFF_SIZE: one QP's area, at least a cycle buffer
	mr     *verbs.MR
	sendCQ *verbs.CQ
	recvCQ *verbs.CQ
	// channels are the CQs' completion channels with -e.
	channels map[*verbs.CQ]*verbs.CompChannel
	qps      []*verbs.QP
	my       []Dest      // this side's QPs, as the peer is told
	rem      []Dest      // the peer's QPs, once exchanged
	ahs      []*verbs.AH // UD: where each QP sends
	// udTo are the remote QPN and Q_Key each UD QP sends to with -R:
	// what rdma_cm learned (cmud.go), not the exchanged Dests, as
	// perftest takes cma_master.nodes[i].remote_qpn and remote_qkey.
	udTo []udTarget
}

// newResources creates the PD, buffer, MR, CQs and QPs, moves the QPs to
// INIT and fills this side's Dests.
func newResources(ctx *verbs.Context, p *Params, l link) (*resources, error) {
	r := &resources{p: p, ctx: ctx, link: l}
	n := p.NumQPs
	r.bufLen = max(r.size, r.cycleBuf)
	size := r.inc(r.bufLen) * 2 * n
	if p.Conn == verbs.QPTypeUD {
		size += r.cacheLine
	}
	pd, err := ctx.AllocPD()
	if err != nil {
		return nil, err
	}
	if r.buf, err = ctx.Alloc(size); err != nil {
		return nil, err
	}
	// Random contents as perftest's, except write_lat, which polls bytes
	// of its buffer and needs zeros.
	if !(p.Tool.Verb == Write && p.Tool.Kind == Lat) {
		for i := range r.buf {
			r.buf[i] = byte(rand.Uint32())
		}
	}
	access := verbs.AccessLocalWrite
	switch p.Tool.Verb {
	case Write:
		access |= verbs.AccessRemoteWrite
	case Read:
		access |= verbs.AccessRemoteRead
	case Atomic:
		access |= verbs.AccessRemoteAtomic
	}
	if r.mr, err = pd.RegMR(r.buf, access); err != nil {
		return nil, err
	}
	// -e: each CQ reports to a completion channel of its own (perftest's
	// send_channel and recv_channel), armed from the start.
	newCQ := func(cqe int) (*verbs.CQ, error) {
		var ch *verbs.CompChannel
		if p.Events {
			if ch, err = ctx.CreateCompChannel(); err != nil {
				return nil, err
			}
		}
		cq, err := ctx.CreateCQ(cqe, ch)
		if err != nil {
			return nil, err
		}
		if ch != nil {
			if err := cq.ReqNotify(false); err != nil {
				return nil, fmt.Errorf("perftest: couldn't request CQ notification: %w", err)
			}
			r.channels[cq] = ch
		}
		return cq, nil
	}
	r.channels = map[*verbs.CQ]*verbs.CompChannel{}
	if r.sendCQ, err = newCQ(p.TxDepth * n); err != nil {
		return nil, err
	}
	r.recvCQ = r.sendCQ
	if p.Tool.Verb == Send {
		if r.recvCQ, err = newCQ(p.RxDepth * n); err != nil {
			return nil, err
		}
	}
	dev, err := ctx.QueryDevice()
	if err != nil {
		return nil, err
	}
	r.outReads = 1
	if p.Tool.Verb == Read || p.Tool.Verb == Atomic {
		r.outReads = dev.MaxQPRdAtom
		if p.OutReads > 0 && p.OutReads < r.outReads {
			r.outReads = p.OutReads
		}
	}
	port, err := ctx.QueryPort()
	if err != nil {
		return nil, err
	}
	// -x picks the source GID by index; an index past the table is
	// refused, as perftest refuses a GID ibv_query_gid cannot read.
	r.gidIndex = port.GIDIndex
	if p.GIDIndex >= 0 {
		if p.GIDIndex >= len(port.GIDs) {
			return nil, fmt.Errorf("perftest: GID index %d: the port's GID table has %d entries (0..%d)", p.GIDIndex, len(port.GIDs), len(port.GIDs)-1)
		}
		r.gidIndex = p.GIDIndex
	}
	r.gid, r.pd, r.access = port.GIDs[r.gidIndex], pd, access
	r.rem = make([]Dest, n)
	r.ahs = make([]*verbs.AH, n)
	r.udTo = make([]udTarget, n)
	if p.RDMACM {
		return r, nil // rdma_cm makes the QPs as it connects them (cmdata.go)
	}
	for i := 0; i < n; i++ {
		qp, err := pd.CreateQP(r.qpInitAttr())
		if err != nil {
			return nil, fmt.Errorf("perftest: create QP: %w", err)
		}
		if err := qp.Modify(r.initAttr()); err != nil {
			return nil, fmt.Errorf("perftest: modify QP to INIT: %w", err)
		}
		r.addQP(qp)
	}
	return r, nil
}

// qpInitAttr are the capabilities of every QP of the run.
func (r *resources) qpInitAttr() verbs.QPInitAttr {
	p := r.p
	return verbs.QPInitAttr{Type: p.Conn, SendCQ: r.sendCQ, RecvCQ: r.recvCQ,
		Cap: verbs.QPCap{MaxSendWR: p.TxDepth, MaxSendSGE: 1, MaxRecvWR: p.RxDepth, MaxRecvSGE: 1, MaxInlineData: p.Inline}}
}

// addQP takes the run's next QP and describes it in a Dest
// (set_up_connection): each QP gives its receive area's address.
func (r *resources) addQP(qp *verbs.QP) {
	i := len(r.qps)
	r.qps = append(r.qps, qp)
	d := Dest{OutReads: uint32(r.outReads), QPN: qp.QPN, PSN: rand.Uint32() & 0xffffff,
		VAddr: r.mr.Addr + uint64((r.p.NumQPs+i)*r.bufLen), GID: r.gid}
	// rxe gives an MR without remote access rkey 0; perftest sends
	// what it got.
	if r.access != verbs.AccessLocalWrite {
		d.RKey = r.mr.RKey
	}
	r.my = append(r.my, d)
}

// initAttr is the INIT transition of perftest's QPs: a Q_Key for UD, the
// remote access the verb needs otherwise.
func (r *resources) initAttr() (*verbs.QPAttr, verbs.AttrMask) {
	attr := verbs.QPAttr{State: verbs.QPSInit, PortNum: 1}
	mask := verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort
	if r.p.Conn == verbs.QPTypeUD {
		attr.QKey = defQKey
		return &attr, mask | verbs.AttrQKey
	}
	switch r.p.Tool.Verb {
	case Atomic:
		attr.AccessFlags = verbs.AccessRemoteAtomic
	case Read:
		attr.AccessFlags = verbs.AccessRemoteRead
	case Write:
		attr.AccessFlags = verbs.AccessRemoteWrite
	case Send:
		attr.AccessFlags = verbs.AccessRemoteWrite | verbs.AccessLocalWrite
	}
	return &attr, mask | verbs.AttrAccessFlags
}

// connectQPs moves the QPs to RTR, and to RTS if this side sends
// (ctx_connect), with perftest's attributes and the peer's Dests.
func (r *resources) connectQPs(sends bool) error {
	p := r.p
	dev, err := r.ctx.QueryDevice()
	if err != nil {
		return err
	}
	for i, qp := range r.qps {
		rem := &r.rem[i]
		ah := verbs.AH{DGID: rem.GID, SGIDIndex: uint8(r.gidIndex), HopLimit: 0xff}
		attr := verbs.QPAttr{State: verbs.QPSRTR}
		mask := verbs.AttrState
		if p.Conn != verbs.QPTypeUD {
			attr.AH, attr.PathMTU, attr.DestQPN, attr.RQPSN = ah, r.mtu, rem.QPN, rem.PSN
			mask |= verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN
			if p.Conn == verbs.QPTypeRC {
				attr.MaxDestRdAtomic = uint8(r.my[i].OutReads)
				attr.MinRNRTimer = minRNRTimer
				mask |= verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer
			}
		}
		if err := qp.Modify(&attr, mask); err != nil {
			return fmt.Errorf("perftest: modify QP %#x to RTR: %w", qp.QPN, err)
		}
		if !sends {
			continue
		}
		rts := verbs.QPAttr{State: verbs.QPSRTS, SQPSN: r.my[i].PSN}
		rtsMask := verbs.AttrState | verbs.AttrSQPSN
		if p.Conn == verbs.QPTypeRC {
			// perftest takes the peer's out_reads as is; the NIC's
			// limit caps what a peer may ask.
			rts.Timeout, rts.RetryCnt, rts.RNRRetry = uint8(p.QPTimeout), 7, 7
			rts.MaxRdAtomic = uint8(min(int(rem.OutReads), dev.MaxQPRdAtom))
			rtsMask |= verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry | verbs.AttrMaxQPRdAtomic
		}
		if err := qp.Modify(&rts, rtsMask); err != nil {
			return fmt.Errorf("perftest: modify QP %#x to RTS: %w", qp.QPN, err)
		}
		if p.Conn == verbs.QPTypeUD {
			r.ahs[i] = &ah
		}
	}
	return nil
}

// inc is perftest's INC: the stride between messages in a buffer, at
// least a cache line.
func (r *resources) inc(size int) int {
	if size > r.cacheLine {
		return roundUp(size, r.cacheLine)
	}
	return r.cacheLine
}

// cycles says whether messages step through a cycle buffer: in bandwidth
// tests, when at least two fit.
func (r *resources) cycles() bool {
	return r.p.Tool.Kind == BW && r.size <= r.cycleBuf/2
}

// cycleOffset is the offset of the k-th message in a cycle buffer.
func (r *resources) cycleOffset(k int) uint64 {
	step := r.inc(r.size)
	return uint64((k % (r.cycleBuf / step)) * step)
}

// recvAddr is the address of the n-th receive of QP i: receives cycle
// through the QP's receive area as perftest's do.
func (r *resources) recvAddr(i, n int) uint64 {
	base := r.mr.Addr + uint64((r.p.NumQPs+i)*r.inc(r.bufLen))
	if r.p.Conn == verbs.QPTypeUD {
		base += uint64(r.cacheLine - udAddition)
	}
	if r.cycles() {
		base += r.cycleOffset(n)
	}
	return base
}

func (r *resources) recvLen() int {
	if r.p.Conn == verbs.QPTypeUD {
		return r.size + udAddition
	}
	return r.size
}

// postRecvs posts rx_depth receives on every QP (ctx_set_recv_wqes) and
// returns how many each QP has posted.
func (r *resources) postRecvs() ([]int, error) {
	posted := make([]int, len(r.qps))
	for i := range r.qps {
		for j := 0; j < r.p.RxDepth; j++ {
			if err := r.postRecv(i, posted[i]); err != nil {
				return nil, err
			}
			posted[i]++
		}
	}
	return posted, nil
}

// postRecv posts the n-th receive of QP i.
func (r *resources) postRecv(i, n int) error {
	qp := r.qps[i]
	wr := verbs.RecvWR{WRID: uint64(i), SGL: []verbs.SGE{{Addr: r.recvAddr(i, n), Length: uint32(r.recvLen()), LKey: r.mr.LKey}}}
	if err := qp.PostRecv([]verbs.RecvWR{wr}); err != nil {
		return fmt.Errorf("perftest: post receive on QP %#x: %w", qp.QPN, err)
	}
	return nil
}

// sendWR is the k-th send WR of QP i (ctx_set_send_reg_wqes and the
// address stepping of run_iter_bw): local and remote addresses step
// through a cycle buffer in bandwidth tests.
func (r *resources) sendWR(i, k int, signaled bool) verbs.SendWR {
	p := r.p
	local := r.mr.Addr + uint64(i*r.bufLen)
	remote := r.rem[i].VAddr
	if r.cycles() {
		off := r.cycleOffset(k)
		local += off
		remote += off
	}
	wr := verbs.SendWR{WRID: uint64(i), SGL: []verbs.SGE{{Addr: local, Length: uint32(r.size), LKey: r.mr.LKey}}}
	if signaled {
		wr.Flags |= verbs.SendSignaled
	}
	switch p.Tool.Verb {
	case Send:
		wr.Opcode = verbs.WRSend
		if p.Conn == verbs.QPTypeUD {
			wr.AH, wr.RemoteQPN, wr.RemoteQKey = r.ahs[i], r.rem[i].QPN, defQKey
			if p.RDMACM {
				wr.RemoteQPN, wr.RemoteQKey = r.udTo[i].qpn, r.udTo[i].qkey
			}
		}
	case Write:
		wr.Opcode, wr.RemoteAddr, wr.RKey = verbs.WRRDMAWrite, remote, r.rem[i].RKey
	case Read:
		wr.Opcode, wr.RemoteAddr, wr.RKey = verbs.WRRDMARead, remote, r.rem[i].RKey
	case Atomic:
		wr.RemoteAddr, wr.RKey = remote, r.rem[i].RKey
		wr.SGL[0].Length = defSizeAtomic
		if p.Atomic == FetchAndAdd {
			wr.Opcode, wr.CompareAdd = verbs.WRAtomicFetchAdd, 1
		} else {
			wr.Opcode, wr.CompareAdd, wr.Swap = verbs.WRAtomicCmpAndSwp, 0, 0
		}
	}
	if (p.Tool.Verb == Send || p.Tool.Verb == Write) && r.size <= p.Inline {
		off := int(local - r.mr.Addr)
		wr.Flags |= verbs.SendInline
		wr.InlineData = r.buf[off : off+r.size]
	}
	return wr
}
