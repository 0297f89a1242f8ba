package perftest

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/rnicd/rnicd/internal/units"
	"github.com/rnicd/rnicd/verbs"
)

// Verb is the operation a test measures (perftest's VerbType).
type Verb int

const (
	Send Verb = iota
	Write
	Read
	Atomic
)

// verbNames are perftest's testsStr, used in the header.
var verbNames = [...]string{"Send", "RDMA_Write", "RDMA_Read", "Atomic"}

// Kind says whether a test measures bandwidth or latency.
type Kind int

const (
	BW Kind = iota
	Lat
)

// Tool is one of perftest's programs.
type Tool struct {
	Name string
	Verb Verb
	Kind Kind
}

// Tools are the programs this package re-makes.
var Tools = []Tool{
	{"ib_send_bw", Send, BW},
	{"ib_write_bw", Write, BW},
	{"ib_read_bw", Read, BW},
	{"ib_atomic_bw", Atomic, BW},
	{"ib_send_lat", Send, Lat},
	{"ib_write_lat", Write, Lat},
	{"ib_read_lat", Read, Lat},
}

// AtomicType is the operation of the atomic tests (-A).
type AtomicType int

const (
	CmpAndSwap AtomicType = iota
	FetchAndAdd
)

var atomicNames = [...]string{"CMP_AND_SWAP", "FETCH_AND_ADD"}

// Defaults and limits of perftest 4.5 (perftest_parameters.h).
const (
	DefaultPort      = 18515
	defSizeBW        = 65536
	defSizeLat       = 2
	defSizeAtomic    = 8
	defIters         = 1000
	defItersWriteBW  = 5000
	defTxBW          = 128
	defTxLat         = 1
	defQPTimeout     = 14
	defRxRDMA        = 1
	defRxSend        = 512
	defCQMod         = 100
	defCacheLine     = 64
	defPageSize      = 4096
	maxSize          = 8388608 // -a goes up to 2^23
	minIters         = 5
	maxIters         = 100000000
	maxTx            = 15000
	maxRx            = 16384
	ucMaxRx          = 16000
	maxQPs           = 16384
	maxInline        = 912
	maxInlineUD      = 884
	cqModSizeLimit   = 8192 // above it CQ moderation is turned off
	udAddition       = 40   // the GRH area in front of a UD receive
	defQKey          = 0x11111111
	minRNRTimer      = 12
	maxSizeSetByUser = 1<<31 - 1 // UINT_MAX/2
	maxSL            = 15
	defDuration      = 5 // seconds
)

// Params are a test's parameters after flags and perftest's dependency
// rules (parser, force_dependecies).
type Params struct {
	Tool       Tool
	Device     string     // -d; rnicd device name, "" for the first one running
	Local      netip.Addr // --local: an in-process NIC on this address instead of rnicd
	Daemon     bool       // --daemon: accepted, and ignored, for old scripts (the QPs always run in rnicd)
	ServerName string     // the positional argument: client if set
	Port       int        // -p: TCP port of the exchange

	MTU         int  // -m, bytes; 0 takes the port's active MTU
	Size        int  // -s
	SizeSet     bool // -s was given (req_size)
	Iters       int  // -n
	Conn        verbs.QPType
	Atomic      AtomicType // -A
	NumQPs      int        // -q
	TxDepth     int        // -t
	RxDepth     int        // -r
	Inline      int        // -I; 0 unless asked (perftest disables inline on devices it does not know)
	GIDIndex    int        // -x; -1 when not given
	All         bool       // -a
	ReportGbits bool       // --report_gbits
	Duration    int        // -D seconds; 0: iterations
	Margin      int        // -f seconds (duration/4 by default)
	QPTimeout   int        // -u
	CQMod       int        // -Q
	cqModSet    bool
	inlineSet   bool // -I given, or forced to 0 (perftest's inline_size != DEF_INLINE)
	// postListNote: -l set the CQ moderation, which perftest says.
	postListNote bool
	NoPeak       bool // -N
	OutReads     int  // -o; 0: the device's maximum
	Unsorted     bool // -U: print every latency sample unsorted
	RDMACM       bool // -R: the exchange and the QPs' connection through rdma_cm

	Duplex        bool       // -b: both sides send and report the sum (bw tests)
	PostList      int        // -l: WRs per post_send call (bw tests), 1 by default
	SL            int        // -S: service level, 0..15 (no place in a RoCEv2 packet without VLAN)
	Output        Output     // --output: print only one figure
	RunInfinitely bool       // --run_infinitely: a report every -D seconds until killed
	SourceIP      netip.Addr // --source_ip: the exchange's local address (client's bind, server's listen) and rdma_cm's (-R)
	Events        bool       // -e: sleep on completion events instead of polling
	TOS           int        // -T: the IP TOS byte of rdma_cm's connections (-R); -1 when not given
}

// Output is what --output leaves of a report: everything, or one figure
// (perftest's verbosity levels).
type Output int

const (
	FullVerbosity Output = iota
	OutputBW             // --output=bandwidth: the average bandwidth
	OutputMR             // --output=message_rate: the message rate
	OutputLat            // --output=latency: the average latency
)

// ErrHelp is returned by Parse for -h; the usage has been written.
var ErrHelp = errors.New("perftest: help requested")

// ErrVersion is returned by Parse for -V (--version).
var ErrVersion = errors.New("perftest: version requested")

// option is one flag perftest knows. arg says it takes a value.
type option struct {
	short byte
	long  string
	arg   bool
	set   func(p *Params, v string) error
}

func intArg(dst *int, name string, lo, hi int) func(*Params, string) error {
	return func(_ *Params, v string) error {
		n, err := strconv.ParseInt(v, 0, 64)
		if err != nil || int(n) < lo || int(n) > hi {
			return fmt.Errorf("%s should be between %d and %d, not %q", name, lo, hi, v)
		}
		*dst = int(n)
		return nil
	}
}

func (p *Params) options() []option {
	accept := func(*Params, string) error { return nil }
	return []option{
		{'p', "port", true, intArg(&p.Port, "port", 1, 65535)},
		{'d', "ib-dev", true, func(p *Params, v string) error { p.Device = v; return nil }},
		{'i', "ib-port", true, func(_ *Params, v string) error {
			if v != "1" {
				return fmt.Errorf("the device has one port, 1, not %q", v)
			}
			return nil
		}},
		{'m', "mtu", true, func(p *Params, v string) error {
			n, err := strconv.Atoi(v)
			if err != nil || verbs.MTU(0) == mtuFromBytes(n) {
				return fmt.Errorf("MTU should be 256, 512, 1024, 2048 or 4096, not %q", v)
			}
			p.MTU = n
			return nil
		}},
		{'s', "size", true, func(p *Params, v string) error {
			// perftest's K and M, and the rest of units.ParseBytes'
			// suffixes, which every size of rnicd and rnic takes.
			n, err := units.ParseBytes(v)
			if err != nil || n < 1 || n > maxSizeSetByUser {
				return fmt.Errorf("message size should be between 1 and %d, not %q", maxSizeSetByUser, v)
			}
			p.Size, p.SizeSet = int(n), true
			return nil
		}},
		{'n', "iters", true, intArg(&p.Iters, "iteration num", minIters, maxIters)},
		{'t', "tx-depth", true, intArg(&p.TxDepth, "tx depth", 1, maxTx)},
		{'u', "qp-timeout", true, intArg(&p.QPTimeout, "QP timeout", 0, 31)},
		{'x', "gid-index", true, intArg(&p.GIDIndex, "GID index", 0, 255)},
		{'c', "connection", true, func(p *Params, v string) error { return p.setConn(v) }},
		{'q', "qp", true, func(p *Params, v string) error {
			if p.Tool.Kind != BW {
				return errors.New("multiple QPs only available on bw tests")
			}
			return intArg(&p.NumQPs, "num of QPs", 1, maxQPs)(p, v)
		}},
		{'I', "inline_size", true, func(p *Params, v string) error {
			p.inlineSet = true
			return intArg(&p.Inline, "max inline", 0, maxInline)(p, v)
		}},
		{'o', "outs", true, intArg(&p.OutReads, "outstanding reads", 1, 1<<16)},
		{'r', "rx-depth", true, func(p *Params, v string) error {
			if err := intArg(&p.RxDepth, "rx depth", 1, maxRx)(p, v); err != nil {
				return err
			}
			if p.Tool.Verb != Send && p.RxDepth > defRxRDMA {
				return errors.New("rx depth is only for SEND tests")
			}
			return nil
		}},
		{'Q', "cq-mod", true, func(p *Params, v string) error {
			p.cqModSet = true
			return intArg(&p.CQMod, "CQ moderation", 1, 1024)(p, v)
		}},
		{'A', "atomic_type", true, func(p *Params, v string) error {
			if p.Tool.Verb != Atomic {
				return errors.New("the atomic type is only for the atomic tests")
			}
			switch v {
			case atomicNames[CmpAndSwap]:
				p.Atomic = CmpAndSwap
			case atomicNames[FetchAndAdd]:
				p.Atomic = FetchAndAdd
			default:
				return fmt.Errorf("invalid atomic type %q: choose CMP_AND_SWAP or FETCH_AND_ADD", v)
			}
			return nil
		}},
		{'D', "duration", true, intArg(&p.Duration, "duration", 1, 1<<20)},
		{'f', "margin", true, intArg(&p.Margin, "margin", 0, 1<<20)},
		{'a', "all", false, func(p *Params, _ string) error { p.All = true; return nil }},
		{'F', "CPU-freq", false, accept}, // no CPU frequency to check: the clock is the kernel's
		{'N', "noPeak", false, func(p *Params, _ string) error { p.NoPeak = true; return nil }},
		{'U', "report-unsorted", false, func(p *Params, _ string) error {
			if p.Tool.Kind != Lat {
				return errors.New("-U is for latency tests")
			}
			p.Unsorted = true
			return nil
		}},
		{'R', "rdma_cm", false, func(p *Params, _ string) error { p.RDMACM = true; return nil }},
		{'T', "tos", true, intArg(&p.TOS, "TOS", 0, 255)},
		{'e', "events", false, func(p *Params, _ string) error { p.Events = true; return nil }},
		{'b', "bidirectional", false, func(p *Params, _ string) error { p.Duplex = true; return nil }},
		{'l', "post_list", true, intArg(&p.PostList, "post list size", 1, maxTx)},
		{'S', "sl", true, intArg(&p.SL, "service level", 0, maxSL)},
		{0, "output", true, func(p *Params, v string) error {
			switch v {
			case "bandwidth":
				p.Output = OutputBW
			case "message_rate":
				p.Output = OutputMR
			case "latency":
				p.Output = OutputLat
			default:
				return fmt.Errorf("invalid verbosity level %q: use bandwidth, latency or message_rate", v)
			}
			return nil
		}},
		{0, "run_infinitely", false, func(p *Params, _ string) error { p.RunInfinitely = true; return nil }},
		{0, "source_ip", true, func(p *Params, v string) error {
			a, err := netip.ParseAddr(v)
			if err != nil {
				return fmt.Errorf("--source_ip wants an IP address: %w", err)
			}
			p.SourceIP = a
			return nil
		}},
		{0, "report_gbits", false, func(p *Params, _ string) error { p.ReportGbits = true; return nil }},
		{0, "daemon", false, func(p *Params, _ string) error { p.Daemon = true; return nil }},
		{0, "local", true, func(p *Params, v string) error {
			a, err := netip.ParseAddr(v)
			if err != nil {
				return fmt.Errorf("--local wants an IP address: %w", err)
			}
			p.Local = a
			return nil
		}},
	}
}

func (p *Params) setConn(v string) error {
	switch v {
	case "RC":
		p.Conn = verbs.QPTypeRC
	case "UC":
		if p.Tool.Verb == Read || p.Tool.Verb == Atomic {
			return errors.New("UC connection not possible in READ/ATOMIC verbs")
		}
		p.Conn = verbs.QPTypeUC
	case "UD":
		if p.Tool.Verb != Send {
			return errors.New("UD connection only possible in SEND verb")
		}
		p.Conn = verbs.QPTypeUD
	default:
		return fmt.Errorf("connection type %q: this NIC does RC, UC and UD", v)
	}
	return nil
}

func mtuFromBytes(n int) verbs.MTU {
	for m := verbs.MTU256; m <= verbs.MTU4096; m++ {
		if 128<<m == n {
			return m
		}
	}
	return 0
}

// Parse reads a tool's command line as perftest's getopt_long does:
// short flags (-s 64, -s64, -aF), long ones (--size 64, --size=64), and
// at most one positional argument, the server's name.
func Parse(tool Tool, args []string) (*Params, error) {
	p := &Params{
		Tool: tool, Port: DefaultPort, Iters: defIters, Conn: verbs.QPTypeRC,
		Atomic: FetchAndAdd, NumQPs: 1, TxDepth: defTxBW, RxDepth: defRxRDMA, GIDIndex: -1,
		QPTimeout: defQPTimeout, CQMod: defCQMod, Margin: -1, Size: defSizeBW, PostList: 1, TOS: -1,
	}
	if tool.Kind == Lat {
		p.Size, p.TxDepth = defSizeLat, defTxLat
	}
	if tool.Verb == Send {
		p.RxDepth = defRxSend
	}
	if tool.Verb == Write && tool.Kind == BW {
		p.Iters = defItersWriteBW
	}
	if tool.Verb == Atomic {
		p.Size = defSizeAtomic
	}
	opts := p.options()
	find := func(short byte, long string) *option {
		for i := range opts {
			if (short != 0 && opts[i].short == short) || (long != "" && opts[i].long == long) {
				return &opts[i]
			}
		}
		return nil
	}
	var positional []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			positional = append(positional, args[i+1:]...)
			i = len(args)
		case a == "-h" || a == "--help":
			return nil, ErrHelp
		case a == "-V" || a == "--version":
			return nil, ErrVersion
		case strings.HasPrefix(a, "--"):
			name, val, hasVal := strings.Cut(a[2:], "=")
			o := find(0, name)
			if o == nil {
				return nil, fmt.Errorf("%s: unknown or unsupported option --%s", tool.Name, name)
			}
			if o.arg && !hasVal {
				if i+1 >= len(args) {
					return nil, fmt.Errorf("%s: option --%s needs a value", tool.Name, name)
				}
				i++
				val = args[i]
			} else if !o.arg && hasVal {
				return nil, fmt.Errorf("%s: option --%s takes no value", tool.Name, name)
			}
			if err := o.set(p, val); err != nil {
				return nil, fmt.Errorf("%s: --%s: %w", tool.Name, name, err)
			}
		case strings.HasPrefix(a, "-") && len(a) > 1:
			for j := 1; j < len(a); j++ {
				o := find(a[j], "")
				if o == nil {
					return nil, fmt.Errorf("%s: unknown or unsupported option -%c", tool.Name, a[j])
				}
				if !o.arg {
					if err := o.set(p, ""); err != nil {
						return nil, fmt.Errorf("%s: -%c: %w", tool.Name, a[j], err)
					}
					continue
				}
				val := a[j+1:]
				if val == "" {
					if i+1 >= len(args) {
						return nil, fmt.Errorf("%s: option -%c needs a value", tool.Name, a[j])
					}
					i++
					val = args[i]
				}
				if err := o.set(p, val); err != nil {
					return nil, fmt.Errorf("%s: -%c: %w", tool.Name, a[j], err)
				}
				break
			}
		default:
			positional = append(positional, a)
		}
	}
	if len(positional) > 1 {
		return nil, fmt.Errorf("%s: one server name at most, got %q", tool.Name, positional)
	}
	if len(positional) == 1 {
		p.ServerName = positional[0]
	}
	if err := p.forceDependencies(); err != nil {
		return nil, fmt.Errorf("%s: %w", tool.Name, err)
	}
	return p, nil
}

// Client says whether this side is the client.
func (p *Params) Client() bool { return p.ServerName != "" }

// forceDependencies applies perftest's rules between parameters
// (force_dependecies and the checks around it), as far as they concern
// the options this package has.
func (p *Params) forceDependencies() error {
	if p.RDMACM {
		switch {
		case p.Conn == verbs.QPTypeUC:
			return errors.New("UC is not supported in librdmacm") // as perftest refuses it
		case p.Local.IsValid():
			return errors.New("-R connects through rnicd's CM agent: not with --local")
		}
	}
	if p.TOS >= 0 && !p.RDMACM {
		return errors.New("TOS only valid for rdma_cm based QP (-R)")
	}
	if p.Duplex {
		switch {
		case p.Tool.Kind != BW:
			return errors.New("-b (bidirectional) is for the bw tests")
		case p.Tool.Verb == Send:
			// perftest's send_bw -b runs both sides' receives and sends
			// in one loop (run_iter_bi), which this package has not.
			return errors.New("-b is built for ib_write_bw, ib_read_bw and ib_atomic_bw, not ib_send_bw")
		case p.Conn == verbs.QPTypeUD:
			return errors.New("-b does not go with UD")
		}
	}
	if p.RunInfinitely {
		switch {
		case p.Tool.Kind != BW:
			return errors.New("run_infinitely exists only in BW tests")
		case p.Tool.Verb == Send:
			// A receiver re-posting without end is perftest's
			// run_iter_bw_infinitely_server, not built here.
			return errors.New("--run_infinitely is built for ib_write_bw, ib_read_bw and ib_atomic_bw, not ib_send_bw")
		case p.All:
			return errors.New("--run_infinitely does not go with -a")
		}
		if p.Duration == 0 {
			p.Duration = defDuration // perftest's DEF_DURATION: a report every 5 s
		}
		p.Margin = 0
	}
	if p.Events {
		switch {
		case p.Tool.Verb == Write:
			return errors.New("events feature not available on WRITE verb")
		case p.Duration > 0 && !p.RunInfinitely:
			return errors.New("duration mode doesn't work with events")
		case p.RunInfinitely:
			return errors.New("run_infinitely does not support events")
		}
	}
	if p.PostList > 1 {
		if p.Tool.Kind != BW {
			return errors.New("post list is supported in BW tests only")
		}
		if p.Duration == 0 && p.Iters%p.PostList != 0 {
			return errors.New("number of iterations must be a multiple of post list size")
		}
		if !p.cqModSet {
			p.CQMod = p.PostList
			p.postListNote = true
		} else if p.PostList%p.CQMod != 0 {
			return errors.New("post list size must be a multiple of CQ moderation")
		}
	}
	switch {
	case p.Output == FullVerbosity:
	case p.Tool.Kind == BW && p.Output == OutputLat:
		return errors.New("output verbosity level for BW can be: bandwidth, message_rate")
	case p.Tool.Kind == Lat && p.Output != OutputLat:
		return errors.New("output verbosity level for LAT can be: latency")
	}
	if p.Duration > 0 && !p.RunInfinitely {
		if p.Margin < 0 {
			p.Margin = p.Duration / 4
		}
		if p.Duration-2*p.Margin <= 0 {
			return errors.New("duration must be longer than twice the margin")
		}
		if p.All {
			return errors.New("-a and -D do not go together")
		}
		p.NoPeak = true
	} else if p.RunInfinitely {
		p.NoPeak = true
	} else {
		if p.TxDepth > p.Iters {
			p.TxDepth = p.Iters
		}
		if p.Tool.Verb == Send && p.RxDepth > p.Iters {
			p.RxDepth = p.Iters
		}
		if (p.Conn == verbs.QPTypeUD || p.Conn == verbs.QPTypeUC) && p.RxDepth == defRxSend {
			p.RxDepth = min(p.Iters, ucMaxRx)
		}
	}
	// perftest keeps the CQ moderation of large messages with -e: fewer
	// events.
	if p.Size > cqModSizeLimit && p.Conn != verbs.QPTypeUD && !p.All && !p.cqModSet && p.PostList == 1 && !p.Events {
		p.CQMod = 1
	}
	if p.CQMod > p.TxDepth {
		p.CQMod = p.TxDepth
	}
	if p.PostList > p.TxDepth {
		// A list longer than the send queue would never be posted.
		return fmt.Errorf("post list size %d exceeds the tx depth %d", p.PostList, p.TxDepth)
	}
	if p.Tool.Verb == Read || p.Tool.Verb == Atomic {
		p.Inline, p.inlineSet = 0, true
	}
	if p.All {
		p.Size = maxSize
	}
	if p.Tool.Verb == Atomic && p.Size != defSizeAtomic {
		return errors.New("message size cannot be changed for atomic tests")
	}
	if p.Conn == verbs.QPTypeUD && p.Inline > maxInlineUD {
		p.Inline = maxInlineUD
	}
	// A workaround perftest has for odd rx depths in SEND.
	if p.Tool.Verb == Send && p.RxDepth%2 == 1 && !p.All && p.Duration == 0 {
		p.RxDepth++
	}
	if p.Iters > 20000 && !p.NoPeak && p.Tool.Kind == BW {
		p.NoPeak = true
	}
	if p.Tool.Verb == Send && p.Tool.Kind == BW && !p.Client() {
		p.NoPeak = true
	}
	return nil
}
