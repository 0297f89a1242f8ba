package perftest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"runtime"
	"strconv"
	"time"

	"github.com/rnicd/rnicd/verbs"
)

// Config is what Run needs besides the parameters.
type Config struct {
	Stdout, Stderr io.Writer
	// Open opens the device the parameters name.
	Open func(p *Params) (*verbs.Context, error)
	// Listener, if set, is used by the server instead of listening on
	// the parameters' port (tests hand in one on a free port).
	Listener net.Listener
	// IdleTimeout bounds how long a test waits without any progress
	// (a completion, a received message, a changed byte) before it gives
	// up. 0 means 120 s, the time perftest's check_alive allows.
	IdleTimeout time.Duration
}

// ErrRun marks a failure during the measured run (perftest exits 17).
var ErrRun = errors.New("perftest: run failed")

// test is one run of a tool: its parameters, its NIC resources and the
// connection to the peer.
type test struct {
	p    *Params
	cfg  Config
	out  io.Writer
	ctx  *verbs.Context
	conn *Conn
	idle time.Duration

	mtu       verbs.MTU
	cycleBuf  int
	cacheLine int
	gidIndex  int
	outReads  int

	buf    []byte // send areas of every QP, then their receive areas
	bufLen int    // BUFF_SIZE: one QP's area, at least a cycle buffer
	mr     *verbs.MR
	sendCQ *verbs.CQ
	recvCQ *verbs.CQ
	qps    []*verbs.QP
	my     []Dest
	rem    []Dest
	ahs    []*verbs.AH
	size   int // the message size of the current run
}

// Run runs one test to the end: connection, set-up, the measurement and
// the reports, printed on cfg.Stdout as perftest prints them.
func Run(p *Params, cfg Config) error {
	t := &test{p: p, cfg: cfg, out: cfg.Stdout, idle: cfg.IdleTimeout, size: p.Size}
	if t.idle == 0 {
		t.idle = 120 * time.Second
	}
	ctx, err := cfg.Open(p)
	if err != nil {
		return err
	}
	t.ctx = ctx
	defer ctx.Close()
	// The header names the device opened, the first running one when -d
	// was not given.
	p.Device = ctx.Name()
	if p.inlineSet {
		// perftest checks an inline size it was given (or forced to 0)
		// against the devices it knows, and prints a line for rxe, which
		// it does not. Its message, that inline is disabled, would not be
		// true here: rnicd does inline.
		fmt.Fprint(t.out, resultLine)
	}
	if err := t.connect(); err != nil {
		return err
	}
	defer t.conn.Close()
	if err := t.setUp(); err != nil {
		return err
	}
	switch {
	case p.Tool.Kind == BW && p.Tool.Verb == Send:
		return t.sendBW()
	case p.Tool.Kind == BW:
		return t.rdmaBW()
	case p.Tool.Verb == Write:
		return t.writeLat()
	case p.Tool.Verb == Read:
		return t.readLat()
	default:
		return t.sendLat()
	}
}

// connect opens the TCP exchange and does its first steps: versions,
// system data, MTU.
func (t *test) connect() error {
	p := t.p
	var err error
	if p.Client() {
		t.conn, err = Dial(net.JoinHostPort(p.ServerName, strconv.Itoa(p.Port)))
	} else {
		fmt.Fprint(t.out, "\n************************************\n* Waiting for client to connect... *\n************************************\n")
		ln := t.cfg.Listener
		if ln == nil {
			ln, err = net.Listen("tcp4", ":"+strconv.Itoa(p.Port))
			if err != nil {
				return fmt.Errorf("perftest: couldn't listen to port %d: %w", p.Port, err)
			}
		}
		t.conn, err = Accept(ln)
	}
	if err != nil {
		return err
	}
	if err := t.conn.ExchangeVersions(); err != nil {
		return err
	}
	if t.cycleBuf, t.cacheLine, err = t.conn.ExchangeSysData(defPageSize, defCacheLine); err != nil {
		return err
	}
	port, err := t.ctx.QueryPort()
	if err != nil {
		return err
	}
	mtu := port.ActiveMTU
	if p.MTU != 0 {
		if m := mtuFromBytes(p.MTU); m < mtu {
			mtu = m
		} else if m > mtu {
			fmt.Fprintf(t.cfg.Stderr, " Requested MTU %d is above the port's active MTU; using %d\n", p.MTU, mtu.Bytes())
		}
	}
	if t.mtu, err = t.conn.ExchangeMTU(mtu); err != nil {
		return err
	}
	if p.Conn == verbs.QPTypeUD && t.size > t.mtu.Bytes() {
		if p.All || !p.SizeSet {
			fmt.Fprintf(t.cfg.Stderr, " Max msg size in UD is MTU %d\n Changing to this MTU\n", t.mtu.Bytes())
			t.size = t.mtu.Bytes()
		} else {
			return errors.New("perftest: max message size in UD cannot be greater than MTU")
		}
	}
	return nil
}

// inc is perftest's INC: the stride between messages in a buffer, at
// least a cache line.
func (t *test) inc(size int) int {
	if size > t.cacheLine {
		return roundUp(size, t.cacheLine)
	}
	return t.cacheLine
}

// setUp creates the PD, buffer, MR, CQs and QPs and fills this side's
// Dests (ctx_init, set_up_connection).
func (t *test) setUp() error {
	p := t.p
	n := p.NumQPs
	t.bufLen = max(t.size, t.cycleBuf)
	size := t.inc(t.bufLen) * 2 * n
	if p.Conn == verbs.QPTypeUD {
		size += t.cacheLine
	}
	pd, err := t.ctx.AllocPD()
	if err != nil {
		return err
	}
	if t.buf, err = t.ctx.Alloc(size); err != nil {
		return err
	}
	// Random contents as perftest's, except write_lat, which polls bytes
	// of its buffer and needs zeros.
	if !(p.Tool.Verb == Write && p.Tool.Kind == Lat) {
		for i := range t.buf {
			t.buf[i] = byte(rand.Uint32())
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
	if t.mr, err = pd.RegMR(t.buf, access); err != nil {
		return err
	}
	if t.sendCQ, err = t.ctx.CreateCQ(p.TxDepth*n, nil); err != nil {
		return err
	}
	t.recvCQ = t.sendCQ
	if p.Tool.Verb == Send {
		if t.recvCQ, err = t.ctx.CreateCQ(p.RxDepth*n, nil); err != nil {
			return err
		}
	}
	dev, err := t.ctx.QueryDevice()
	if err != nil {
		return err
	}
	t.outReads = 1
	if p.Tool.Verb == Read || p.Tool.Verb == Atomic {
		t.outReads = dev.MaxQPRdAtom
		if p.OutReads > 0 && p.OutReads < t.outReads {
			t.outReads = p.OutReads
		}
	}
	port, err := t.ctx.QueryPort()
	if err != nil {
		return err
	}
	// The GID is the port's RoCEv2 GID whatever -x says: rnicd's GID table
	// is not rxe's, and users bring -x 1 from rxe hosts.
	t.gidIndex = port.GIDIndex
	if p.GIDIndex >= 0 {
		t.gidIndex = p.GIDIndex
	}
	gid := port.GIDs[port.GIDIndex]
	for i := 0; i < n; i++ {
		qp, err := pd.CreateQP(verbs.QPInitAttr{Type: p.Conn, SendCQ: t.sendCQ, RecvCQ: t.recvCQ,
			Cap: verbs.QPCap{MaxSendWR: p.TxDepth, MaxSendSGE: 1, MaxRecvWR: p.RxDepth, MaxRecvSGE: 1, MaxInlineData: p.Inline}})
		if err != nil {
			return fmt.Errorf("perftest: create QP: %w", err)
		}
		attr := verbs.QPAttr{State: verbs.QPSInit, PortNum: 1}
		mask := verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort
		if p.Conn == verbs.QPTypeUD {
			attr.QKey = defQKey
			mask |= verbs.AttrQKey
		} else {
			switch p.Tool.Verb {
			case Atomic:
				attr.AccessFlags = verbs.AccessRemoteAtomic
			case Read:
				attr.AccessFlags = verbs.AccessRemoteRead
			case Write:
				attr.AccessFlags = verbs.AccessRemoteWrite
			case Send:
				attr.AccessFlags = verbs.AccessRemoteWrite | verbs.AccessLocalWrite
			}
			mask |= verbs.AttrAccessFlags
		}
		if err := qp.Modify(&attr, mask); err != nil {
			return fmt.Errorf("perftest: modify QP to INIT: %w", err)
		}
		t.qps = append(t.qps, qp)
		d := Dest{OutReads: uint32(t.outReads), QPN: qp.QPN, PSN: rand.Uint32() & 0xffffff,
			VAddr: t.mr.Addr + uint64((n+i)*t.bufLen), GID: gid}
		// rxe gives an MR without remote access rkey 0; perftest sends
		// what it got.
		if access != verbs.AccessLocalWrite {
			d.RKey = t.mr.RKey
		}
		t.my = append(t.my, d)
	}
	t.rem = make([]Dest, n)
	t.ahs = make([]*verbs.AH, n)
	printTestInfo(t.out, p, t.mtu, t.gidIndex, t.outReads)
	return nil
}

// handShakeAll swaps every QP's Dest, keeping the peer's.
func (t *test) handShakeAll() error {
	for i := range t.my {
		r, err := t.conn.HandShake(&t.my[i])
		if err != nil {
			return err
		}
		t.rem[i] = r
	}
	return nil
}

// barrier is a handshake used only to wait for the peer.
func (t *test) barrier() error {
	_, err := t.conn.HandShake(&t.my[0])
	return err
}

// printAddresses prints this side's QPs, then swaps Dests again and
// prints the peer's, as every perftest test does once connected.
func (t *test) printAddresses() error {
	for i := range t.my {
		printDest(t.out, "local", &t.my[i], t.p.Tool.Verb)
	}
	for i := range t.my {
		r, err := t.conn.HandShake(&t.my[i])
		if err != nil {
			return err
		}
		printDest(t.out, "remote", &r, t.p.Tool.Verb)
	}
	return nil
}

// connectQPs moves the QPs to RTR, and to RTS on the sides that send
// (ctx_connect), with perftest's attributes.
func (t *test) connectQPs() error {
	p := t.p
	dev, err := t.ctx.QueryDevice()
	if err != nil {
		return err
	}
	sends := p.Tool.Kind == Lat || p.Client()
	for i, qp := range t.qps {
		rem := &t.rem[i]
		ah := verbs.AH{DGID: rem.GID, SGIDIndex: uint8(t.gidIndex), HopLimit: 0xff}
		attr := verbs.QPAttr{State: verbs.QPSRTR}
		mask := verbs.AttrState
		if p.Conn != verbs.QPTypeUD {
			attr.AH, attr.PathMTU, attr.DestQPN, attr.RQPSN = ah, t.mtu, rem.QPN, rem.PSN
			mask |= verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN
			if p.Conn == verbs.QPTypeRC {
				attr.MaxDestRdAtomic = uint8(t.my[i].OutReads)
				attr.MinRNRTimer = minRNRTimer
				mask |= verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer
			}
		}
		if err := qp.Modify(&attr, mask); err != nil {
			return fmt.Errorf("perftest: modify QP %#x to RTR: %w", qp.QPN, err)
		}
		if sends {
			attr := verbs.QPAttr{State: verbs.QPSRTS, SQPSN: t.my[i].PSN}
			mask := verbs.AttrState | verbs.AttrSQPSN
			if p.Conn == verbs.QPTypeRC {
				// perftest takes the peer's out_reads as is; the NIC's
				// limit caps what a peer may ask.
				attr.Timeout, attr.RetryCnt, attr.RNRRetry = uint8(p.QPTimeout), 7, 7
				attr.MaxRdAtomic = uint8(min(int(rem.OutReads), dev.MaxQPRdAtom))
				mask |= verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry | verbs.AttrMaxQPRdAtomic
			}
			if err := qp.Modify(&attr, mask); err != nil {
				return fmt.Errorf("perftest: modify QP %#x to RTS: %w", qp.QPN, err)
			}
			if p.Conn == verbs.QPTypeUD {
				t.ahs[i] = &ah
			}
		}
	}
	return nil
}

// sizes are the message sizes of the run: one, or 2..2^23 with -a (UD:
// up to the MTU).
func (t *test) sizes() []int {
	if !t.p.All {
		return []int{t.size}
	}
	top := maxSize
	if t.p.Conn == verbs.QPTypeUD {
		top = t.mtu.Bytes()
	}
	var s []int
	for n := 2; n <= top; n *= 2 {
		s = append(s, n)
	}
	return s
}

func (t *test) printBWHeader() {
	fmt.Fprint(t.out, resultLine)
	if t.p.ReportGbits {
		fmt.Fprint(t.out, resultFmtG)
	} else {
		fmt.Fprint(t.out, resultFmt)
	}
	fmt.Fprint(t.out, "\n")
}

// rdmaBW is ib_write_bw, ib_read_bw and ib_atomic_bw: the client moves
// data to or from the server's memory, the server's CPU idles until the
// client reports its result.
func (t *test) rdmaBW() error {
	p := t.p
	if err := t.handShakeAll(); err != nil {
		return err
	}
	if err := t.connectQPs(); err != nil {
		return err
	}
	if err := t.printAddresses(); err != nil {
		return err
	}
	// One more handshake, once both sides are in RTR.
	if err := t.barrier(); err != nil {
		return err
	}
	t.printBWHeader()
	if !p.Client() {
		// The client's handshake says its run is over.
		if err := t.barrier(); err != nil {
			return err
		}
		rep, err := t.conn.ExchangeBWReports(BWReport{})
		if err != nil {
			return err
		}
		printBWReport(t.out, rep, p.ReportGbits)
		if err := t.conn.CloseConnection(&t.my[0]); err != nil {
			return err
		}
		fmt.Fprint(t.out, resultLine)
		return nil
	}
	var last BWReport
	for _, size := range t.sizes() {
		t.size = size
		rep, err := t.runBWClient()
		if err != nil {
			return err
		}
		printBWReport(t.out, rep, p.ReportGbits)
		last = rep
	}
	fmt.Fprint(t.out, resultLine)
	if err := t.barrier(); err != nil {
		return err
	}
	if _, err := t.conn.ExchangeBWReports(last); err != nil {
		return err
	}
	return t.conn.CloseConnection(&t.my[0])
}

// sendBW is ib_send_bw: the server posts receives, the client SENDs;
// each side measures and prints its own figures.
func (t *test) sendBW() error {
	p := t.p
	if err := t.handShakeAll(); err != nil {
		return err
	}
	if err := t.connectQPs(); err != nil {
		return err
	}
	if err := t.barrier(); err != nil {
		return err
	}
	if err := t.printAddresses(); err != nil {
		return err
	}
	t.printBWHeader()
	for _, size := range t.sizes() {
		t.size = size
		var posted []int
		if !p.Client() {
			var err error
			if posted, err = t.postRecvs(); err != nil {
				return err
			}
		}
		// The client must not send before the receives are posted (UC
		// and UD would drop).
		if err := t.barrier(); err != nil {
			return err
		}
		var rep BWReport
		var err error
		if p.Client() {
			rep, err = t.runBWClient()
		} else {
			rep, err = t.runBWServer(posted)
		}
		if err != nil {
			return err
		}
		printBWReport(t.out, rep, p.ReportGbits)
		if p.All {
			if err := t.barrier(); err != nil {
				return err
			}
		}
	}
	fmt.Fprint(t.out, resultLine)
	return t.conn.CloseConnection(&t.my[0])
}

// recvSlot is the address of the n-th receive of QP i: receives cycle
// through the QP's receive area as perftest's do.
func (t *test) recvAddr(i, n int) uint64 {
	base := t.mr.Addr + uint64((t.p.NumQPs+i)*t.inc(t.bufLen))
	if t.p.Conn == verbs.QPTypeUD {
		base += uint64(t.cacheLine - udAddition)
	}
	if t.p.Tool.Kind == BW && t.size <= t.cycleBuf/2 {
		step := t.inc(t.size)
		base += uint64((n % (t.cycleBuf / step)) * step)
	}
	return base
}

func (t *test) recvLen() int {
	if t.p.Conn == verbs.QPTypeUD {
		return t.size + udAddition
	}
	return t.size
}

// postRecvs posts rx_depth receives on every QP (ctx_set_recv_wqes) and
// returns how many each QP has posted.
func (t *test) postRecvs() ([]int, error) {
	posted := make([]int, len(t.qps))
	for i, qp := range t.qps {
		for j := 0; j < t.p.RxDepth; j++ {
			if err := t.postRecv(qp, i, posted[i]); err != nil {
				return nil, err
			}
			posted[i]++
		}
	}
	return posted, nil
}

func (t *test) postRecv(qp *verbs.QP, i, n int) error {
	wr := verbs.RecvWR{WRID: uint64(i), SGL: []verbs.SGE{{Addr: t.recvAddr(i, n), Length: uint32(t.recvLen()), LKey: t.mr.LKey}}}
	if err := qp.PostRecv([]verbs.RecvWR{wr}); err != nil {
		return fmt.Errorf("perftest: post receive on QP %#x: %w", qp.QPN, err)
	}
	return nil
}

// sendWR is the k-th send WR of QP i (ctx_set_send_reg_wqes and the
// address stepping of run_iter_bw): local and remote addresses step
// through a cycle buffer in bandwidth tests.
func (t *test) sendWR(i, k int, signaled bool) verbs.SendWR {
	p := t.p
	local := t.mr.Addr + uint64(i*t.bufLen)
	remote := t.rem[i].VAddr
	if p.Tool.Kind == BW && t.size <= t.cycleBuf/2 {
		step := t.inc(t.size)
		off := uint64((k % (t.cycleBuf / step)) * step)
		local += off
		remote += off
	}
	wr := verbs.SendWR{WRID: uint64(i), SGL: []verbs.SGE{{Addr: local, Length: uint32(t.size), LKey: t.mr.LKey}}}
	if signaled {
		wr.Flags |= verbs.SendSignaled
	}
	switch p.Tool.Verb {
	case Send:
		wr.Opcode = verbs.WRSend
		if p.Conn == verbs.QPTypeUD {
			wr.AH, wr.RemoteQPN, wr.RemoteQKey = t.ahs[i], t.rem[i].QPN, defQKey
		}
	case Write:
		wr.Opcode, wr.RemoteAddr, wr.RKey = verbs.WRRDMAWrite, remote, t.rem[i].RKey
	case Read:
		wr.Opcode, wr.RemoteAddr, wr.RKey = verbs.WRRDMARead, remote, t.rem[i].RKey
	case Atomic:
		wr.RemoteAddr, wr.RKey = remote, t.rem[i].RKey
		wr.SGL[0].Length = defSizeAtomic
		if p.Atomic == FetchAndAdd {
			wr.Opcode, wr.CompareAdd = verbs.WRAtomicFetchAdd, 1
		} else {
			wr.Opcode, wr.CompareAdd, wr.Swap = verbs.WRAtomicCmpAndSwp, 0, 0
		}
	}
	if (p.Tool.Verb == Send || p.Tool.Verb == Write) && t.size <= p.Inline {
		off := int(local - t.mr.Addr)
		wr.Flags |= verbs.SendInline
		wr.InlineData = t.buf[off : off+t.size]
	}
	return wr
}

// poller waits for completions. With a daemon it does not spin a CPU
// away, which the daemons need: it polls, and when the CQ is empty waits
// on it for at most the idle timeout. With an in-process NIC it spins, as
// perftest does, and every empty poll runs the NIC's receive pipeline on
// this thread (verbs.CQ.Poll): the completion is found with no wake-up.
type poller struct {
	cq   *verbs.CQ
	idle time.Duration
	spin bool
	wcs  []verbs.WC
}

func (t *test) newPoller(cq *verbs.CQ, n int) *poller {
	return &poller{cq: cq, idle: t.idle, spin: t.ctx.Local(), wcs: make([]verbs.WC, n)}
}

func (pl *poller) poll(max int) ([]verbs.WC, error) {
	return pl.pollUntil(max, time.Time{})
}

// pollUntil is poll that gives up without an error at end, if end is
// set: a -D run's end comes whether or not completions do.
func (pl *poller) pollUntil(max int, end time.Time) ([]verbs.WC, error) {
	if n := pl.cq.Poll(pl.wcs[:max]); n > 0 {
		return pl.wcs[:n], nil
	}
	if pl.spin {
		return pl.spinUntil(max, end)
	}
	ctx, cancel := context.WithTimeout(context.Background(), pl.idle)
	defer cancel()
	if !end.IsZero() {
		var cancelEnd context.CancelFunc
		ctx, cancelEnd = context.WithDeadline(ctx, end)
		defer cancelEnd()
	}
	for {
		if n := pl.cq.Poll(pl.wcs[:max]); n > 0 {
			return pl.wcs[:n], nil
		}
		if err := pl.cq.Wait(ctx); err != nil {
			if !end.IsZero() && !time.Now().Before(end) {
				return nil, nil
			}
			if errors.Is(err, context.DeadlineExceeded) {
				return nil, fmt.Errorf("%w: no completion for %v", ErrRun, pl.idle)
			}
			return nil, fmt.Errorf("%w: %w", ErrRun, err) // the daemon is gone
		}
	}
}

// spinUntil is pollUntil for an in-process NIC: poll until a completion
// comes, end passes or the idle timeout does, yielding between polls to
// the process's other goroutines.
func (pl *poller) spinUntil(max int, end time.Time) ([]verbs.WC, error) {
	idle := time.Now().Add(pl.idle)
	for spins := 1; ; spins++ {
		if n := pl.cq.Poll(pl.wcs[:max]); n > 0 {
			return pl.wcs[:n], nil
		}
		runtime.Gosched()
		if spins%1024 != 0 {
			continue
		}
		now := time.Now()
		if !end.IsZero() && !now.Before(end) {
			return nil, nil
		}
		if now.After(idle) {
			return nil, fmt.Errorf("%w: no completion for %v", ErrRun, pl.idle)
		}
		if err := pl.cq.Err(); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrRun, err)
		}
	}
}

func wcError(wc *verbs.WC, what string) error {
	return fmt.Errorf("%w: %s completion with error: %v (vendor err 0, wr_id %d, QP %#x)", ErrRun, what, wc.Status, wc.WRID, wc.QPNum)
}

// durationClock walks the states of a -D run: warm-up for the margin,
// sampling, cool-down for the margin, end (catch_alarm's states).
type durationClock struct {
	start, sample, stop, end time.Time
}

func newDurationClock(p *Params) durationClock {
	now := time.Now()
	m := time.Duration(p.Margin) * time.Second
	d := time.Duration(p.Duration) * time.Second
	return durationClock{start: now, sample: now.Add(m), stop: now.Add(d - m), end: now.Add(d)}
}

// runBWClient posts iterations WRs on every QP, tx_depth at most in
// flight per QP, one signaled WR every cq_mod (run_iter_bw), and
// computes the report.
func (t *test) runBWClient() (BWReport, error) {
	p := t.p
	n := len(t.qps)
	iters := p.Iters
	tot := iters * n
	slots := tot
	if p.NoPeak {
		slots = 1
	}
	s := bwSamples{posted: make([]int64, slots), completed: make([]int64, slots)}
	scnt := make([]int, n)
	ccnt := make([]int, n)
	totS, totC := 0, 0
	cq := t.newPoller(t.sendCQ, 16)
	epoch := time.Now()
	now := func() int64 { return int64(time.Since(epoch)) }
	duration := p.Duration > 0
	var dc durationClock
	var sampled uint64
	var sampleStart, sampleEnd int64
	if duration {
		dc = newDurationClock(p)
	}
	if p.NoPeak && !duration {
		s.posted[0] = now()
	}
	wrs := make([]verbs.SendWR, 1)
	for {
		if duration {
			tn := time.Now()
			if sampleStart == 0 && !tn.Before(dc.sample) {
				sampleStart = now()
			}
			if sampleEnd == 0 && !tn.Before(dc.stop) {
				sampleEnd = now()
			}
			if !tn.Before(dc.end) {
				break
			}
		} else if totS >= tot && totC >= tot {
			break
		}
		for i, qp := range t.qps {
			for (duration || scnt[i] < iters) && scnt[i]-ccnt[i]+1 <= p.TxDepth {
				k := scnt[i]
				signaled := p.CQMod == 1 || k%p.CQMod == p.CQMod-1 || (!duration && k == iters-1)
				if !p.NoPeak {
					s.posted[totS] = now()
				}
				wrs[0] = t.sendWR(i, k, signaled)
				if err := qp.PostSend(wrs); err != nil {
					return BWReport{}, fmt.Errorf("%w: post send on QP %#x, scnt=%d: %v", ErrRun, qp.QPN, k, err)
				}
				scnt[i]++
				totS++
			}
		}
		if totC < tot || (duration && totC < totS) {
			wcs, err := cq.poll(16)
			if err != nil {
				return BWReport{}, err
			}
			for j := range wcs {
				wc := &wcs[j]
				if wc.Status != verbs.WCSuccess {
					return BWReport{}, wcError(wc, "send")
				}
				if int(wc.WRID) >= n {
					return BWReport{}, fmt.Errorf("%w: completion for unknown wr_id %d", ErrRun, wc.WRID)
				}
				ccnt[wc.WRID] += p.CQMod
				totC += p.CQMod
				if !p.NoPeak {
					s.completed[min(totC, tot)-1] = now()
				}
				if duration && sampleStart != 0 && sampleEnd == 0 {
					sampled += uint64(p.CQMod)
				}
			}
		}
	}
	if duration {
		s.posted[0], s.completed[0] = sampleStart, sampleEnd
		return bwReport(uint64(t.size), sampled, s, p.CQMod, true, p.ReportGbits), nil
	}
	if p.NoPeak {
		s.completed[0] = now()
	}
	return bwReport(uint64(t.size), uint64(tot), s, p.CQMod, p.NoPeak, p.ReportGbits), nil
}

// runBWServer takes iterations receives per QP, re-posting as long as
// more are to come (run_iter_bw_server); the clock starts at the first
// one.
func (t *test) runBWServer(posted []int) (BWReport, error) {
	p := t.p
	n := len(t.qps)
	tot := p.Iters * n
	duration := p.Duration > 0
	cq := t.newPoller(t.recvCQ, 16)
	var start, end time.Time
	var dc durationClock
	rcnt := 0
	var sampled uint64
	var sampleStart, sampleEnd time.Time
	for duration || rcnt < tot {
		if duration && !start.IsZero() {
			tn := time.Now()
			if sampleStart.IsZero() && !tn.Before(dc.sample) {
				sampleStart = tn
			}
			if sampleEnd.IsZero() && !tn.Before(dc.stop) {
				sampleEnd = tn
			}
			if !tn.Before(dc.end) {
				break
			}
		}
		// In a -D run the client stops sending at its own end: wait for
		// completions no longer than this side's end.
		var until time.Time
		if duration && !start.IsZero() {
			until = dc.end
		}
		wcs, err := cq.pollUntil(16, until)
		if err != nil {
			fmt.Fprintf(t.cfg.Stderr, " Did not get Message for %v, exiting..\n Total Received=%d, Total Iters Required=%d\n", t.idle, rcnt, tot)
			return BWReport{}, err
		}
		if start.IsZero() {
			start = time.Now()
			dc = newDurationClock(p)
		}
		for j := range wcs {
			wc := &wcs[j]
			if wc.Status != verbs.WCSuccess {
				return BWReport{}, wcError(wc, "receive")
			}
			i := int(wc.WRID)
			if i >= n {
				return BWReport{}, fmt.Errorf("%w: completion for unknown wr_id %d", ErrRun, wc.WRID)
			}
			rcnt++
			if duration && !sampleStart.IsZero() && sampleEnd.IsZero() {
				sampled++
			}
			if duration || posted[i]+1 <= p.Iters {
				if err := t.postRecv(t.qps[i], i, posted[i]); err != nil {
					return BWReport{}, fmt.Errorf("%w: %v", ErrRun, err)
				}
				posted[i]++
			}
		}
	}
	end = time.Now()
	if duration {
		s := bwSamples{posted: []int64{0}, completed: []int64{int64(sampleEnd.Sub(sampleStart))}}
		return bwReport(uint64(t.size), sampled, s, p.CQMod, true, p.ReportGbits), nil
	}
	s := bwSamples{posted: []int64{0}, completed: []int64{int64(end.Sub(start))}}
	return bwReport(uint64(t.size), uint64(tot), s, p.CQMod, true, p.ReportGbits), nil
}

func (t *test) printLatHeader() {
	fmt.Fprint(t.out, resultLine)
	fmt.Fprint(t.out, resultFmtLat)
	fmt.Fprint(t.out, "\n")
}

func (t *test) printLat(posted []int64, rttFactor int) error {
	r, err := latReport(t.size, posted, rttFactor)
	if err != nil {
		return err
	}
	if t.p.Unsorted {
		fmt.Fprintln(t.out, "#, usec")
		for i, v := range r.Unsorted {
			fmt.Fprintf(t.out, "%d, %g\n", i+1, v)
		}
		t.printLatHeader()
	}
	printLatReport(t.out, r)
	return nil
}

// writeLat is ib_write_lat: each side WRITEs a message whose last byte is
// its iteration count into the peer's buffer and spins on its own
// buffer's last byte for the peer's; the server writes first.
func (t *test) writeLat() error {
	if err := t.barrier(); err != nil {
		return err
	}
	if err := t.handShakeAll(); err != nil {
		return err
	}
	if err := t.connectQPs(); err != nil {
		return err
	}
	if err := t.printAddresses(); err != nil {
		return err
	}
	if err := t.barrier(); err != nil {
		return err
	}
	t.printLatHeader()
	for _, size := range t.sizes() {
		t.size = size
		posted, err := t.runLatWrite()
		if err != nil {
			return err
		}
		if err := t.printLat(posted, 2); err != nil {
			return err
		}
	}
	fmt.Fprint(t.out, resultLine)
	// write_lat ends without the closing handshake.
	return nil
}

func (t *test) runLatWrite() ([]int64, error) {
	p := t.p
	iters := p.Iters
	posted := make([]int64, iters)
	postAt := t.size - 1
	pollAt := p.NumQPs*t.bufLen + t.size - 1
	cq := t.newPoller(t.sendCQ, 1)
	wrs := make([]verbs.SendWR, 1)
	epoch := time.Now()
	scnt, ccnt, rcnt := 0, 0, 0
	for scnt < iters || ccnt < iters || rcnt < iters {
		if rcnt < iters && !(scnt < 1 && !p.Client()) {
			rcnt++
			if err := t.waitByte(pollAt, byte(rcnt)); err != nil {
				return nil, err
			}
		}
		if scnt < iters {
			posted[scnt] = int64(time.Since(epoch))
			scnt++
			t.buf[postAt] = byte(scnt)
			wrs[0] = t.sendWR(0, 0, true)
			if err := t.qps[0].PostSend(wrs); err != nil {
				return nil, fmt.Errorf("%w: post send: scnt=%d: %v", ErrRun, scnt, err)
			}
		}
		if ccnt < iters {
			wcs, err := cq.poll(1)
			if err != nil {
				return nil, err
			}
			if wcs[0].Status != verbs.WCSuccess {
				return nil, wcError(&wcs[0], "send")
			}
			ccnt++
		}
	}
	return posted, nil
}

// waitByte spins until buf[off] is v: the peer's WRITE has landed. It
// yields the CPU between looks (the machine may have few) and gives up
// after the idle timeout.
func (t *test) waitByte(off int, v byte) error {
	deadline := time.Now().Add(t.idle)
	for spins := 0; t.buf[off] != v; spins++ {
		if t.ctx.BusyPoll() > 0 {
			continue
		}
		runtime.Gosched()
		if spins%4096 == 0 && time.Now().After(deadline) {
			return fmt.Errorf("%w: the peer's WRITE %d did not arrive in %v", ErrRun, v, t.idle)
		}
	}
	return nil
}

// readLat is ib_read_lat: the client READs the server's buffer, one READ
// at a time; the server only takes part in the exchange.
func (t *test) readLat() error {
	p := t.p
	if err := t.barrier(); err != nil {
		return err
	}
	if err := t.handShakeAll(); err != nil {
		return err
	}
	if err := t.connectQPs(); err != nil {
		return err
	}
	if err := t.printAddresses(); err != nil {
		return err
	}
	if err := t.barrier(); err != nil {
		return err
	}
	if !p.Client() {
		if err := t.conn.CloseConnection(&t.my[0]); err != nil {
			return err
		}
		fmt.Fprint(t.out, resultLine)
		return nil
	}
	t.printLatHeader()
	for _, size := range t.sizes() {
		t.size = size
		posted, err := t.runLatRead()
		if err != nil {
			return err
		}
		if err := t.printLat(posted, 1); err != nil {
			return err
		}
	}
	fmt.Fprint(t.out, resultLine)
	return t.conn.CloseConnection(&t.my[0])
}

func (t *test) runLatRead() ([]int64, error) {
	iters := t.p.Iters
	posted := make([]int64, iters)
	cq := t.newPoller(t.sendCQ, 1)
	wrs := make([]verbs.SendWR, 1)
	epoch := time.Now()
	for scnt := 0; scnt < iters; scnt++ {
		posted[scnt] = int64(time.Since(epoch))
		wrs[0] = t.sendWR(0, 0, true)
		if err := t.qps[0].PostSend(wrs); err != nil {
			return nil, fmt.Errorf("%w: post send: scnt=%d: %v", ErrRun, scnt, err)
		}
		wcs, err := cq.poll(1)
		if err != nil {
			return nil, err
		}
		if wcs[0].Status != verbs.WCSuccess {
			return nil, wcError(&wcs[0], "send")
		}
	}
	return posted, nil
}

// sendLat is ib_send_lat: SEND ping-pong, the client first.
func (t *test) sendLat() error {
	if err := t.handShakeAll(); err != nil {
		return err
	}
	if err := t.connectQPs(); err != nil {
		return err
	}
	if err := t.barrier(); err != nil {
		return err
	}
	if err := t.printAddresses(); err != nil {
		return err
	}
	t.printLatHeader()
	for _, size := range t.sizes() {
		t.size = size
		if _, err := t.postRecvs(); err != nil {
			return err
		}
		// The client must not send before the server's receives are
		// posted.
		if err := t.barrier(); err != nil {
			return err
		}
		posted, err := t.runLatSend()
		if err != nil {
			return err
		}
		if err := t.printLat(posted, 2); err != nil {
			return err
		}
	}
	fmt.Fprint(t.out, resultLine)
	return t.conn.CloseConnection(&t.my[0])
}

func (t *test) runLatSend() ([]int64, error) {
	p := t.p
	iters := p.Iters
	posted := make([]int64, iters)
	rcq := t.newPoller(t.recvCQ, 1)
	scq := t.newPoller(t.sendCQ, 1)
	wrs := make([]verbs.SendWR, 1)
	epoch := time.Now()
	scnt, rcnt := 0, 0
	for scnt < iters || rcnt < iters {
		if rcnt < iters && !(scnt < 1 && p.Client()) {
			wcs, err := rcq.poll(1)
			if err != nil {
				return nil, err
			}
			if wcs[0].Status != verbs.WCSuccess {
				return nil, wcError(&wcs[0], "receive")
			}
			rcnt++
			if rcnt+p.RxDepth <= iters {
				if err := t.postRecv(t.qps[0], 0, 0); err != nil {
					return nil, fmt.Errorf("%w: %v", ErrRun, err)
				}
			}
		}
		if scnt < iters {
			posted[scnt] = int64(time.Since(epoch))
			scnt++
			signaled := scnt%p.CQMod == 0 || scnt == iters
			wrs[0] = t.sendWR(0, 0, signaled)
			if err := t.qps[0].PostSend(wrs); err != nil {
				return nil, fmt.Errorf("%w: post send: scnt=%d: %v", ErrRun, scnt, err)
			}
			if signaled {
				wcs, err := scq.poll(1)
				if err != nil {
					return nil, err
				}
				if wcs[0].Status != verbs.WCSuccess {
					return nil, wcError(&wcs[0], "send")
				}
			}
		}
	}
	return posted, nil
}
