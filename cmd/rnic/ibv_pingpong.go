package main

// The ibv_*_pingpong tools, re-made on the verbs package so that each pairs
// with rdma-core's (libibverbs/examples, rdma-core 44) in either role: same
// flags, same TCP exchange on port 18515, same QP attributes, same SENDs on
// the wire, same output. The client and the server bounce a message of -s
// bytes -n times; each side keeps -r receives posted.

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/rnicd/rnicd/verbs"
)

// ppKind is which of the four tools runs.
type ppKind int

const (
	ppRC  ppKind = iota // ibv_rc_pingpong
	ppUC                // ibv_uc_pingpong
	ppUD                // ibv_ud_pingpong
	ppSRQ               // ibv_srq_pingpong: RC QPs sharing one SRQ
)

func (k ppKind) tool() string {
	return [...]string{"ibv_rc_pingpong", "ibv_uc_pingpong", "ibv_ud_pingpong", "ibv_srq_pingpong"}[k]
}

// Facts of rdma-core's pingpong programs.
const (
	ppRecvWRID   = 1
	ppSendWRID   = 2
	ppUDQKey     = 0x11111111 // Q_Key of ibv_ud_pingpong's QPs
	ppGRHSize    = 40         // UD receive buffers start with room for the GRH
	ppSRQMaxQP   = 256        // srq_pingpong always exchanges this many destinations
	ppDefaultTCP = 18515
)

// ppConfig is the command line of a pingpong tool.
type ppConfig struct {
	kind    ppKind
	dev     devFlags
	tcpPort int
	ibPort  int
	size    int
	mtu     verbs.MTU
	rxDepth int
	iters   int
	sl      int
	events  bool
	gidx    int
	chk     bool
	numQP   int
	server  string // host to connect to; "" means be the server
	// timeout bounds every wait on the peer (TCP and completions): the
	// real tools wait forever, a tool facing a vanished or hostile peer
	// should not.
	timeout time.Duration
}

func pingpongCommand(k ppKind) func([]string, io.Writer, io.Writer) int {
	return func(args []string, stdout, stderr io.Writer) int {
		cfg, err := parsePingpong(k, args, stderr)
		if err != nil {
			if !errors.Is(err, flag.ErrHelp) {
				fmt.Fprintf(stderr, "%s: %v\n", k.tool(), err)
			}
			ppUsage(stdout, k)
			return 1
		}
		if _, err := runPingpong(cfg, nil, stdout); err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", k.tool(), err)
			return 1
		}
		return 0
	}
}

// parsePingpong reads the flags the tool k has in rdma-core, plus --local
// and --timeout. As getopt does, flags may follow the server name.
func parsePingpong(k ppKind, args []string, stderr io.Writer) (ppConfig, error) {
	cfg := ppConfig{kind: k, tcpPort: ppDefaultTCP, ibPort: 1, size: 4096, mtu: verbs.MTU1024,
		rxDepth: 500, iters: 1000, gidx: -1, numQP: 16, timeout: time.Minute}
	if k == ppUD {
		cfg.size = 1024
	}
	fs := flag.NewFlagSet(k.tool(), flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg.dev.register(fs)
	fs.DurationVar(&cfg.timeout, "timeout", cfg.timeout, "give up when the peer is silent this long (0: wait forever)")
	intFlag := func(short, long string, p *int) {
		fs.IntVar(p, short, *p, "")
		fs.IntVar(p, long, *p, "")
	}
	boolFlag := func(short, long string, p *bool) {
		fs.BoolVar(p, short, false, "")
		fs.BoolVar(p, long, false, "")
	}
	fs.StringVar(&cfg.dev.name, "d", "", "")
	fs.StringVar(&cfg.dev.name, "ib-dev", "", "")
	intFlag("p", "port", &cfg.tcpPort)
	intFlag("i", "ib-port", &cfg.ibPort)
	intFlag("s", "size", &cfg.size)
	intFlag("r", "rx-depth", &cfg.rxDepth)
	intFlag("n", "iters", &cfg.iters)
	intFlag("l", "sl", &cfg.sl)
	intFlag("g", "gid-idx", &cfg.gidx)
	boolFlag("e", "events", &cfg.events)
	boolFlag("c", "chk", &cfg.chk)
	mtu := 1024
	if k != ppUD {
		intFlag("m", "mtu", &mtu)
	}
	if k == ppSRQ {
		intFlag("q", "num-qp", &cfg.numQP)
	}
	// Features rnicd does not have: accepted so they can be refused with
	// the reason, as rdma-core refuses them on a device without them.
	var odp, iodp, prefetch, ts, dm, newSend bool
	if k == ppRC || k == ppSRQ {
		boolFlag("o", "odp", &odp)
	}
	if k == ppRC {
		boolFlag("O", "iodp", &iodp)
		boolFlag("P", "prefetch", &prefetch)
		boolFlag("t", "ts", &ts)
		boolFlag("j", "dm", &dm)
		boolFlag("N", "new_send", &newSend) // same SENDs through another API: nothing to change
	}
	var pos []string
	for rest := args; ; {
		if err := fs.Parse(rest); err != nil {
			return cfg, err
		}
		rest = fs.Args()
		if len(rest) == 0 {
			break
		}
		pos = append(pos, rest[0])
		rest = rest[1:]
	}
	switch {
	case len(pos) > 1:
		return cfg, fmt.Errorf("one server name at most, got %q", pos)
	case len(pos) == 1:
		cfg.server = pos[0]
	}
	switch {
	case cfg.tcpPort < 0 || cfg.tcpPort > 65535:
		return cfg, fmt.Errorf("-p %d: not a TCP port", cfg.tcpPort)
	case cfg.ibPort < 1:
		return cfg, fmt.Errorf("-i %d: ports count from 1", cfg.ibPort)
	case cfg.size < 1 || cfg.size > 1<<30:
		return cfg, fmt.Errorf("-s %d: size must be 1 .. 2^30 bytes", cfg.size)
	case cfg.rxDepth < 1:
		return cfg, fmt.Errorf("-r %d: at least one receive", cfg.rxDepth)
	case cfg.iters < 1:
		return cfg, fmt.Errorf("-n %d: at least one iteration", cfg.iters)
	}
	if k != ppUD { // ud_pingpong has no -m: a UD message is one packet
		cfg.mtu = 0
		for m := verbs.MTU256; m <= verbs.MTU4096; m++ {
			if m.Bytes() == mtu {
				cfg.mtu = m
			}
		}
		if cfg.mtu == 0 {
			return cfg, fmt.Errorf("-m %d: path MTU must be 256, 512, 1024, 2048 or 4096", mtu)
		}
	}
	if odp || iodp || prefetch {
		return cfg, errUnsupported("The device isn't ODP capable or does not support RC send and receive with ODP (rnicd has no on-demand paging)")
	}
	if ts {
		return cfg, errUnsupported("The device isn't completion timestamp capable (rnicd gives no completion timestamps)")
	}
	if dm {
		return cfg, errUnsupported("Device doesn't support dm allocation (rnicd has no device memory)")
	}
	if k != ppSRQ {
		cfg.numQP = 1
	} else {
		if cfg.numQP > cfg.rxDepth {
			return cfg, fmt.Errorf("rx_depth %d is too small for %d QPs -- must have at least one receive per QP", cfg.rxDepth, cfg.numQP)
		}
		if cfg.numQP < 1 || cfg.numQP >= ppSRQMaxQP {
			return cfg, fmt.Errorf("num_qp %d must be 1 .. %d", cfg.numQP, ppSRQMaxQP-1)
		}
	}
	return cfg, nil
}

// errUnsupported marks a refused feature; the usage text does not help.
type errUnsupported string

func (e errUnsupported) Error() string { return string(e) }

func ppUsage(w io.Writer, k ppKind) {
	fmt.Fprintf(w, "Usage:\n  rnic %s [--local ADDR] [options]            start a server and wait for connection\n", k.tool())
	fmt.Fprintf(w, "  rnic %s [--local ADDR] [options] <host>     connect to server at <host>\n\nOptions:\n", k.tool())
	size := 4096
	if k == ppUD {
		size = 1024
	}
	lines := []string{
		"  -p, --port=<port>      listen on/connect to port <port> (default 18515)",
		"  -d, --ib-dev=<dev>     use IB device <dev> (default first device found)",
		"  -i, --ib-port=<port>   use port <port> of IB device (default 1)",
		fmt.Sprintf("  -s, --size=<size>      size of message to exchange (default %d)", size),
	}
	if k != ppUD {
		lines = append(lines, "  -m, --mtu=<size>       path MTU (default 1024)")
	}
	if k == ppSRQ {
		lines = append(lines, "  -q, --num-qp=<num>     number of QPs to use (default 16)")
	}
	lines = append(lines,
		"  -r, --rx-depth=<dep>   number of receives to post at a time (default 500)",
		"  -n, --iters=<iters>    number of exchanges (default 1000)",
		"  -l, --sl=<sl>          service level value (accepted; RoCE over UDP carries no SL)",
		"  -e, --events           sleep on CQ events (default poll)",
		"  -g, --gid-idx=<gid index> local port gid index",
		"  -c, --chk              validate received buffer",
		"      --local=<addr>     run an in-process NIC on <addr> instead of using rnicd",
		"      --timeout=<dur>    give up when the peer is silent this long (default 1m, 0: never)")
	if k == ppRC || k == ppSRQ {
		lines = append(lines, "  -o, --odp              on demand paging: not supported by rnicd")
	}
	if k == ppRC {
		lines = append(lines, "  -t, --ts               CQE timestamps: not supported by rnicd",
			"  -j, --dm               device memory: not supported by rnicd",
			"  -N, --new_send         new post send WR API (same packets)")
	}
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
}

// pingpong is one side of a run: the verbs objects rdma-core's
// pp_init_ctx creates, and the state of the loop.
type pingpong struct {
	cfg      ppConfig
	ctx      *verbs.Context
	ch       *verbs.CompChannel
	pd       *verbs.PD
	buf      []byte // registered: the message, after ppGRHSize bytes for UD
	mr       *verbs.MR
	cq       *verbs.CQ
	srq      *verbs.SRQ
	qps      []*verbs.QP
	port     verbs.PortAttr
	inline   bool
	remote   []ppDest
	ah       verbs.AH // UD: where SENDs go
	pending  []int    // per QP: the WR ids the next SEND waits for
	pageSize int
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
	p := &pingpong{cfg: cfg, ctx: ctx, pageSize: os.Getpagesize()}
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
		sep := ","
		if cfg.kind == ppUD {
			sep = ":" // ud_pingpong prints a colon here
		}
		fmt.Fprintf(out, "  local address:  LID 0x%04x, QPN 0x%06x, PSN 0x%06x%s GID %s\n",
			mine[i].LID, mine[i].QPN, mine[i].PSN, sep, gidText(mine[i].GID))
	}
	// srq_pingpong sends ppSRQMaxQP destinations, the unused ones zero.
	wire := mine
	if cfg.kind == ppSRQ {
		wire = make([]ppDest, ppSRQMaxQP)
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

// msg is the message area of the buffer: what is sent, and for RC/UC
// where it is received.
func (p *pingpong) msg() []byte {
	if p.cfg.kind == ppUD {
		return p.buf[ppGRHSize : ppGRHSize+p.cfg.size]
	}
	return p.buf[:p.cfg.size]
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
	n := cfg.size
	if cfg.kind == ppUD {
		if mtu := p.port.ActiveMTU.Bytes(); cfg.size > mtu {
			return fmt.Errorf("Requested size larger than port MTU (%d)", mtu)
		}
		n += ppGRHSize
	}
	if p.buf, err = p.ctx.Alloc(n); err != nil {
		return fmt.Errorf("couldn't allocate work buf: %w", err)
	}
	// rdma-core fills the buffer with 0x7b ('{'); srq_pingpong with zeros.
	fill := byte(0x7b)
	if cfg.kind == ppSRQ {
		fill = 0
	}
	for i := range p.buf {
		p.buf[i] = fill
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
	cqe := cfg.rxDepth + 1
	if cfg.kind == ppSRQ {
		cqe = cfg.rxDepth + cfg.numQP
	}
	if p.cq, err = p.ctx.CreateCQ(cqe, p.ch); err != nil {
		return fmt.Errorf("couldn't create CQ: %w", err)
	}
	if cfg.kind == ppSRQ {
		if p.srq, err = p.pd.CreateSRQ(verbs.SRQInitAttr{MaxWR: cfg.rxDepth, MaxSGE: 1}); err != nil {
			return fmt.Errorf("couldn't create SRQ: %w", err)
		}
	}
	qpType := map[ppKind]verbs.QPType{ppRC: verbs.QPTypeRC, ppUC: verbs.QPTypeUC, ppUD: verbs.QPTypeUD, ppSRQ: verbs.QPTypeRC}[cfg.kind]
	p.inline = true
	for i := 0; i < cfg.numQP; i++ {
		ia := verbs.QPInitAttr{Type: qpType, SendCQ: p.cq, RecvCQ: p.cq, SRQ: p.srq,
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
		mask := verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort
		if cfg.kind == ppUD {
			a.QKey = ppUDQKey
			mask |= verbs.AttrQKey
		} else {
			mask |= verbs.AttrAccessFlags // qp_access_flags 0: SENDs only
		}
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
	off := 0
	if p.cfg.kind == ppUD {
		off = ppGRHSize
	}
	wr := verbs.SendWR{WRID: ppSendWRID, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{p.mr.SGE(off, p.cfg.size)}}
	if p.inline {
		wr.Flags |= verbs.SendInline
		wr.InlineData = p.msg()
	}
	if p.cfg.kind == ppUD {
		wr.AH, wr.RemoteQPN, wr.RemoteQKey = &p.ah, p.remote[0].QPN, ppUDQKey
	}
	return p.qps[i].PostSend([]verbs.SendWR{wr})
}

// connect moves the QPs to RTR and RTS with the attributes of rdma-core's
// pp_connect_ctx: RC path MTU -m, max_dest_rd_atomic 1, min_rnr_timer 12,
// timeout 14, retry_cnt 7, rnr_retry 7, max_rd_atomic 1; UC only the PSNs
// and path; UD only the states and its SQ PSN (the address goes in an AH).
func (p *pingpong) connect(mine, rem []ppDest) error {
	// rdma-core sets a GRH only when the peer's GID has an interface ID;
	// RoCE cannot do without one, so a peer run without -g is refused here
	// as the kernel refuses it there.
	if binaryZero(rem[0].GID[8:]) {
		return errors.New("failed to modify QP to RTR: the peer's GID is zero (run it with -g); RoCE needs a GRH")
	}
	ah := verbs.AH{DGID: rem[0].GID, HopLimit: 1, SGIDIndex: uint8(max(p.cfg.gidx, 0))}
	for i, qp := range p.qps {
		var rtr, rts verbs.QPAttr
		var rtrMask, rtsMask verbs.AttrMask
		rtr.State, rts.State = verbs.QPSRTR, verbs.QPSRTS
		rtrMask, rtsMask = verbs.AttrState, verbs.AttrState|verbs.AttrSQPSN
		rts.SQPSN = mine[i].PSN
		switch p.cfg.kind {
		case ppUD:
			p.ah = ah
		case ppUC:
			rtr.PathMTU, rtr.DestQPN, rtr.RQPSN, rtr.AH = p.cfg.mtu, rem[i].QPN, rem[i].PSN, ah
			rtrMask |= verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN
		default: // RC, SRQ
			rtr.PathMTU, rtr.DestQPN, rtr.RQPSN, rtr.AH = p.cfg.mtu, rem[i].QPN, rem[i].PSN, ah
			rtr.MaxDestRdAtomic, rtr.MinRNRTimer = 1, 12
			rtrMask |= verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN |
				verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer
			rts.Timeout, rts.RetryCnt, rts.RNRRetry, rts.MaxRdAtomic = 14, 7, 7, 1
			rtsMask |= verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry | verbs.AttrMaxQPRdAtomic
		}
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
	low := 1
	if cfg.kind == ppSRQ {
		low = cfg.numQP
	}
	routs := cfg.rxDepth
	wcs := make([]verbs.WC, 2)
	if cfg.kind == ppSRQ {
		wcs = make([]verbs.WC, cfg.rxDepth+cfg.numQP)
	}
	rcnt, scnt := 0, 0
	for rcnt < cfg.iters || scnt < cfg.iters {
		ne, err := p.wait(wcs)
		if err != nil {
			return 0, fmt.Errorf("%w (%d of %d SENDs and %d of %d receives completed)", err, scnt, cfg.iters, rcnt, cfg.iters)
		}
		for _, wc := range wcs[:ne] {
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
	fill := byte(0x7b)
	if p.cfg.kind == ppSRQ {
		fill = 0
	}
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
