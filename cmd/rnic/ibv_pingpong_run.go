package main

// One side of a pingpong run, shared by the four tools: the objects
// rdma-core's pp_init_ctx makes, the exchange, the loop and the -c check.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/rnicd/rnicd/verbs"
)

// pingpong is one side of a run: the verbs objects rdma-core's
// pp_init_ctx creates, and the state of the loop.
type pingpong struct {
	cfg       ppConfig
	ctx       *verbs.Context
	ch        *verbs.CompChannel
	pd        *verbs.PD
	buf       []byte // registered: the message, after ppGRHSize bytes for UD
	mr        *verbs.MR
	cq        *verbs.CQ
	srq       *verbs.SRQ
	qps       []*verbs.QP
	port      verbs.PortAttr
	inline    bool
	remote    []ppDest
	pending   []int // per QP: the WR ids the next SEND waits for
	pageSize  int
	facts     *ppFacts
	transport ppTransport
}

// ppResult is what a run leaves behind, for tests.
type ppResult struct {
	Local, Remote []ppDest
	Data          []byte // the message area of the buffer at the end
	Elapsed       time.Duration
}

// runPingpong runs one side. ln, if not nil, is the server's listening
// socket (tests hand in one on a free port); otherwise the server listens
// on -p on every address, as rdma-core does.
func runPingpong(cfg ppConfig, ln net.Listener, out io.Writer) (*ppResult, error) {
	ctx, err := cfg.dev.open()
	if err != nil {
		return nil, err
	}
	defer ctx.Close()
	p := newPingpong(cfg, ctx)
	if err := p.init(); err != nil {
		return nil, err
	}
	defer p.close()

	// Local destinations: rdma-core draws each PSN with lrand48() & 0xffffff.
	mine := make([]ppDest, cfg.numQP)
	for i, qp := range p.qps {
		mine[i] = ppDest{QPN: qp.QPN, PSN: rand.Uint32() & 0xffffff}
		if cfg.gidx >= 0 {
			if cfg.gidx >= len(p.port.GIDs) {
				return nil, fmt.Errorf("can't read sgid of index %d (the GID table has %d entries)", cfg.gidx, len(p.port.GIDs))
			}
			mine[i].GID = p.port.GIDs[cfg.gidx]
		}
		fmt.Fprintf(out, "  local address:  LID 0x%04x, QPN 0x%06x, PSN 0x%06x%s GID %s\n",
			mine[i].LID, mine[i].QPN, mine[i].PSN, p.facts.addrSep, gidText(mine[i].GID))
	}
	wire := mine
	if n := p.facts.wireDests; n > 0 {
		wire = make([]ppDest, n)
		copy(wire, mine)
	}
	var rem []ppDest
	if cfg.server != "" {
		rem, err = p.clientExchange(wire)
	} else {
		rem, err = p.serverExchange(ln, wire, mine)
	}
	if err != nil {
		return nil, err
	}
	rem = rem[:cfg.numQP]
	p.remote = rem
	for _, d := range rem {
		fmt.Fprintf(out, "  remote address: LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n",
			d.LID, d.QPN, d.PSN, gidText(d.GID))
	}
	if cfg.server != "" {
		if err := p.connect(mine, rem); err != nil {
			return nil, err
		}
	}
	elapsed, err := p.loop()
	if err != nil {
		if errors.Is(err, verbs.ErrDeviceFatal) {
			return nil, err // no daemon left to ask for its counters
		}
		return nil, fmt.Errorf("%w; device counters: %s", err, ibvNonZero(ctx))
	}
	usec := float64(elapsed.Nanoseconds()) / 1e3
	nbytes := int64(cfg.size) * int64(cfg.iters) * 2
	fmt.Fprintf(out, "%d bytes in %.2f seconds = %.2f Mbit/sec\n", nbytes, usec/1e6, float64(nbytes)*8/usec)
	fmt.Fprintf(out, "%d iters in %.2f seconds = %.2f usec/iter\n", cfg.iters, usec/1e6, usec/float64(cfg.iters))
	if cfg.server != "" && cfg.chk {
		for _, pg := range p.badPages() {
			fmt.Fprintf(out, "invalid data in page %d\n", pg)
		}
	}
	return &ppResult{Local: mine, Remote: rem, Data: bytes.Clone(p.msg()), Elapsed: elapsed}, nil
}

func newPingpong(cfg ppConfig, ctx *verbs.Context) *pingpong {
	f := cfg.kind.facts()
	return &pingpong{cfg: cfg, ctx: ctx, pageSize: os.Getpagesize(), facts: f, transport: f.transport()}
}

// msg is the message area of the buffer: what is sent, and for RC/UC
// where it is received.
func (p *pingpong) msg() []byte {
	return p.buf[p.facts.grh : p.facts.grh+p.cfg.size]
}

// init creates the objects as pp_init_ctx does: buffer, completion channel
// (-e), PD, MR, one CQ of rx_depth+1 (srq: rx_depth+num_qp), the SRQ, the
// QPs with max_send_wr 1, and moves the QPs to INIT.
func (p *pingpong) init() error {
	cfg := &p.cfg
	var err error
	if p.port, err = p.ctx.QueryPort(); err != nil {
		return fmt.Errorf("couldn't get port info: %w", err)
	}
	if cfg.ibPort != 1 {
		return fmt.Errorf("port %d: the device has one port", cfg.ibPort)
	}
	if mtu := p.port.ActiveMTU.Bytes(); p.facts.onePacket && cfg.size > mtu {
		return fmt.Errorf("Requested size larger than port MTU (%d)", mtu)
	}
	if p.buf, err = p.ctx.Alloc(p.facts.grh + cfg.size); err != nil {
		return fmt.Errorf("couldn't allocate work buf: %w", err)
	}
	for i := range p.buf {
		p.buf[i] = p.facts.fill
	}
	if cfg.events {
		if p.ch, err = p.ctx.CreateCompChannel(); err != nil {
			return fmt.Errorf("couldn't create completion channel: %w", err)
		}
	}
	if p.pd, err = p.ctx.AllocPD(); err != nil {
		return fmt.Errorf("couldn't allocate PD: %w", err)
	}
	if p.mr, err = p.pd.RegMR(p.buf, verbs.AccessLocalWrite); err != nil {
		return fmt.Errorf("couldn't register MR: %w", err)
	}
	// rx_depth+1, srq_pingpong's rx_depth+num_qp: the others have one QP.
	if p.cq, err = p.ctx.CreateCQ(cfg.rxDepth+cfg.numQP, p.ch); err != nil {
		return fmt.Errorf("couldn't create CQ: %w", err)
	}
	if p.srq, err = p.transport.recvQueue(p.pd, cfg.rxDepth); err != nil {
		return fmt.Errorf("couldn't create SRQ: %w", err)
	}
	p.inline = true
	for i := 0; i < cfg.numQP; i++ {
		ia := verbs.QPInitAttr{Type: p.transport.qpType(), SendCQ: p.cq, RecvCQ: p.cq, SRQ: p.srq,
			Cap: verbs.QPCap{MaxSendWR: 1, MaxSendSGE: 1}}
		if p.srq == nil {
			ia.Cap.MaxRecvWR, ia.Cap.MaxRecvSGE = cfg.rxDepth, 1
		}
		qp, err := p.pd.CreateQP(ia)
		if err != nil {
			return fmt.Errorf("couldn't create QP[%d]: %w", i, err)
		}
		p.qps = append(p.qps, qp)
		// The tools send inline when the QP's inline capacity holds the
		// message.
		p.inline = p.inline && qp.Cap.MaxInlineData >= cfg.size
	}
	for i, qp := range p.qps {
		a := verbs.QPAttr{State: verbs.QPSInit, PKeyIndex: 0, PortNum: uint8(cfg.ibPort)}
		mask := verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort | p.transport.initAttr(&a)
		if err := qp.Modify(&a, mask); err != nil {
			return fmt.Errorf("failed to modify QP[%d] to INIT: %w", i, err)
		}
	}
	p.pending = make([]int, cfg.numQP)
	if got := p.postRecv(cfg.rxDepth); got < cfg.rxDepth {
		return fmt.Errorf("couldn't post receive (%d)", got)
	}
	if cfg.events {
		if err := p.cq.ReqNotify(false); err != nil {
			return fmt.Errorf("couldn't request CQ notification: %w", err)
		}
	}
	return nil
}

func (p *pingpong) close() {
	for _, qp := range p.qps {
		qp.Destroy()
	}
	if p.srq != nil {
		p.srq.Destroy()
	}
	if p.cq != nil {
		p.cq.Destroy()
	}
	if p.mr != nil {
		p.mr.Dereg()
	}
	if p.ch != nil {
		p.ch.Destroy()
	}
}

// postRecv posts n receives of the whole buffer (UD: with the GRH room)
// and returns how many were posted.
func (p *pingpong) postRecv(n int) int {
	wr := []verbs.RecvWR{{WRID: ppRecvWRID, SGL: []verbs.SGE{p.mr.SGE(0, len(p.buf))}}}
	for i := 0; i < n; i++ {
		var err error
		if p.srq != nil {
			err = p.srq.PostRecv(wr)
		} else {
			err = p.qps[0].PostRecv(wr)
		}
		if err != nil {
			return i
		}
	}
	return n
}

// postSend sends the message on QP i.
func (p *pingpong) postSend(i int) error {
	wr := verbs.SendWR{WRID: ppSendWRID, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{p.mr.SGE(p.facts.grh, p.cfg.size)}}
	if p.inline {
		wr.Flags |= verbs.SendInline
		wr.InlineData = p.msg()
	}
	p.transport.address(&wr)
	return p.qps[i].PostSend([]verbs.SendWR{wr})
}

// connect moves the QPs to RTR and RTS as rdma-core's pp_connect_ctx does:
// the states and the SQ PSN, and what the transport adds (ppTransport).
func (p *pingpong) connect(mine, rem []ppDest) error {
	// rdma-core sets a GRH only when the peer's GID has an interface ID;
	// RoCE cannot do without one, so a peer run without -g is refused here
	// as the kernel refuses it there.
	if binaryZero(rem[0].GID[8:]) {
		return errors.New("failed to modify QP to RTR: the peer's GID is zero (run it with -g); RoCE needs a GRH")
	}
	ah := verbs.AH{DGID: rem[0].GID, HopLimit: 1, SGIDIndex: uint8(max(p.cfg.gidx, 0))}
	for i, qp := range p.qps {
		rtr := verbs.QPAttr{State: verbs.QPSRTR}
		rts := verbs.QPAttr{State: verbs.QPSRTS, SQPSN: mine[i].PSN}
		rtrMask, rtsMask := p.transport.connectAttr(&rtr, &rts, rem[i], ah, p.cfg.mtu)
		rtrMask |= verbs.AttrState
		rtsMask |= verbs.AttrState | verbs.AttrSQPSN
		if err := qp.Modify(&rtr, rtrMask); err != nil {
			return fmt.Errorf("failed to modify QP[%d] to RTR: %w", i, err)
		}
		if err := qp.Modify(&rts, rtsMask); err != nil {
			return fmt.Errorf("failed to modify QP[%d] to RTS: %w", i, err)
		}
	}
	return nil
}

func binaryZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

func (p *pingpong) clientExchange(wire []ppDest) ([]ppDest, error) {
	addr := net.JoinHostPort(p.cfg.server, strconv.Itoa(p.cfg.tcpPort))
	d := net.Dialer{Timeout: p.cfg.timeout}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("couldn't connect to %s: %w", addr, err)
	}
	defer conn.Close()
	p.deadline(conn)
	return ppClientExchange(conn, wire)
}

func (p *pingpong) serverExchange(ln net.Listener, wire, mine []ppDest) ([]ppDest, error) {
	if ln == nil {
		var err error
		// rdma-core binds the wildcard address (AI_PASSIVE).
		if ln, err = net.Listen("tcp", ":"+strconv.Itoa(p.cfg.tcpPort)); err != nil {
			return nil, fmt.Errorf("couldn't listen to port %d: %w", p.cfg.tcpPort, err)
		}
	}
	conn, err := ln.Accept()
	ln.Close() // one client, as rdma-core's listen(fd, 1) and close after accept
	if err != nil {
		return nil, fmt.Errorf("accept() failed: %w", err)
	}
	defer conn.Close()
	p.deadline(conn)
	return ppServerExchange(conn, wire, func(rem []ppDest) error { return p.connect(mine, rem[:p.cfg.numQP]) })
}

func (p *pingpong) deadline(c net.Conn) {
	if p.cfg.timeout > 0 {
		c.SetDeadline(time.Now().Add(p.cfg.timeout))
	}
}

// loop bounces the message until -n SENDs and -n receives have completed
// (srq_pingpong: in total over its QPs), as rdma-core's main loop: a QP
// sends again once both its last SEND and the receive it waits for have
// completed, and the receives are topped up when they run low. It returns
// the time from the first SEND to the last completion.
func (p *pingpong) loop() (time.Duration, error) {
	cfg := &p.cfg
	index := make(map[uint32]int, len(p.qps))
	for i, qp := range p.qps {
		index[qp.QPN] = i
		p.pending[i] = ppRecvWRID
	}
	if cfg.server != "" {
		if cfg.chk {
			p.fillCheckPattern()
		}
		for i := range p.qps {
			if err := p.postSend(i); err != nil {
				return 0, fmt.Errorf("couldn't post send: %w", err)
			}
			p.pending[i] |= ppSendWRID
		}
	}
	start := time.Now()
	// Receives are topped up when at most this many remain: 1 per QP.
	low := cfg.numQP
	routs := cfg.rxDepth
	wcs := make([]verbs.WC, 2)
	if p.facts.pollWholeCQ {
		wcs = make([]verbs.WC, cfg.rxDepth+cfg.numQP)
	}
	rcnt, scnt := 0, 0
	for rcnt < cfg.iters || scnt < cfg.iters {
		ne, err := p.wait(wcs)
		if err != nil {
			return 0, fmt.Errorf("%w (%d of %d SENDs and %d of %d receives completed)", err, scnt, cfg.iters, rcnt, cfg.iters)
		}
		for _, wc := range wcs[:ne] {
			if wc.Status == verbs.WCRetryExcErr {
				return 0, fmt.Errorf("Failed status %s (%d) for wr_id %d: the peer stopped answering (no ACK through the QP's retry_cnt retries)", wc.Status, wc.Status, wc.WRID)
			}
			if wc.Status != verbs.WCSuccess {
				return 0, fmt.Errorf("Failed status %s (%d) for wr_id %d", wc.Status, wc.Status, wc.WRID)
			}
			qi, ok := index[wc.QPNum]
			if !ok {
				return 0, fmt.Errorf("couldn't find QPN %06x", wc.QPNum)
			}
			switch wc.WRID {
			case ppSendWRID:
				scnt++
			case ppRecvWRID:
				if routs--; routs <= low {
					routs += p.postRecv(cfg.rxDepth - routs)
					if routs < cfg.rxDepth {
						return 0, fmt.Errorf("couldn't post receive (%d)", routs)
					}
				}
				rcnt++
			default:
				return 0, fmt.Errorf("completion for unknown wr_id %d", wc.WRID)
			}
			p.pending[qi] &^= int(wc.WRID)
			if scnt < cfg.iters && p.pending[qi] == 0 {
				if err := p.postSend(qi); err != nil {
					return 0, fmt.Errorf("couldn't post send: %w", err)
				}
				p.pending[qi] = ppRecvWRID | ppSendWRID
			}
		}
	}
	return time.Since(start), nil
}

// wait returns the next completions: by polling, or with -e by sleeping
// on the completion channel and re-arming the CQ before polling it, as
// rdma-core does. Either way it gives up after the timeout.
func (p *pingpong) wait(wcs []verbs.WC) (int, error) {
	ctx := context.Background()
	if p.cfg.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.cfg.timeout)
		defer cancel()
	}
	for {
		if p.cfg.events {
			cq, err := p.ch.GetCQEvent(ctx)
			if err != nil {
				return 0, fmt.Errorf("failed to get cq_event: %w", err)
			}
			if cq != p.cq {
				return 0, errors.New("CQ event for unknown CQ")
			}
			if err := p.cq.ReqNotify(false); err != nil {
				return 0, fmt.Errorf("couldn't request CQ notification: %w", err)
			}
		}
		if n := p.cq.Poll(wcs); n > 0 {
			return n, nil
		}
		if !p.cfg.events {
			// Sleeping until the CQ has an entry is what a busy poll
			// achieves, without taking a core from the NIC.
			if err := p.cq.Wait(ctx); err != nil {
				return 0, fmt.Errorf("no completion: %w", err)
			}
		}
	}
}

// fillCheckPattern prepares the server's message for -c: rdma-core zeroes
// the first byte of each page (i / page_size % sizeof(char), always 0),
// which is all its client checks. The other bytes get a counting pattern
// instead of the 0x7b fill, so that an rnic client (and the tests) can
// check every byte; rdma-core's client ignores them.
func (p *pingpong) fillCheckPattern() {
	m := p.msg()
	for i := range m {
		if i%p.pageSize == 0 {
			m[i] = 0
		} else {
			m[i] = checkByte(i)
		}
	}
}

func checkByte(i int) byte { return byte(i%251) + 1 }

// badPages checks the client's message after the run (-c): the first byte
// of every page must be 0, as rdma-core checks; and the other bytes must
// all be either the untouched fill of rdma-core's server or the counting
// pattern of an rnic server. It returns the pages that fail.
func (p *pingpong) badPages() []int {
	m := p.msg()
	fill := p.facts.fill
	counting := len(m) > 1 && m[1] == checkByte(1)
	var bad []int
	for pg := 0; pg*p.pageSize < len(m); pg++ {
		page := m[pg*p.pageSize : min(len(m), (pg+1)*p.pageSize)]
		ok := page[0] == 0
		for j := 1; ok && j < len(page); j++ {
			want := fill
			if counting {
				want = checkByte(pg*p.pageSize + j)
			}
			ok = page[j] == want
		}
		if !ok {
			bad = append(bad, pg)
		}
	}
	return bad
}

// ibvNonZero lists the device's non-zero counters: what a stalled run most
// needs to show (drops by reason, retries).
func ibvNonZero(c *verbs.Context) string {
	m, err := c.Counters()
	if err != nil {
		return err.Error()
	}
	var b bytes.Buffer
	for _, k := range ibvSortedKeys(m) {
		if m[k] != 0 {
			fmt.Fprintf(&b, " %s=%d", k, m[k])
		}
	}
	return b.String()
}
