package interop

// The cases: which tool runs with which arguments, how each side's command
// line is made, and how cases are grouped into phases.

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// tcase is one tool run; the harness runs it with rxe as client and as
// server.
type tcase struct {
	tool string   // perftest or ibverbs-utils name
	args []string // size, iterations, connection type...
	loss bool     // also run under 3% loss each way
	udp  bool     // rnic on the rnicd in UDP mode (-mode udp, the default), not packet mode
	// clib: the host runs Debian's own tool, the same binary as the VM's,
	// on rnicd through the C library (clib/) instead of rnic's clone.
	clib bool
	// ipv6: over rxe's IPv6 GID (its index found in the VM) and an rnicd
	// on hostAddr6. The TCP exchange goes over IPv6 too where the VM's
	// tool can (exchange6), else over IPv4 while RoCE runs over IPv6.
	ipv6 bool
	// impair, if set, is installed on the tap for the case alone: the
	// case runs in phases of its own, in both roles.
	impair *impairment
	// deadline, if set, bounds one run of the case on either side instead
	// of the one sized from its arguments (sizedDeadline).
	deadline time.Duration
}

func (c tcase) name() string {
	n := c.tool + " " + strings.Join(c.args, " ")
	if c.udp {
		n += " (rnicd -mode udp)"
	}
	if c.clib {
		n += " (Debian's on clib)"
	}
	if c.ipv6 {
		n += " (IPv6)"
	}
	return n
}

// isPingpong tells rdma-core's pingpong (-g for the GID index) from
// perftest (-x).
func (c tcase) isPingpong() bool { return strings.HasPrefix(c.tool, "ibv_") }

// isRdmaCM tells librdmacm's example tools (rping): they connect through
// rdma_cm, by address and port (-a, -p), over QP1's CM MADs, and take no
// device (their -d is debug) and no GID index.
func (c tcase) isRdmaCM() bool { return c.tool == "rping" }

// isUCX tells UCX's ucx_perftest: its server takes only the port (the
// client sends it the test), its client the server's address first, and
// each side picks its device and transports from the environment
// (ucxEnv).
func (c tcase) isUCX() bool { return c.tool == "ucx_perftest" }

// isRstream tells librdmacm's rstream and riostream: rsockets over an
// RC connection that rdma_cm makes, its server bound to its own address
// (-b), its client naming the server's (-s) and binding its own
// (riostream's client ignores -b: the host runs it with rnicd's socket
// alone, so that rdma_cm cannot route it through another rnicd).
func (c tcase) isRstream() bool { return c.tool == "rstream" || c.tool == "riostream" }

// isMckey tells librdmacm's mckey: UD multicast, a receiver (the server)
// and a sender (-s, the client) that each join mckeyGroup by rdma_cm,
// bound to their own address (-b); no connection and no port. rxe's
// side joins the group on the VM's interface (IGMP), rnicd's port on the
// tap.
func (c tcase) isMckey() bool { return c.tool == "mckey" }

// mckeyGroup is the mckey cases' IPv4 multicast group.
const mckeyGroup = "239.255.0.91"

// ucxTLS is the transports of the UCX cases: rc_verbs carries every
// message, and ud_verbs is only the auxiliary one that carries UCP's
// wireup (UCX_TLS=rc_verbs alone fails: "Destination is unreachable",
// no transport to send the wireup on); UCX_LOG_LEVEL=info makes each
// side print its endpoint's lanes (ep_cfg), which ucxCheck reads.
// UCX_HANDLE_ERRORS=none leaves out the backtrace a failing side
// prints, which pushes its reason out of the tail the verdict shows.
const ucxTLS = "UCX_TLS=rc_verbs,ud_verbs:aux UCX_LOG_LEVEL=info UCX_HANDLE_ERRORS=none"

// ucxRxe is what UCX 1.13 needs on rxe alone: rxe gives a user QP's UD
// completion no RoCE packet type (sl 0; rxe_resp.c sets
// network_hdr_type for kernel QPs only), so UCX, which reads the type
// from sl as a ConnectX writes it, looks for the destination GID where
// rxe wrote the IPv4 header and drops every wireup datagram: both ends'
// UD endpoints timed out ("unhandled timeout error"), in both roles.
// rnicd's completion says IPv4 in sl, and its side keeps the check.
const ucxRxe = "UCX_UD_VERBS_ETH_DGID_CHECK=n"

// ucxEnv is the environment of a UCX case's side on device dev.
func ucxEnv(dev string) []string {
	env := append([]string{"UCX_NET_DEVICES=" + dev + ":1"}, strings.Fields(ucxTLS)...)
	if dev == "rxe0" {
		env = append(env, ucxRxe)
	}
	return env
}

// cmAddrs are the addresses an rdma_cm tool names: rnicd's and the VM's,
// IPv6 for an IPv6 case (rnicd's on device6).
func (c tcase) cmAddrs() (host, vm string) {
	if c.ipv6 {
		return hostAddr6, vmAddr6
	}
	return hostAddr, vmAddr
}

// connectsByCM says whether c's QPs connect through rdma_cm, so that the
// disconnect must leave both sides clean (the VM's cmCheck, rnicd's
// checkCMClean): the rdma_cm tools and perftest's -R.
func (c tcase) connectsByCM() bool {
	if c.isRdmaCM() || c.isRstream() || c.isMckey() {
		return true
	}
	for _, a := range c.args {
		if a == "-R" || a == "--rdma_cm" {
			return true
		}
	}
	return false
}

// exchange6 says whether the TCP exchange of an IPv6 case goes over IPv6:
// only a pingpong with rnic as the server. Debian 12's perftest (4.5)
// resolves and listens with AF_INET only (its --ipv6 picks a GID, not the
// exchange's family); rdma-core's pingpong client resolves with
// AF_UNSPEC, but its server binds the first passive address glibc
// returns, 0.0.0.0, so it takes IPv4 clients only.
func (c tcase) exchange6(rxeClient bool) bool { return c.ipv6 && c.isPingpong() && rxeClient }

func matrix(ibMTU int) []tcase {
	sizes := []string{"1", strconv.Itoa(ibMTU), strconv.Itoa(ibMTU + 1), "1048576"}
	var cs []tcase
	for _, tool := range []string{"ib_write_bw", "ib_read_bw", "ib_send_bw"} {
		for _, s := range sizes {
			n := "50"
			if s == "1048576" {
				n = "8"
			}
			cs = append(cs, tcase{tool: tool, args: []string{"-s", s, "-n", n}, loss: ibMTU == 1024 && s == "1048576"})
		}
	}
	cs = append(cs,
		tcase{tool: "ib_send_bw", args: []string{"-c", "UC", "-s", "1", "-n", "50"}},
		tcase{tool: "ib_send_bw", args: []string{"-c", "UC", "-s", strconv.Itoa(ibMTU + 1), "-n", "50"}},
		tcase{tool: "ib_write_bw", args: []string{"-c", "UC", "-s", "65536", "-n", "20"}},
		tcase{tool: "ib_send_bw", args: []string{"-c", "UD", "-s", "1", "-n", "50"}},
		tcase{tool: "ib_send_bw", args: []string{"-c", "UD", "-s", strconv.Itoa(ibMTU), "-n", "50"}},
		tcase{tool: "ib_atomic_bw", args: []string{"-A", "FETCH_AND_ADD", "-n", "50"}},
		tcase{tool: "ib_atomic_bw", args: []string{"-A", "CMP_AND_SWAP", "-n", "50"}},
		tcase{tool: "ib_send_lat", args: []string{"-s", "1", "-n", "50"}},
		tcase{tool: "ib_send_lat", args: []string{"-s", strconv.Itoa(ibMTU + 1), "-n", "50"}},
		tcase{tool: "ib_write_lat", args: []string{"-s", "1", "-n", "50"}},
		tcase{tool: "ib_write_lat", args: []string{"-s", strconv.Itoa(ibMTU + 1), "-n", "50"}},
		tcase{tool: "ib_read_lat", args: []string{"-s", "1", "-n", "50"}},
		tcase{tool: "ib_read_lat", args: []string{"-s", strconv.Itoa(ibMTU + 1), "-n", "50"}},
		tcase{tool: "ibv_rc_pingpong", args: []string{"-s", "4096", "-n", "50", "--chk"}},
		tcase{tool: "ibv_ud_pingpong", args: []string{"-s", "512", "-n", "50", "--chk"}},
		tcase{tool: "ibv_srq_pingpong", args: []string{"-s", "4096", "-n", "50", "-q", "4", "--chk"}},
		// rnicd's default port mode, UDP (an ordinary socket, with UDP_SEGMENT
		// runs), against rxe.
		tcase{tool: "ib_write_bw", args: []string{"-s", "65536", "-n", "20"}, udp: true},
		tcase{tool: "ib_send_lat", args: []string{"-s", strconv.Itoa(ibMTU + 1), "-n", "50"}, udp: true},
		// Small messages: posts behind one in flight wait for its ACK or
		// the next poll and leave as one run (rnic's post coalescing),
		// which rxe takes packet by packet.
		tcase{tool: "ib_write_bw", args: []string{"-s", "64", "-n", "2000"}, udp: true},
		tcase{tool: "ib_send_bw", args: []string{"-s", "64", "-n", "2000"}, udp: true},
		tcase{tool: "ibv_rc_pingpong", args: []string{"-s", "4096", "-n", "50", "--chk"}, udp: true},
		// The same unmodified binary on both ends, one end in software
		// without a kernel module.
		tcase{tool: "ib_write_bw", args: []string{"-s", "65536", "-n", "20"}, clib: true},
		tcase{tool: "ib_send_lat", args: []string{"-s", strconv.Itoa(ibMTU + 1), "-n", "50"}, clib: true},
		tcase{tool: "ibv_rc_pingpong", args: []string{"-s", "4096", "-n", "50", "--chk"}, clib: true},
		// Over IPv6: rxe's IPv6 GID, rnicd's port on 2001:db8:1::1.
		tcase{tool: "ib_write_bw", args: []string{"-s", "65536", "-n", "20"}, ipv6: true},
		tcase{tool: "ib_read_bw", args: []string{"-s", strconv.Itoa(ibMTU + 1), "-n", "50"}, ipv6: true},
		tcase{tool: "ib_send_bw", args: []string{"-s", strconv.Itoa(ibMTU + 1), "-n", "50"}, ipv6: true},
		tcase{tool: "ib_atomic_bw", args: []string{"-A", "FETCH_AND_ADD", "-n", "50"}, ipv6: true},
		tcase{tool: "ibv_rc_pingpong", args: []string{"-s", "4096", "-n", "50", "--chk"}, ipv6: true},
		// rdma_cm: the connection through QP1's CM MADs (REQ, REP, RTU,
		// then DREQ, DREP), 100 pings with the data checked by the
		// client and each ping's data in both sides' output (rpingCheck).
		// A ping is four SENDs, a READ and a WRITE: 100 take under a
		// second even in the VM, the deadline is for a connect that hangs.
		tcase{tool: "rping", args: []string{"-C", "100", "-v", "-V"}, deadline: 60 * time.Second},
		// The same over IPv6: rxe's IPv6 GID, the cma_hdr's IPv6
		// addresses, rnicd's port on 2001:db8:1::1.
		tcase{tool: "rping", args: []string{"-C", "100", "-v", "-V"}, deadline: 60 * time.Second, ipv6: true},
		// -R: the exchange over a control QP and the test's QPs connected
		// by rdma_cm, CM MADs on QP1 both ways (rnic's CM agent and
		// rxe's kernel CM).
		tcase{tool: "ib_write_bw", args: []string{"-R", "-s", "65536", "-n", "20"}},
		tcase{tool: "ib_send_bw", args: []string{"-R", "-s", strconv.Itoa(ibMTU + 1), "-n", "50"}},
		tcase{tool: "ib_read_lat", args: []string{"-R", "-s", strconv.Itoa(ibMTU + 1), "-n", "50"}},
		// Atomics need the remote access the CM grants with responder
		// resources; -q 2 is three CM connections and two DREQs a run.
		tcase{tool: "ib_atomic_bw", args: []string{"-R", "-A", "CMP_AND_SWAP", "-n", "50"}},
		tcase{tool: "ib_write_bw", args: []string{"-R", "-q", "2", "-s", "4096", "-n", "50"}},
		// UD with -R: the test's QPs in rdma_cm's UDP port space, each
		// resolved by SIDR_REQ/SIDR_REP (no connection, no DREQ); the
		// latency client tells the server its QPN by a SEND with
		// immediate, and the server answers to the GRH's address.
		tcase{tool: "ib_send_bw", args: []string{"-c", "UD", "-R", "-s", strconv.Itoa(ibMTU), "-n", "50"}},
		tcase{tool: "ib_send_lat", args: []string{"-c", "UD", "-R", "-s", "1", "-n", "50"}},
		tcase{tool: "ib_send_bw", args: []string{"-c", "UD", "-R", "-q", "2", "-s", "512", "-n", "50"}},
		// Debian's rping on both ends, the host's on rnicd through the C
		// library's librdmacm: the same unmodified binary, one end's
		// rdma_cm without a kernel.
		tcase{tool: "rping", args: []string{"-C", "100", "-v", "-V"}, deadline: 60 * time.Second, clib: true},
		// Completion events (-e): each side sleeps in ibv_get_cq_event
		// on a channel, rnic's clone and Debian's tool on clib. perftest
		// takes no -e on WRITE ("Events feature not available on WRITE
		// verb", before it opens a device: on rxe too), so SEND carries
		// them, in a stream. The ping-pong (ib_send_lat -e, Debian's on
		// clib) stalled on both sides in 1 of 4 runs against rxe, with
		// rxe as client, in a .ci/run beside two other suites; until
		// that is understood it is not a case (README).
		tcase{tool: "ib_send_bw", args: []string{"-e", "-s", "65536", "-n", "20"}},
		tcase{tool: "ib_send_bw", args: []string{"-e", "-s", "65536", "-n", "20"}, clib: true},
		// DCQCN's notification point against rxe: nftables marks 10% of
		// the RoCE packets on the tap CE each way, rxe's to rnicd among
		// them (WRITEs with rxe as client, ACKs with rxe as server);
		// rnicd answers each with a CNP to rxe's QP, which rxe ignores,
		// and the transfer completes.
		tcase{tool: "ib_write_bw", args: []string{"-s", "65536", "-n", "100"}, impair: markCE(10, cnpsToRxe)},
	)
	// rsockets: Debian's rstream on both ends, the host's on the C
	// library's rsocket.c, rdma-core's protocol (connection data in the
	// REQ and REP, WRITE WITH IMMEDIATE messages, credit and buffer
	// updates, DISCONNECT at the end) with every byte verified (-T v),
	// blocking calls (-T b). 100000 bytes a transfer is two messages
	// past rsockets' 64 KiB largest; 50 each way fill the 128 KiB
	// receive buffer's halves over and over.
	cs = append(cs, tcase{tool: "rstream", args: []string{"-T", "b", "-T", "v", "-S", "100000", "-C", "50"}, clib: true, deadline: 120 * time.Second})
	// rsockets' iomap: Debian's riostream on both ends, each riomapping
	// its buffer (an IOMAP_SGL into the peer's target iomap, behind its
	// target list) and riowriting into the other's (RDMA WRITEs at the
	// peer's entry), every byte verified (-T v).
	cs = append(cs, tcase{tool: "riostream", args: []string{"-T", "v", "-S", "100000", "-C", "50"}, clib: true, deadline: 120 * time.Second})
	// UD multicast: Debian's mckey on both ends, the host's on the C
	// library's rdma_join_multicast and the UDP-mode rnicd's group
	// socket: 10 datagrams of 100 bytes from the sender to the group,
	// which the receiver takes (it waits for all 10). The sender sends
	// 3 s after its join, long after the receiver's.
	cs = append(cs, tcase{tool: "mckey", args: []string{"-C", "10", "-S", "100"}, clib: true, udp: true, deadline: 60 * time.Second})
	// Debian's UCX 1.13 on both ends over rc_verbs: UCP's tagged
	// latency (SENDs) and PUT bandwidth (RDMA WRITEs, 64 KiB: 64 packets
	// at MTU 1024), the wireup over ud_verbs. At one MTU only, the one
	// with the more packets a message: the suite has 5 minutes, and UCX
	// takes a second or two to start in the emulated VM. The deadline is
	// for a side that never comes.
	if ibMTU == 1024 {
		cs = append(cs,
			tcase{tool: "ucx_perftest", args: []string{"-t", "tag_lat", "-n", "100"}, clib: true, deadline: 60 * time.Second},
			tcase{tool: "ucx_perftest", args: []string{"-t", "ucp_put_bw", "-s", "65536", "-n", "50"}, clib: true, deadline: 60 * time.Second})
	}
	return cs
}

// cnpsToRxe is the CE case's check: rnicd counted the CE-marked packets
// rxe sent it and answered every one with a CNP (np_min_time_between_cnps
// is 0 by default), and no CNP came back (rxe sends none).
func cnpsToRxe(_ string, moved map[string]uint64) string {
	ce := moved["np_ecn_marked_roce_packets"]
	if ce == 0 || moved["np_cnp_sent"] != ce || moved["rp_cnp_handled"] != 0 || moved["rp_cnp_ignored"] != 0 {
		return "np_ecn_marked_roce_packets moved, np_cnp_sent by as much, rp_cnp_handled and rp_cnp_ignored not at all"
	}
	return ""
}

// marksCE says whether some case of cs runs under nftables' CE marking.
func marksCE(cs []tcase) bool {
	for _, c := range cs {
		if c.impair != nil && strings.Contains(c.impair.name, "CE-marked") {
			return true
		}
	}
	return false
}

// selectCases keeps the cases whose name matches the regular expression
// expr (RNICD_INTEROP_CASES), so that one who works on a case runs only
// it: RNICD_INTEROP_CASES='rping' runs the rping cases of both MTUs, in
// both roles. An empty expr keeps every case, as CI runs them.
func selectCases(cs []tcase, expr string) ([]tcase, error) {
	if expr == "" {
		return cs, nil
	}
	re, err := regexp.Compile(expr)
	if err != nil {
		return nil, fmt.Errorf("RNICD_INTEROP_CASES: %w", err)
	}
	var kept []tcase
	for _, c := range cs {
		if re.MatchString(c.name()) {
			kept = append(kept, c)
		}
	}
	if len(kept) == 0 {
		return nil, fmt.Errorf("RNICD_INTEROP_CASES=%q matches no case", expr)
	}
	return kept, nil
}

// lossRepeat is how many times the loss phases run: RNICD_INTEROP_REPEAT,
// 1 if unset. A loss case fails, if it does, one run in a few or fewer
// (the READ case against rxe once in CI before its fix), so that one who
// works on recovery runs them ten times in a row to see it hold.
func lossRepeat() (int, error) {
	v := os.Getenv("RNICD_INTEROP_REPEAT")
	if v == "" {
		return 1, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 100 {
		return 0, fmt.Errorf("RNICD_INTEROP_REPEAT=%q: want a count from 1 to 100", v)
	}
	return n, nil
}

// sendsFrom says whether some case of cs makes rnicd send from host
// address a, so that the capture must hold its packets.
func sendsFrom(cs []tcase, a string) bool {
	for _, c := range cs {
		// A UDP-mode case's rnicd sends from udpAddr, not captured.
		if !c.udp && c.ipv6 == (a == hostAddr6) {
			return true
		}
	}
	return false
}

// sizedDeadline bounds one run of c, either side: 30 s to start and
// exchange, plus what it moves (-s times -n, perftest's defaults 65536 and
// 1000 otherwise) at 1 MiB/s, four times that under an impairment. A case
// takes 1.5 s on average (163 cases in 236 s, both boots included) and the
// largest, 1 MiB 8 times under 3% loss, a few seconds: the bound only
// stops a case whose peer never comes, and keeps the suite's time bounded.
func sizedDeadline(c tcase, impaired bool) time.Duration {
	if c.deadline != 0 {
		return c.deadline
	}
	size, n := 65536, 1000
	for i := 0; i+1 < len(c.args); i++ {
		v, err := strconv.Atoi(c.args[i+1])
		switch {
		case err != nil:
		case c.args[i] == "-s":
			size = v
		case c.args[i] == "-n":
			n = v
		}
	}
	d := 30*time.Second + time.Duration(size*n)*time.Second/(1<<20)
	if impaired {
		d *= 4
	}
	return d
}

// phase is a set of cases run the same way: rxe as client or server,
// under one impairment or none. Each case gets its own TCP port and its
// deadline.
type phase struct {
	rxeRole   string
	impair    *impairment
	cases     []tcase
	ports     []int
	deadlines []time.Duration
}

// plan groups a link's cases into phases: all cases in both roles, the
// loss cases under loss in both roles (repeat times over), one corruption
// case, and each case with an impairment of its own in both roles. Ports
// count up from 20000.
func plan(cases []tcase, repeat int) []phase {
	var plain, lossy, own []tcase
	for _, c := range cases {
		if c.impair != nil {
			own = append(own, c)
		} else {
			plain = append(plain, c)
		}
		if c.loss {
			lossy = append(lossy, c)
		}
	}
	port := 20000
	mk := func(role string, im *impairment, cs []tcase) phase {
		ph := phase{rxeRole: role, impair: im, cases: cs}
		for _, c := range cs {
			ph.ports = append(ph.ports, port)
			ph.deadlines = append(ph.deadlines, sizedDeadline(c, im != nil))
			port++
		}
		return ph
	}
	// No phase without a case: the host would wait for the verdict of a
	// case that does not exist while the VM runs the next phase's
	// clients against servers not yet up (RNICD_INTEROP_CASES selecting
	// only an impaired case).
	var phases []phase
	if len(plain) > 0 {
		phases = append(phases, mk("client", nil, plain), mk("server", nil, plain))
	}
	if len(lossy) > 0 {
		for range max(repeat, 1) {
			phases = append(phases, mk("client", loss, lossy), mk("server", loss, lossy))
		}
		phases = append(phases, mk("client", corrupt, []tcase{{tool: "ib_write_bw", args: []string{"-s", "65536", "-n", "20"}}}))
	}
	for _, c := range own {
		phases = append(phases, mk("client", c.impair, []tcase{c}), mk("server", c.impair, []tcase{c}))
	}
	return phases
}

// vmCommand is the rdma-core command line of c in the VM. An IPv6 case
// takes the index of rxe0's IPv6 GID from $g6, which the script sets.
func vmCommand(c tcase, port int, client bool) string {
	if c.isRdmaCM() {
		// rping's server binds its own address, the client names the
		// server's; rdma_cm finds rxe0 from the address, and its GID
		// (IPv4-mapped or IPv6) from the address's family.
		host, vm := c.cmAddrs()
		if client {
			return fmt.Sprintf("%s -c -a %s -p %d %s", c.tool, host, port, strings.Join(c.args, " "))
		}
		return fmt.Sprintf("%s -s -a %s -p %d %s", c.tool, vm, port, strings.Join(c.args, " "))
	}
	if c.isMckey() {
		sender := ""
		if client {
			sender = " -s"
		}
		return fmt.Sprintf("%s -m %s -b %s%s %s", c.tool, mckeyGroup, vmAddr, sender, strings.Join(c.args, " "))
	}
	if c.isRstream() {
		if client {
			return fmt.Sprintf("%s -s %s -p %d %s", c.tool, hostAddr, port, strings.Join(c.args, " "))
		}
		return fmt.Sprintf("%s -b %s -p %d %s", c.tool, vmAddr, port, strings.Join(c.args, " "))
	}
	if c.isUCX() {
		env := "env " + strings.Join(ucxEnv("rxe0"), " ")
		if client {
			return fmt.Sprintf("%s %s %s -p %d %s", env, c.tool, hostAddr, port, strings.Join(c.args, " "))
		}
		return fmt.Sprintf("%s %s -p %d", env, c.tool, port)
	}
	index, server := "1", hostAddr
	if c.ipv6 {
		index = "$g6"
	}
	if c.exchange6(client) {
		server = hostAddr6
	}
	gid := "-x " + index
	if c.isPingpong() {
		gid = "-g " + index
	}
	cmd := fmt.Sprintf("%s -d rxe0 %s -p %d %s", c.tool, gid, port, strings.Join(c.args, " "))
	if client {
		cmd += " " + server
	}
	return cmd
}

// hostArgs is the rnic command line of c on the host.
func hostArgs(c tcase, port int, client bool) []string {
	if c.isRdmaCM() {
		// rdma_cm picks the rnicd that owns the address: the server's
		// -a, the client's source -I (three rnicd share the bridge).
		host, vm := c.cmAddrs()
		args := []string{c.tool, "-s", "-a", host}
		if client {
			args = []string{c.tool, "-c", "-a", vm, "-I", host}
		}
		return append(append(args, "-p", strconv.Itoa(port)), c.args...)
	}
	if c.isMckey() {
		// The UDP-mode rnicd's address picks it: a packet-mode port
		// joins no group.
		args := []string{c.tool, "-m", mckeyGroup, "-b", udpAddr}
		if client {
			args = append(args, "-s")
		}
		return append(args, c.args...)
	}
	if c.isRstream() {
		// The source address picks the rnicd (three share the bridge).
		args := []string{c.tool, "-b", hostAddr}
		if client {
			args = append(args, "-s", vmAddr)
		}
		return append(append(args, "-p", strconv.Itoa(port)), c.args...)
	}
	if c.isUCX() {
		if client {
			return append([]string{c.tool, vmAddr, "-p", strconv.Itoa(port)}, c.args...)
		}
		return []string{c.tool, "-p", strconv.Itoa(port)}
	}
	gid := []string{"-x", "1"}
	if c.isPingpong() {
		gid = []string{"-g", "1"}
	}
	dev, server := device, vmAddr
	switch {
	case c.udp:
		dev = udpDevice
	case c.ipv6:
		dev = device6
	}
	if c.exchange6(!client) {
		server = vmAddr6
	}
	args := append([]string{c.tool, "-d", dev}, gid...)
	args = append(args, "-p", strconv.Itoa(port))
	args = append(args, c.args...)
	if client {
		args = append(args, server)
	}
	return args
}
