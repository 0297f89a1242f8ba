// Package perftest re-makes perftest's ib_send_bw, ib_write_bw,
// ib_read_bw, ib_atomic_bw, ib_send_lat, ib_write_lat and ib_read_lat on
// the verbs package, so that each pairs with the real binary (perftest 4.5
// as Debian 12 ships it, on rxe) in either role.
//
// It owns the three parts of a perftest run: the out-of-band exchange on
// TCP 18515 (oob.go: version string, system data, MTU, the 108-byte
// lid:out_reads:qpn:psn:rkey:vaddr:gid:srqn text per QP, the handshakes
// used as barriers, the bandwidth report the client sends the server,
// "done"), the test itself on the NIC (run.go: perftest's buffers, QP
// attributes, CQ moderation, and each test's pattern on the wire), and the
// output (report.go: the header block, the address lines and the result
// tables, with perftest's formulas for peak and average bandwidth and its
// latency statistics). Flags follow perftest's (params.go).
package perftest

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
)

// Find returns the tool of that name.
func Find(name string) (Tool, bool) {
	for _, t := range Tools {
		if t.Name == name {
			return t, true
		}
	}
	return Tool{}, false
}

// Main runs a tool with its command-line arguments and returns the exit
// status perftest would: 0, 1 for a set-up failure, 17 for a failed run.
func Main(tool Tool, args []string, cfg Config) int {
	p, err := Parse(tool, args)
	if errors.Is(err, ErrHelp) {
		Usage(cfg.Stdout, tool)
		return 0
	}
	if errors.Is(err, ErrVersion) {
		fmt.Fprintf(cfg.Stdout, "Version: %s\n", cfg.Version)
		return 0
	}
	if err != nil {
		fmt.Fprintln(cfg.Stderr, err)
		fmt.Fprintf(cfg.Stderr, "run '%s -h' for the flags\n", tool.Name)
		return 1
	}
	if p.RunInfinitely && !p.Duplex && cfg.Stop == nil {
		// perftest ends a --run_infinitely client on SIGINT with its
		// closing steps, which tell the server the run is over.
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, os.Interrupt)
		defer signal.Stop(sig)
		stop, done := make(chan struct{}), make(chan struct{})
		defer close(done)
		go func() {
			select {
			case <-sig:
				// A second ^C ends the process, should the closing
				// steps hang.
				signal.Stop(sig)
				close(stop)
			case <-done:
			}
		}()
		cfg.Stop = stop
	}
	if err := Run(p, cfg); err != nil {
		fmt.Fprintf(cfg.Stderr, " %s: %v\n", tool.Name, err)
		if errors.Is(err, ErrRun) {
			return 17
		}
		return 1
	}
	return 0
}

// Usage writes the flags this package knows.
func Usage(w io.Writer, tool Tool) {
	fmt.Fprintf(w, "Usage:\n  %s            start a server and wait for connection\n  %s <host>     connect to server at <host>\n\nOptions:\n", tool.Name, tool.Name)
	lines := []string{
		"  -a, --all                 Run sizes from 2 till 2^23",
		"  -A, --atomic_type=<type>  CMP_AND_SWAP or FETCH_AND_ADD (atomic tests; default FETCH_AND_ADD)",
		"  -c, --connection=<type>   RC, UC or UD (default RC)",
		"  -d, --ib-dev=<dev>        rnicd device (default the first one running)",
		"  -D, --duration=<sec>      Run for this many seconds",
		"  -f, --margin=<sec>        Warm-up and cool-down of a -D run (default duration/4)",
		"  -e, --events              Sleep on CQ events (default poll; not on WRITE)",
		"  -F, --CPU-freq            Accepted; the clock is the kernel's",
		"  -I, --inline_size=<size>  Max size of message to be sent inline (default 0)",
		"  -m, --mtu=<mtu>           256 .. 4096 (default the port's active MTU)",
		"  -n, --iters=<iters>       Number of exchanges (at least 5)",
		"  -N, --noPeak              Don't compute the peak bandwidth",
		"  -o, --outs=<num>          Outstanding reads/atomics (default the device's maximum)",
		"  -p, --port=<port>         TCP port of the exchange (default 18515)",
		"  -q, --qp=<num>            Number of QPs (bw tests)",
		"  -Q, --cq-mod              Signal a completion every this many WRs (default 100)",
		"  -R, --rdma_cm             Connect the exchange and the QPs through rdma_cm (RC)",
		"  -r, --rx-depth=<dep>      Receive queue depth (send tests, default 512)",
		"  -s, --size=<size>         Message size (K, M, G suffixes: KiB, MiB, GiB)",
		"  -V, --version             Display the version",
		"  -t, --tx-depth=<dep>      Send queue depth (default 128 bw, 1 lat)",
		"  -u, --qp-timeout=<t>      QP local ACK timeout (default 14)",
		"  -U, --report-unsorted     Print every latency sample (lat tests)",
		"  -x, --gid-index=<index>   Accepted; the port's RoCEv2 GID is used",
		"  -b, --bidirectional       Measure bidirectional bandwidth: both sides send, each prints the sum (write, read, atomic bw)",
		"  -l, --post_list=<size>    Post a list of this many WRs per post_send (bw tests; CQ moderation follows)",
		"  -S, --sl=<sl>             SL, 0..15 (default 0; a RoCEv2 packet without VLAN carries none)",
		"  -T, --tos=<tos value>     With -R, the IP TOS byte of the connections, 0..255",
		"      --output=<units>      Print only one figure: bandwidth, message_rate (bw) or latency (lat)",
		"      --run_infinitely      Run until SIGINT, a report every -D seconds (default 5; write, read, atomic bw)",
		"      --source_ip=<addr>    Local address of the exchange (client) or the one listened on (server); with -R rdma_cm's",
		"      --report_gbits        Report bandwidth in Gb/sec",
		"      --local=<addr>        Run an in-process NIC on this address instead of reaching rnicd",
		"      --daemon              Accepted and ignored (the QPs always run in rnicd)",
	}
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
}
