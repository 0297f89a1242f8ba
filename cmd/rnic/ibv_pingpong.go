package main

// The ibv_*_pingpong tools, re-made on the verbs package so that each pairs
// with rdma-core's (libibverbs/examples, rdma-core 44) in either role: same
// flags, same TCP exchange on port 18515, same QP attributes, same SENDs on
// the wire, same output. The client and the server bounce a message of -s
// bytes -n times; each side keeps -r receives posted.

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/rnicd/rnicd/verbs"
)

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
			if errors.Is(err, flag.ErrHelp) {
				ppUsage(stdout, k)
				return 0
			}
			fmt.Fprintf(stderr, "%s: %v\n", k.tool(), err)
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
	f := k.facts()
	cfg := ppConfig{kind: k, tcpPort: ppDefaultTCP, ibPort: 1, size: f.size, mtu: verbs.MTU1024,
		rxDepth: 500, iters: 1000, gidx: -1, numQP: 16, timeout: time.Minute}
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
	if f.mtuFlag {
		intFlag("m", "mtu", &mtu)
	}
	if f.numQPFlag {
		intFlag("q", "num-qp", &cfg.numQP)
	}
	// Features rnicd does not have: accepted so they can be refused with
	// the reason, as rdma-core refuses them on a device without them.
	var odp, iodp, prefetch, ts, dm, newSend bool
	if f.odpFlag {
		boolFlag("o", "odp", &odp)
	}
	if f.rcFlags {
		boolFlag("O", "iodp", &iodp)
		boolFlag("P", "prefetch", &prefetch)
		boolFlag("t", "ts", &ts)
		boolFlag("j", "dm", &dm)
		boolFlag("N", "new_send", &newSend) // same SENDs through another API: nothing to change
	}
	pos, err := parseAnywhere(fs, args)
	if err != nil {
		return cfg, err
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
	if f.mtuFlag {
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
	if !f.numQPFlag {
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
	f := k.facts()
	lines := []string{
		"  -p, --port=<port>      listen on/connect to port <port> (default 18515)",
		"  -d, --ib-dev=<dev>     use IB device <dev> (default first device found)",
		"  -i, --ib-port=<port>   use port <port> of IB device (default 1)",
		fmt.Sprintf("  -s, --size=<size>      size of message to exchange (default %d)", f.size),
	}
	if f.mtuFlag {
		lines = append(lines, "  -m, --mtu=<size>       path MTU (default 1024)")
	}
	if f.numQPFlag {
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
	if f.odpFlag {
		lines = append(lines, "  -o, --odp              on demand paging: not supported by rnicd")
	}
	if f.rcFlags {
		lines = append(lines, "  -t, --ts               CQE timestamps: not supported by rnicd",
			"  -j, --dm               device memory: not supported by rnicd",
			"  -N, --new_send         new post send WR API (same packets)")
	}
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
}
