// Command rnicd is the software RoCEv2 NIC daemon. It brings up one device
// (the port and the engine) on one IP address and serves it to
// applications on a control socket, SocketDir()/NAME.sock (see package
// verbs for the directory and package hostif for the protocol).
//
// It always serves its monitor (counters, QP table, trace stream, fault
// injection; see package monitor) over HTTP on a second unix socket,
// SocketDir()/NAME.http, which `rnic stat|trace|inject -d NAME` use;
// --http ADDR serves it on a TCP port too, for a browser or Prometheus.
// --trace FILE writes every trace event as JSON lines, --pcap FILE every
// packet as the wire had it, both in files rotated by size and count
// (10 files of 100 MiB kept by default; limits.go). Its port is always
// behind a fault injector, a pass-through until `rnic inject` sets a fault.
//
// On SIGINT or SIGTERM it moves every QP to ERR, so that each client's
// outstanding work requests complete with WR_FLUSH_ERR, removes its
// sockets and exits 0. SIGUSR1 logs the counters.
//
// Everything it says is one log (log/slog on stderr, -log-format text or
// json); the line "device up" says it serves.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"os/user"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sort"
	"strconv"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/rnicd/rnicd/hostif"
	"github.com/rnicd/rnicd/internal/buildinfo"
	"github.com/rnicd/rnicd/internal/kwait"
	"github.com/rnicd/rnicd/rnic"
	"github.com/rnicd/rnicd/rnic/flowctl"
	"github.com/rnicd/rnicd/rnic/trace"
	"github.com/rnicd/rnicd/verbs"
	"github.com/rnicd/rnicd/wire/fault"
	"github.com/rnicd/rnicd/wire/ibudp"
	"github.com/rnicd/rnicd/wire/pcap"
	"github.com/rnicd/rnicd/wire/steer"
)

func main() {
	kwait.AtLeastTwo()
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return // -h or -version: what was asked for is printed
		}
		var l logged
		if !errors.As(err, &l) {
			// The flags did not parse: no logger yet, and the
			// person at the terminal wants one plain line.
			fmt.Fprintln(os.Stderr, "rnicd:", err)
		}
		os.Exit(1)
	}
}

// logged is an error run has already logged, as the daemon's last line.
type logged struct{ error }

func (l logged) Unwrap() error { return l.error }

// defaultPollIdle is how long the engine polls with nothing to do before
// it sleeps: longer than a ping-pong's turn through two daemons and a
// client on shared cores, so that a message's answer finds it awake.
const defaultPollIdle = 50 * time.Microsecond

// defaultEngines is -engines' default on a machine of cpus CPUs. Each
// engine is a thread that spins while its QPs have work, and so is each
// application thread that polls a CQ (perftest, the rnic tools): on 4
// CPUs or fewer one engine leaves the others to the applications, the
// kernel's softirq that carries the packets, and a peer daemon on the
// same host (the 2-core CI machine runs two daemons and two tools, where
// one engine each is already more spinning threads than cores). Above
// that, one engine per 4 CPUs, the other three for the applications and
// the kernel, as Snap gives a few cores of a host to its engines; at
// most 8, since one QP is one engine's and 8 engines already ran 8 tool
// pairs at once in the benchmarks. Not measured on more than 2 cores yet.
func defaultEngines(cpus int) int {
	if cpus <= 4 {
		return 1
	}
	return min(cpus/4, 8)
}

// config is what the flags say.
type config struct {
	name       string
	addr       netip.Addr
	mode       ibudp.Mode
	mtu        int
	window     int
	ackHold    time.Duration // 0: every ACK at once
	trace      string        // file for the trace's JSON lines
	traceSel   trace.Filter  // what of the trace goes to the file (zero: all)
	pcap       string        // first capture file
	traceLim   fileLimit     // how much of the trace is kept on disk
	pcapLim    fileLimit     // how much of the capture is kept on disk
	pcapFmt    pcap.Format   // the capture files' format
	pcapSnap   int           // bytes kept of each frame (0: whole)
	http       string        // TCP address of the monitor
	limits     hostif.Limits // what each client and all of them may hold (quota.go)
	cc         flowctl.Algorithm
	ccParams   flowctl.Params
	retry7     bool          // retry_cnt 7 retries forever, as rxe
	cpuProf    string        // file for a pprof CPU profile of the whole run
	small      bool          // runs of equal small packets in one UDP_SEGMENT message
	copyPay    bool          // gather payloads into packets instead of sending from the region
	pollIdle   time.Duration // the engine polls this long without work before it sleeps; 0: no engine
	engines    int           // engine threads, each with its QPs and socket of the port
	enginesSet bool          // -engines was given: no falling back to 1
	log        *slog.Logger
	group      string // group allowed on the sockets (mode 0660); "": owner only (0600)
	sockGID    int    // the group's id, -1 for none
	qpMetrics  bool   // series per QP in /metrics
}

func parseFlags(args []string, stdout, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("rnicd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	name := fs.String("d", "rnic0", "device name: the control socket is SocketDir/NAME.sock")
	addr := fs.String("addr", "", "IP address the port owns UDP 4791 on (default: the address of the default route's interface)")
	mode := fs.String("mode", "udp", "how the port reaches the wire: udp (unprivileged) or packet (AF_PACKET, needs CAP_NET_RAW)")
	mtu := fs.Int("mtu", 0, "cap on the active IB MTU: 256, 512, 1024, 2048 or 4096 (0: from the interface)")
	window := fs.Int("window", 0, "most unacknowledged PSNs per RC QP (0: rxe's 128)")
	retry7 := fs.String("retry7", "seven", "what retry_cnt 7 means: seven (IBTA, ConnectX: seven retries, then RETRY_EXC_ERR) or forever (rxe)")
	ackHold := fs.Duration("ack-hold", rnic.DefaultAckHold, "longest a ping-pong QP's ACK waits to go out with its next request (0: ACK at once, as rxe)")
	traceFile := fs.String("trace", "", "write every trace event to `FILE` as JSON lines (FILE the newest; FILE.1, FILE.2, ... the older ones as it rotates; see -trace-size)")
	pcapFile := fs.String("pcap", "", "capture every packet sent and received into `FILE` (pcap, for tshark; FILE the newest; FILE.1, FILE.2, ... the older ones as it rotates; see -pcap-size)")
	pcapFormat := fs.String("pcap-format", "pcap", "write the capture as `FORMAT`: pcap, or pcapng (the device named in its interface block, each packet marked inbound or outbound)")
	m := readMachine()
	c := config{traceLim: defaultFileLimit, pcapLim: defaultFileLimit, limits: defaultLimits(m)}
	fs.IntVar(&c.pcapSnap, "pcap-snap", 0, "keep the first `N` bytes of each captured frame, as tcpdump -s: 128 keeps every header (Ethernet, IP, UDP, BTH, RETH or AETH) and drops the payload and ICRC, so that a bulk run's capture costs a thirtieth of the bytes at MTU 4096 (0: whole frames)")
	limitFlags(fs, &c.limits, m)
	fs.Var(&c.traceLim.size, "trace-size", "start a new trace file before one grows past `BYTES` (suffix K, M or G: KiB, MiB, GiB; 0: one file, unbounded)")
	fs.IntVar(&c.traceLim.files, "trace-files", c.traceLim.files, "keep the newest `N` trace files, removing older ones (0: keep all, unbounded)")
	traceQP := fs.String("trace-qp", "", "write only the events of this QP to the -trace file (`QPN`, decimal or 0x..., as rnic trace -qp): the events of other QPs then cost no more than with no trace")
	fs.BoolVar(&c.traceSel.Packets, "trace-packets", false, "write only the packets (sent, received, dropped by the fault injector) to the -trace file: a fourth to a fifth of the events of a bulk WRITE, which then keeps twice the bandwidth it keeps traced whole")
	fs.Var(&c.pcapLim.size, "pcap-size", "start a new capture file before one grows past `BYTES` (suffix K, M or G: KiB, MiB, GiB; 0: one file, unbounded)")
	fs.IntVar(&c.pcapLim.files, "pcap-files", c.pcapLim.files, "keep the newest `N` capture files, removing older ones, as tcpdump -W (0: keep all, unbounded)")
	cc := fs.String("cc", "dcqcn", "congestion control: dcqcn (as ConnectX; costs nothing until a CNP arrives) or none (as rxe)")
	ccParams := fs.String("cc-params", "", "DCQCN parameters by their mlx5 names, `name=value,...` (rp_ai_rate=5,np_min_time_between_cnps=4; -cc-params help lists them)")
	ccConfig := fs.String("cc-config", "", "read DCQCN parameters from `FILE`, one name=value a line, # comments (applied before -cc-params)")
	fs.BoolVar(&c.qpMetrics, "metrics-qp", false, "add series per QP to /metrics (rnicd_qp_*: queue use, DCQCN rate and alpha); off by default, as their number grows with the QPs")
	httpAddr := fs.String("http", "", "also serve the monitor (web view, /metrics, /api/...) on this TCP `ADDR`ess, host:port")
	fs.BoolVar(&c.copyPay, "copy-payload", false, "copy each payload out of registered memory into its packet before sending, instead of handing the kernel the region itself (for measuring one against the other)")
	fs.BoolVar(&c.small, "small-runs", true, "send runs of equal-sized packets shorter than the MTU (64-byte WRITEs to one peer) as one UDP_SEGMENT message, 3-8x the small-message rate; -small-runs=false sends only runs of full-MTU packets")
	fs.StringVar(&c.group, "group", "", "let the members of `GROUP` (a name or a gid) use the device: its control and monitor sockets get mode 0660 and that group (default: mode 0600, the daemon's own uid and root only; set either way, whatever the umask)")
	fs.IntVar(&c.engines, "engines", defaultEngines(runtime.NumCPU()), "run `N` engine threads, each polling the rings of its share of the QPs (by QPN) and its own socket of the port, to which the daemon's eBPF program steers their packets (more than 1: -mode udp, the polling engine, root for CAP_BPF; default: 1 on 4 CPUs or fewer, else one per 4 CPUs, at most 8)")
	fs.DurationVar(&c.pollIdle, "poll-idle", defaultPollIdle, "the polling engine polls the clients' rings and the port this long with nothing to do before it sleeps (0: no engine, a send and a receive pipeline woken by doorbell messages and the port)")
	fs.StringVar(&c.cpuProf, "cpuprofile", "", "write a pprof CPU profile of the daemon's whole run to `FILE` (go tool pprof)")
	version := fs.Bool("version", false, "print the version and build (VCS revision, time) and exit")
	logFormat := fs.String("log-format", "text", "log lines as `FORMAT`: text (key=value) or json (one object a line)")
	logLevel := fs.String("log-level", "info", "least severe log lines written: `LEVEL` debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if *version {
		fmt.Fprintln(stdout, "rnicd", buildinfo.Read())
		return config{}, flag.ErrHelp
	}
	var err error
	if c.log, err = newLogger(stderr, *logFormat, *logLevel); err != nil {
		return config{}, err
	}
	if fs.NArg() != 0 {
		return config{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	c.sockGID = -1
	if c.group != "" {
		gid, err := lookupGroup(c.group)
		if err != nil {
			return c, fmt.Errorf("-group: %w", err)
		}
		c.sockGID = gid
	}
	c.name, c.mtu, c.window, c.ackHold, c.trace, c.pcap, c.http = *name, *mtu, *window, *ackHold, *traceFile, *pcapFile, *httpAddr
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if c.name == "" || len(c.name) > 64 || c.name != filepath.Base(c.name) || c.name[0] == '.' {
		return c, fmt.Errorf("-d %q: want a plain device name", c.name)
	}
	switch *retry7 {
	case "seven":
	case "forever":
		c.retry7 = true
	default:
		return c, fmt.Errorf("-retry7 %q: want seven or forever", *retry7)
	}
	if c.window < 0 {
		return c, fmt.Errorf("-window %d: want 0 or more", c.window)
	}
	if c.pollIdle < 0 || c.pollIdle > time.Second {
		return c, fmt.Errorf("-poll-idle %v: want 0 to 1s", c.pollIdle)
	}
	if c.engines < 1 || c.engines > steer.MaxQueues {
		return c, fmt.Errorf("-engines %d: want 1 to %d", c.engines, steer.MaxQueues)
	}
	c.enginesSet = set["engines"]
	if c.ackHold < 0 || c.ackHold > time.Second {
		return c, fmt.Errorf("-ack-hold %v: want 0 to 1s", c.ackHold)
	}
	c.ccParams = flowctl.DefaultParams()
	if *ccParams == "help" {
		fmt.Fprintln(stdout, "DCQCN parameters (mlx5's names), default and range:")
		c.ccParams.Each(func(name string, v uint32) {
			lo, hi, _ := flowctl.Range(name)
			fmt.Fprintf(stdout, "  %-32s %10d  [%d, %d]\n", name, v, lo, hi)
		})
		return config{}, flag.ErrHelp
	}
	if *ccConfig != "" {
		b, err := os.ReadFile(*ccConfig)
		if err != nil {
			return c, fmt.Errorf("-cc-config: %w", err)
		}
		if len(b) > 64<<10 {
			return c, fmt.Errorf("-cc-config %s: %d bytes is not a parameter file", *ccConfig, len(b))
		}
		if err := c.ccParams.SetList(string(b)); err != nil {
			return c, fmt.Errorf("-cc-config %s: %w", *ccConfig, err)
		}
	}
	if err := c.ccParams.SetList(*ccParams); err != nil {
		return c, fmt.Errorf("-cc-params: %w", err)
	}
	var ccErr error
	if c.cc, ccErr = flowctl.NewAlgorithm(*cc, c.ccParams, 0); ccErr != nil {
		return c, fmt.Errorf("-cc: %w", ccErr)
	}
	if err := c.traceLim.check("trace", c.trace, set); err != nil {
		return c, err
	}
	if *traceQP != "" {
		n, err := strconv.ParseUint(*traceQP, 0, 24)
		if err != nil || n == 0 {
			return c, fmt.Errorf("-trace-qp %q: want a QPN, 1 to 0xffffff", *traceQP)
		}
		c.traceSel.QPN = uint32(n)
	}
	for _, f := range []string{"trace-qp", "trace-packets"} {
		if set[f] && c.trace == "" {
			return c, fmt.Errorf("-%s without -trace", f)
		}
	}
	if err := c.pcapLim.check("pcap", c.pcap, set); err != nil {
		return c, err
	}
	if c.pcapFmt, err = pcap.ParseFormat(*pcapFormat); err != nil {
		return c, fmt.Errorf("-pcap-format: %w", err)
	}
	if set["pcap-format"] && c.pcap == "" {
		return c, errors.New("-pcap-format without -pcap")
	}
	if c.pcapSnap < 0 || c.pcapSnap > 65535 {
		return c, fmt.Errorf("-pcap-snap %d: want 0 (whole frames) to 65535", c.pcapSnap)
	}
	if set["pcap-snap"] && c.pcap == "" {
		return c, errors.New("-pcap-snap without -pcap")
	}
	if *addr == "" {
		if c.addr, err = defaultAddr(); err != nil {
			return c, fmt.Errorf("no -addr and %w", err)
		}
	} else if c.addr, err = netip.ParseAddr(*addr); err != nil {
		return c, fmt.Errorf("-addr %q: %w", *addr, err)
	}
	switch *mode {
	case "udp":
		c.mode = ibudp.ModeUDP
	case "packet":
		c.mode = ibudp.ModePacket
	default:
		return c, fmt.Errorf("-mode %q: want udp or packet", *mode)
	}
	c.engines, err = fitEngines(c.engines, c.enginesSet, c.pollIdle, c.mode)
	return c, err
}

// fitEngines checks -engines against the other flags: several engines
// need the polling engine and a UDP port. A default that they rule out
// gives way to one engine; the flag, given, is refused.
func fitEngines(engines int, set bool, pollIdle time.Duration, mode ibudp.Mode) (int, error) {
	switch {
	case engines <= 1:
		return engines, nil
	case pollIdle == 0 && set:
		return 0, fmt.Errorf("-engines %d needs the polling engine: -poll-idle 0 runs the pipelines, one pair", engines)
	case mode != ibudp.ModeUDP && set:
		return 0, fmt.Errorf("-engines %d: several engines steer by QPN on a UDP port: -mode udp", engines)
	case pollIdle == 0 || mode != ibudp.ModeUDP:
		return 1, nil
	}
	return engines, nil
}

// defaultAddr is the first IPv4 address of the interface the default
// route leaves by, as rxe would be bound to it; on a host with no IPv4
// default route, the first global IPv6 address of the interface the IPv6
// default route leaves by (rxe has a GID for it too).
func defaultAddr() (netip.Addr, error) {
	for _, family := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		routes, err := netlink.RouteList(nil, family)
		if err != nil {
			return netip.Addr{}, fmt.Errorf("list routes: %w", err)
		}
		for _, r := range routes {
			if r.Dst != nil && !r.Dst.IP.IsUnspecified() {
				continue
			}
			link, err := netlink.LinkByIndex(r.LinkIndex)
			if err != nil {
				continue
			}
			addrs, err := netlink.AddrList(link, family)
			if err != nil {
				continue
			}
			for _, a := range addrs {
				ip, ok := netip.AddrFromSlice(a.IP)
				// IPv6: a global address, usable (not tentative or
				// failed duplicate address detection).
				if ok && (family == netlink.FAMILY_V4 || ip.IsGlobalUnicast() && a.Flags&(unix.IFA_F_TENTATIVE|unix.IFA_F_DADFAILED) == 0) {
					return ip.Unmap(), nil
				}
			}
		}
	}
	return netip.Addr{}, errors.New("no default route with an IPv4 or a global IPv6 address")
}

// lookupGroup returns the gid of group, a name or a number.
func lookupGroup(group string) (int, error) {
	if g, err := user.LookupGroup(group); err == nil {
		return strconv.Atoi(g.Gid)
	}
	if g, err := user.LookupGroupId(group); err == nil {
		return strconv.Atoi(g.Gid)
	}
	return -1, fmt.Errorf("no group %q", group)
}

// socketMode is the mode of the daemon's sockets: connecting to a unix
// socket needs write permission on it, so 0600 lets in the daemon's uid
// (and root) only, 0660 the socket's group too.
func socketMode(gid int) os.FileMode {
	if gid >= 0 {
		return 0o660
	}
	return 0o600
}

// listenUnix listens on a unix socket at path with mode (and group gid,
// if not -1), set explicitly: the umask the daemon was started under
// (000 made the socket srwxrwxrwx, open to every uid) plays no part.
// The socket is bound under a umask of 0177, so that it is never open
// to others between bind and chmod; the umask is the process's, and
// nothing else creates files while the daemon starts.
func listenUnix(network, path string, mode os.FileMode, gid int) (*net.UnixListener, error) {
	old := unix.Umask(0o177)
	l, err := net.ListenUnix(network, &net.UnixAddr{Name: path, Net: network})
	unix.Umask(old)
	if err != nil {
		return nil, err
	}
	if gid >= 0 {
		if err := os.Lchown(path, -1, gid); err != nil {
			l.Close()
			return nil, fmt.Errorf("give %s to group %d: %w", path, gid, err)
		}
	}
	if err := os.Chmod(path, mode); err != nil {
		l.Close()
		return nil, fmt.Errorf("chmod %s: %w", path, err)
	}
	return l, nil
}

// listen serves the control socket at path: it refuses if a live daemon
// answers there, and removes a stale socket left by one that died.
func listen(path string, mode os.FileMode, gid int) (*net.UnixListener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("socket directory: %w", err)
	}
	if c, err := net.Dial("unixpacket", path); err == nil {
		c.Close()
		return nil, fmt.Errorf("%s: another rnicd serves this device", path)
	} else if _, serr := os.Lstat(path); serr == nil {
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("remove stale socket: %w", err)
		}
	}
	l, err := listenUnix("unixpacket", path, mode, gid)
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	l.SetUnlinkOnClose(false) // removed by run, after the flush
	return l, nil
}

func run(args []string, stdout, stderr io.Writer) error {
	// Raised before the flags: the default limits are sized from it.
	nofile, nofileErr := raiseNofile()
	c, err := parseFlags(args, stdout, stderr)
	if err != nil {
		return err
	}
	log := c.log
	if err := serve(c, nofile, nofileErr); err != nil {
		log.Error("exiting", "err", err)
		return logged{err}
	}
	return nil
}

// newLogger is the daemon's one logger: every line it writes, from the
// device-up line to the counters at exit, goes through it, so that a
// collector reading -log-format json gets nothing else on the stream.
func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("-log-level %q: want debug, info, warn or error", level)
	}
	o := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, o)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, o)), nil
	}
	return nil, fmt.Errorf("-log-format %q: want text or json", format)
}

// serve runs the device c describes until a signal or a failure.
func serve(c config, nofile uint64, nofileErr error) error {
	log := c.log
	if c.cpuProf != "" {
		stopProf, err := startCPUProfile(c.cpuProf)
		if err != nil {
			return err
		}
		defer stopProf()
	}
	if nofileErr != nil {
		log.Warn("descriptors: keeping the soft limit", "err", nofileErr)
	}
	// Signals are caught before the ready line, so whoever waits for it
	// may signal at once.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	defer signal.Stop(usr1)

	// The device node comes before the socket: a program that finds the
	// socket (a service started after it, a test waiting for it) may list
	// devices by their nodes at once, as UCX does.
	node := makeDevNode(log, c.name, socketMode(c.sockGID), c.sockGID)
	defer node.remove()
	path := verbs.SocketPath(c.name)
	l, err := listen(path, socketMode(c.sockGID), c.sockGID)
	if err != nil {
		return err
	}
	pcfg := ibudp.Config{Addr: c.addr, Mode: c.mode, MTU: c.mtu, WaitInKernel: true, FullMTURunsOnly: !c.small}
	if c.engines > 1 {
		pcfg.Queues = c.engines
		// Each engine's thread and its port's waiter hold a P at
		// times; the control socket's goroutines need one of their own.
		if n := 2*c.engines + 1; runtime.GOMAXPROCS(0) < n && os.Getenv("GOMAXPROCS") == "" {
			runtime.GOMAXPROCS(n)
		}
	}
	// The daemon alone holds the port, as a NIC alone holds its wire:
	// no client is handed a socket of it. With several engines the port
	// is a SO_REUSEPORT group of the daemon's own sockets, one an
	// engine, whose steering program takes no other member
	// (steer.Group).
	port, err := ibudp.Open(pcfg)
	if err != nil && c.engines > 1 && !c.enginesSet {
		// The default on a large machine, without the privilege of
		// loading the steering program: one engine, as a user's
		// daemon in UDP mode needs no privilege.
		log.Warn("several engines need a steered port, which needs CAP_BPF: running one", "engines", c.engines, "err", err)
		c.engines, pcfg.Queues = 1, 0
		port, err = ibudp.Open(pcfg)
	}
	if err != nil {
		l.Close()
		os.Remove(path)
		if c.engines > 1 {
			return fmt.Errorf("open port for %d engines (a steered port needs root): %w", c.engines, err)
		}
		return fmt.Errorf("open port: %w", err)
	}
	// The injector is a pass-through until `rnic inject` sets a fault;
	// the tracer records only while someone reads it.
	var faulty *fault.Injector
	var devPort ibudp.Port
	var enginePorts []ibudp.Port
	closePorts := func() {
		faulty.Close()
		for _, p := range enginePorts {
			p.Close()
		}
	}
	if p, ok := port.(ibudp.Poller); ok && c.pollIdle > 0 {
		// The engine polls the port through the injector.
		fp := fault.NewPoller(p, time.Now().UnixNano())
		faulty, devPort = fp.Injector, fp
	} else {
		faulty = fault.New(port, time.Now().UnixNano())
		devPort = faulty
	}
	for q := 1; q < c.engines; q++ {
		qp, err := openEnginePort(pcfg, ibudp.SteeringOf(port), q)
		if err != nil {
			closePorts()
			l.Close()
			os.Remove(path)
			return err
		}
		// One `rnic inject` impairs every engine's socket.
		fp := fault.NewPoller(qp.(ibudp.Poller), time.Now().UnixNano()+int64(q))
		faulty.Follow(fp.Injector)
		enginePorts = append(enginePorts, fp)
	}
	tr := trace.New(0)
	ackHold := c.ackHold
	if ackHold == 0 {
		ackHold = -1 // rnic.Config's zero value is the default hold
	}
	dev, err := rnic.Open(rnic.Config{Port: devPort, EnginePorts: enginePorts, PollIdle: c.pollIdle, Name: c.name, Trace: tr, Window: c.window, AckHold: ackHold,
		CC: c.cc, CCParams: c.ccParams,
		Retry7Forever: c.retry7, CopyPayload: c.copyPay})
	if err != nil {
		closePorts()
		l.Close()
		os.Remove(path)
		return fmt.Errorf("start device: %w", err)
	}
	srv := hostif.NewServer(hostif.Config{Device: dev, Name: c.name, Log: log, Limits: c.limits})
	log.Info("limits", "daemon", c.limits.Daemon, "client", c.limits.Client, "user", c.limits.User)
	// The CM agent on QP1 serves rdma_cm's requests (hostif's KindCM*),
	// with the node GUID ibv_devinfo shows as its CA GUID. It starts
	// before the monitor, which shows its counters.
	if err := srv.StartCM(dev.GSI(), verbs.NodeGUID(dev.QueryPort().Addr)); err != nil {
		dev.Close()
		l.Close()
		os.Remove(path)
		return err
	}
	obs, err := startObservers(c, dev, faulty, srv.CMCounters, tr, verbs.MonitorSocketPath(c.name), log, srv.AuthorizeAdmin)
	if err != nil {
		srv.StopCM()
		dev.Close()
		l.Close()
		os.Remove(path)
		return err
	}
	portStop := make(chan struct{})
	defer close(portStop)
	watchPort(log, dev, srv, portStop)
	// A serving goroutine that stops leaves a daemon that is up but deaf
	// (a Serve that returned on EMFILE went unnoticed): whichever stops,
	// the daemon stops too, non-zero, with the reason.
	go func() {
		err := srv.Serve(l)
		if err == nil {
			err = errors.New("listener closed")
		}
		obs.stopped <- fmt.Errorf("control socket %s stopped serving: %w", path, err)
	}()
	// "device up" is the ready line: whoever starts the daemon waits
	// for it (the control socket and the monitor are served from here).
	pa := dev.QueryPort()
	bi := buildinfo.Read()
	up := []any{"name", c.name, "addr", pa.Addr, "mode", c.mode, "gid", pa.GID, "active_mtu", pa.ActiveMTU,
		"socket", path, "socket_mode", fmt.Sprintf("%#o", socketMode(c.sockGID)), "socket_group", c.group,
		"monitor", verbs.MonitorSocketPath(c.name), "max_fds", nofile, "engines", dev.Observer().Engines(),
		"version", bi.Version, "revision", bi.Revision}
	if obs.httpAddr != nil {
		up = append(up, "http", obs.httpAddr.String())
	}
	log.Info("device up", up...)
	if err := sdNotify("READY=1"); err != nil {
		log.Warn("could not tell systemd the device is up", "err", err)
	}

	// Only a capture or a trace file needs a tick: any armed timer costs
	// every round trip a few microseconds in the Go scheduler.
	var tick <-chan time.Time
	if c.pcap != "" || c.trace != "" {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-usr1:
			logCounters(log, dev, srv)
		case <-tick:
			obs.tick()
		case <-ctx.Done():
			log.Info("stopping: every QP to ERR, outstanding work flushed")
			return stopAll(log, dev, srv, obs, path, nil)
		case err := <-obs.stopped:
			log.Error("stopping: a server stopped", "err", err)
			return stopAll(log, dev, srv, obs, path, err)
		}
	}
}

// stopAll stops serving, moves every QP to ERR (flushing outstanding
// work), closes the device and the observers, and returns why it stopped
// (nil: a signal), else the device's close error.
func stopAll(log *slog.Logger, dev *rnic.Device, srv *hostif.Server, obs *observers, path string, why error) error {
	srv.Shutdown()
	obs.stopServing()
	os.Remove(path)
	logCounters(log, dev, srv)
	err := dev.Close()
	obs.close()
	if why != nil {
		return why
	}
	return err
}

// raiseNofile raises the soft limit on open descriptors to the hard
// limit and returns it: every client's CQ holds an eventfd and every
// region a memfd, and the soft limit (1,024 on most systems) is one a
// single client exhausts with 1,024 CQs. Go's runtime does the same at
// start since Go 1.19; doing it here says so, and keeps it if that
// changes.
func raiseNofile() (uint64, error) {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return 0, fmt.Errorf("RLIMIT_NOFILE: %w", err)
	}
	if lim.Cur < lim.Max {
		lim.Cur = lim.Max
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
			return 0, fmt.Errorf("raise RLIMIT_NOFILE to %d: %w", lim.Max, err)
		}
	}
	return lim.Cur, nil
}

// logCounters logs the nonzero counters, as `rdma statistic show` shows
// them, by name in order: one "counters" line.
func logCounters(log *slog.Logger, dev *rnic.Device, srv *hostif.Server) {
	m := dev.Observer().Counters()
	for k, v := range srv.Counters() {
		m[k] = v
	}
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	attrs := make([]slog.Attr, 0, len(names))
	for _, k := range names {
		if m[k] != 0 {
			attrs = append(attrs, slog.Uint64(k, m[k]))
		}
	}
	log.LogAttrs(context.Background(), slog.LevelInfo, "counters", attrs...)
}

// startCPUProfile profiles the process into path until the returned
// function runs: off unless -cpuprofile asks, since the profiler's signal
// every 10 ms costs every thread a little.
func startCPUProfile(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("-cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("-cpuprofile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// openEnginePort opens engine q's socket of the steered port and its port.
func openEnginePort(pcfg ibudp.Config, s *steer.Group, q int) (ibudp.Port, error) {
	fd, err := s.Queue(q)
	if err != nil {
		return nil, fmt.Errorf("engine %d: %w", q, err)
	}
	pcfg.Queues, pcfg.SocketFD = 0, fd
	p, err := ibudp.Open(pcfg)
	if err != nil {
		return nil, fmt.Errorf("engine %d's port: %w", q, err)
	}
	return p, nil
}
