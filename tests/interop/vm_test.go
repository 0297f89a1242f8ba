package interop

// The rxe peer: a qemu VM (vm.sh) that runs each phase's cases in turn and
// reports on its second serial port, a file here, which the host reads as
// the VM's log.

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// vmScript runs each phase's cases in order: a client retries until the
// host's server listens; a server waits for the host's client. Every run
// of a tool is bounded by its case's deadline (busybox timeout, SIGKILL:
// exit 137), after which the script says "=== timeout" and goes on with
// the next case; before each case it says "=== start", and after it kills
// whatever is left of the tool (a stray server would hold its port).
// It first finds rxe0's IPv6 GID, for the IPv6 cases, and after each of
// those says what the VM dropped of rnicd's IPv6 packets: UDP checksum
// errors and other UDP input errors (Udp6InCsumErrors, Udp6InErrors), and
// packets rxe logged as "bad ICRC from" rnicd's address; rxe counts no
// such drops in its hw_counters.
//
// It appends its reports to /dev/ttyS1 and keeps a run's output in /tmp unless
// RNICD_VM_TTY and RNICD_VM_TMP say otherwise, as they do when the
// harness's own test runs it on the host.
func vmScript(phases []phase) string {
	var b strings.Builder
	b.WriteString("tty=${RNICD_VM_TTY:-/dev/ttyS1}; out=${RNICD_VM_TMP:-/tmp}/out\n")
	b.WriteString("hw=${RNICD_VM_HW:-/sys/class/infiniband/rxe0/ports/1/hw_counters}\n")
	fmt.Fprintf(&b, "g6=; for n in 0 1 2 3 4 5 6 7; do [ \"$(cat /sys/class/infiniband/rxe0/ports/1/gids/$n 2>/dev/null)\" = %s ] && g6=$n; done\n",
		sysfsGID(netip.MustParseAddr(vmAddr6)))
	for pi, ph := range phases {
		for i, c := range ph.cases {
			secs := int((ph.deadlines[i] + time.Second - 1) / time.Second)
			fmt.Fprintf(&b, "echo \"=== start %d %d\" >> $tty\n", pi, i)
			if c.connectsByCM() {
				b.WriteString(cmBefore)
			}
			// perftest measures the CPU clock for its report and gives up
			// ("Can't produce a report") when the samples scatter, as they
			// may in an emulated CPU: that case runs again, at most twice,
			// and a retry line tells the host to run its side again too.
			fmt.Fprintf(&b, "a=0; while :; do\n")
			// The tool's output and its exit code. rping prints its pings
			// to stdout, buffered in a file, and its CM events to stderr,
			// unbuffered: its stderr goes after its stdout rather than
			// into the middle of a ping's line.
			redir := "> $out 2>&1; rc=$?"
			if c.isRdmaCM() {
				redir = "> $out 2> $out.err; rc=$?; cat $out.err >> $out"
			}
			if ph.rxeRole == "client" {
				// Retry only while the host's server is not listening yet
				// (perftest -R: the REQ's REJ fails rdma_client_connect),
				// and only until the deadline.
				fmt.Fprintf(&b, "  end=$(($(date +%%s)+%d)); while :; do left=$((end-$(date +%%s))); [ $left -gt 0 ] || { rc=137; break; }; "+
					"timeout -s KILL $left %s %s; [ $rc -eq 0 ] && break; [ $rc -eq 137 ] && break; "+
					"grep -q -e \"Couldn't connect\" -e \"RDMA_CM_EVENT_REJECTED, error 8\" -e \"Unable to perform rdma_client\" -e \"Connection refused\" $out || break; sleep 1; done\n",
					secs, vmCommand(c, ph.ports[i], true), redir)
			} else {
				fmt.Fprintf(&b, "  timeout -s KILL %d %s %s\n", secs, vmCommand(c, ph.ports[i], false), redir)
			}
			fmt.Fprintf(&b, "  [ $rc -ne 0 ] && [ $a -lt 2 ] && grep -q \"Can't produce a report\" $out || break\n"+
				"  a=$((a+1)); echo \"=== retry %d %d $a\" >> $tty\ndone\n", pi, i)
			fmt.Fprintf(&b, "[ $rc -eq 137 ] && echo \"=== timeout %d %d\" >> $tty\nkillall -q -KILL %s 2>/dev/null\n", pi, i, c.tool)
			if c.ipv6 {
				fmt.Fprintf(&b, "echo \"=== drops %d %d $(awk '/^Udp6InCsumErrors/{c=$2} /^Udp6InErrors/{e=$2} END{print c+0, e+0}' /proc/net/snmp6) "+
					"$(dmesg | grep -c 'bad ICRC from %s')\" >> $tty\n", pi, i, hostAddr6)
			}
			if c.connectsByCM() {
				b.WriteString(cmCheck(pi, i))
			}
			fmt.Fprintf(&b, "{ sed 's/^/=== out %d %d /' $out; echo \"=== case %d %d rc=$rc\"; } >> $tty\n", pi, i, pi, i)
		}
	}
	return b.String()
}

// rxeErrCounters are rxe's hw_counters (rxe_hw_counters.c) that count a
// fault: a request repeated or out of sequence, an RNR or sequence NAK, a
// retry count exhausted, a send that failed, the link down. A clean
// connection and disconnect moves none of them.
const rxeErrCounters = "duplicate_request out_of_seq_request rcvd_rnr_err send_rnr_err rcvd_seq_err " +
	"retry_exceeded_err retry_rnr_exceeded_err completer_retry_err send_err link_downed"

// cmBefore reads rxe's error counters before a case, for cmCheck after.
const cmBefore = "for f in " + rxeErrCounters + "; do eval \"b_$f=$(cat $hw/$f)\"; done\n"

// cmCheck is the script's check after case i of phase pi, one that
// connected through rdma_cm: the tool gone, `rdma res show cm_id` must
// come back empty (it may take the kernel a moment: up to 5 s), and rxe's
// error counters must not have moved. It says "=== cm P I N name=delta..."
// with N the CM IDs left, and adds what rdma res listed to the case's
// output.
func cmCheck(pi, i int) string {
	return "k=0; while [ $k -lt 50 ] && [ -n \"$(rdma res show cm_id 2>&1)\" ]; do sleep 0.1; k=$((k+1)); done\n" +
		"rdma res show cm_id >> $out 2>&1\n" +
		"d=; for f in " + rxeErrCounters + "; do eval \"v=\\$b_$f\"; n=$(cat $hw/$f); [ \"$n\" = \"$v\" ] || d=\"$d $f=$((n-v))\"; done\n" +
		fmt.Sprintf("echo \"=== cm %d %d $(rdma res show cm_id 2>&1 | grep -c .)$d\" >> $tty\n", pi, i)
}

// caseID is case i of phase p.
type caseID struct{ phase, i int }

// vmLog is what the VM has reported so far: the cases it started, each
// case's exit code, whether its deadline killed it, how many times it ran
// again, its output, and rxe0's GID table at boot.
type vmLog struct {
	started  map[caseID]bool
	timedOut map[caseID]bool
	rc       map[caseID]int
	retries  map[caseID]int
	out      map[caseID]*strings.Builder
	gids     map[int]string // as sysfs shows them
	// drops are what the VM dropped of rnicd's IPv6 packets by the end
	// of an IPv6 case: Udp6InCsumErrors, Udp6InErrors, "bad ICRC" lines.
	drops map[caseID][3]int
	// cm is the VM's state after a case that connected through rdma_cm
	// (cmCheck): the CM IDs rdma res still lists, and rxe's error
	// counters that moved, "name=delta" each.
	cm map[caseID]cmState
}

// cmState is what cmCheck found after a case.
type cmState struct {
	ids    int
	errors []string
}

var (
	startRE   = regexp.MustCompile(`^=== start (\d+) (\d+)`)
	timeoutRE = regexp.MustCompile(`^=== timeout (\d+) (\d+)`)
	caseRE    = regexp.MustCompile(`^=== case (\d+) (\d+) rc=(\d+)`)
	retryRE   = regexp.MustCompile(`^=== retry (\d+) (\d+) (\d+)`)
	outRE     = regexp.MustCompile(`^=== out (\d+) (\d+) (.*)`)
	gidRE     = regexp.MustCompile(`^=== gid (\d+) (\S*)`)
	dropsRE   = regexp.MustCompile(`^=== drops (\d+) (\d+) (\d+) (\d+) (\d+)`)
	cmRE      = regexp.MustCompile(`^=== cm (\d+) (\d+) (\d+)(.*)`)
)

// parseVMLog reads the whole log: it is small.
func parseVMLog(data []byte) *vmLog {
	l := &vmLog{started: map[caseID]bool{}, timedOut: map[caseID]bool{}, rc: map[caseID]int{}, retries: map[caseID]int{}, out: map[caseID]*strings.Builder{}, gids: map[int]string{},
		drops: map[caseID][3]int{}, cm: map[caseID]cmState{}}
	id := func(m []string) caseID {
		p, _ := strconv.Atoi(m[1])
		i, _ := strconv.Atoi(m[2])
		return caseID{p, i}
	}
	for _, line := range strings.Split(strings.ReplaceAll(string(data), "\r", ""), "\n") {
		if m := startRE.FindStringSubmatch(line); m != nil {
			l.started[id(m)] = true
		} else if m := timeoutRE.FindStringSubmatch(line); m != nil {
			l.timedOut[id(m)] = true
		} else if m := caseRE.FindStringSubmatch(line); m != nil {
			l.rc[id(m)], _ = strconv.Atoi(m[3])
		} else if m := retryRE.FindStringSubmatch(line); m != nil {
			l.retries[id(m)], _ = strconv.Atoi(m[3])
		} else if m := outRE.FindStringSubmatch(line); m != nil {
			k := id(m)
			if l.out[k] == nil {
				l.out[k] = &strings.Builder{}
			}
			l.out[k].WriteString(m[3] + "\n")
		} else if m := dropsRE.FindStringSubmatch(line); m != nil {
			var d [3]int
			for k := range d {
				d[k], _ = strconv.Atoi(m[3+k])
			}
			l.drops[id(m)] = d
		} else if m := cmRE.FindStringSubmatch(line); m != nil {
			n, _ := strconv.Atoi(m[3])
			l.cm[id(m)] = cmState{ids: n, errors: strings.Fields(m[4])}
		} else if m := gidRE.FindStringSubmatch(line); m != nil {
			n, _ := strconv.Atoi(m[1])
			l.gids[n] = m[2]
		}
	}
	return l
}

// vm is a booted VM and the latest reading of its log.
//
// It watches the VM's progress: a started case must give its verdict (or
// run again) within its deadline and vmMargin, the next case must start
// within vmMargin of a verdict, and the first within bootLimit. A VM that
// does not is stalled: it is killed, and every wait on it returns at once,
// so the cases it never ran fail instead of waiting for it.
type vm struct {
	cmd       *exec.Cmd
	logPath   string
	console   bytes.Buffer
	done      chan struct{} // closed when qemu has exited
	deadlines map[caseID]time.Duration
	margin    time.Duration // vmMargin, less in the harness's own test

	mu       sync.Mutex
	log      *vmLog
	events   int       // starts, verdicts and retries the log holds
	progress time.Time // when events last grew
	stall    string    // why the VM was declared stalled, "" while it was not
}

// vmMargin is the time the VM may take over a case's deadline (its output,
// the drops line) and between cases; bootLimit is the time it may take to
// boot and start its first case (TCG boots it in about 10 s).
const (
	vmMargin  = 30 * time.Second
	bootLimit = 3 * time.Minute
)

// bootVM boots the VM of img on ns's tap with the link MTU, to run
// script, the cases of phases.
func bootVM(ctx context.Context, img string, ns *netns, linkMTU int, script, dir string, phases []phase) (*vm, error) {
	logPath := dir + "/verdicts"
	cmd := exec.CommandContext(ctx, "./vm.sh", "boot", img, ns.name, "tap0", vmAddr, vmAddr6, strconv.Itoa(linkMTU), script, logPath)
	return startVM(cmd, logPath, phases, vmMargin)
}

// startVM starts cmd, which runs the cases of phases and writes their log
// to logPath, in a process group of its own (vm.sh, qemu, the pipe to tr)
// to be killed whole; it reads the log every 200 ms until cmd exits. The
// VM may take margin over a case's deadline and between cases.
func startVM(cmd *exec.Cmd, logPath string, phases []phase, margin time.Duration) (*vm, error) {
	v := &vm{cmd: cmd, logPath: logPath, done: make(chan struct{}), log: parseVMLog(nil), deadlines: map[caseID]time.Duration{},
		margin: margin, progress: time.Now()}
	for pi, ph := range phases {
		for i := range ph.cases {
			v.deadlines[caseID{pi, i}] = ph.deadlines[i]
		}
	}
	cmd.Stdout, cmd.Stderr = &v.console, &v.console
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() { cmd.Wait(); close(v.done) }()
	go func() {
		for {
			v.read()
			select {
			case <-v.done:
				v.read() // what it wrote before it powered off
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	return v, nil
}

// read reads the log and checks the VM's progress.
func (v *vm) read() {
	data, _ := os.ReadFile(v.logPath)
	l := parseVMLog(data)
	v.mu.Lock()
	defer v.mu.Unlock()
	v.log = l
	events := len(l.started) + len(l.rc)
	for _, n := range l.retries {
		events += n
	}
	if events != v.events {
		v.events, v.progress = events, time.Now()
	}
	if v.stall != "" || len(l.rc) == len(v.deadlines) {
		return
	}
	limit, on := bootLimit, "before its first case"
	if len(l.started) > 0 {
		limit, on = v.margin, "between cases"
	}
	for id := range l.started {
		if _, ok := l.rc[id]; !ok { // the VM runs one case at a time
			limit, on = v.deadlines[id]+v.margin, fmt.Sprintf("in case %d %d", id.phase, id.i)
		}
	}
	if v.exited() {
		return
	}
	if quiet := time.Since(v.progress); quiet > limit {
		v.stall = fmt.Sprintf("stalled %s: no word from it for %.0f s (limit %v); killed", on, quiet.Seconds(), limit)
		v.kill()
	}
}

// kill kills the VM: qemu and the script that runs it.
func (v *vm) kill() { syscall.Kill(-v.cmd.Process.Pid, syscall.SIGKILL) }

// stalled says why the VM was declared stalled, "" if it was not.
func (v *vm) stalled() string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.stall
}

// finished says whether the VM has given its verdict on case id.
func (v *vm) finished(id caseID) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	_, ok := v.log.rc[id]
	return ok
}

// started says whether the VM has started case id.
func (v *vm) started(id caseID) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.log.started[id]
}

// exited says whether the VM has powered off (or qemu failed).
func (v *vm) exited() bool {
	select {
	case <-v.done:
		return true
	default:
		return false
	}
}

// waitFor waits until cond holds, and says so, or until the VM has
// stalled or exited, and says it does not.
func (v *vm) waitFor(cond func() bool) bool {
	for ; ; time.Sleep(100 * time.Millisecond) {
		v.read()
		if cond() {
			return true
		}
		if v.exited() {
			v.read()
			return cond()
		}
		if v.stalled() != "" {
			return false
		}
	}
}

// waitStart waits for the VM to start case id.
func (v *vm) waitStart(id caseID) bool { return v.waitFor(func() bool { return v.started(id) }) }

// waitVerdict waits for the VM's verdict on case id.
func (v *vm) waitVerdict(id caseID) bool { return v.waitFor(func() bool { return v.finished(id) }) }

// run is the VM's side of case id as far as it has gone.
func (v *vm) run(id caseID) vmRun {
	v.mu.Lock()
	defer v.mu.Unlock()
	var r vmRun
	r.rc, r.finished = v.log.rc[id]
	r.started, r.timedOut, r.stall = v.log.started[id], v.log.timedOut[id], v.stall
	if b := v.log.out[id]; b != nil {
		r.out = b.String()
	}
	if d, ok := v.log.drops[id]; ok {
		r.drops = &d
	}
	if c, ok := v.log.cm[id]; ok {
		r.cm = &c
	}
	return r
}

// gids is rxe0's GID table as the VM reported it at boot.
func (v *vm) gids() map[int]string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.log.gids
}

// retried waits a while for the VM to say it runs case id for the n-th
// time; the host then runs its side again.
func (v *vm) retried(id caseID, n int) bool {
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		v.read()
		v.mu.Lock()
		got := v.log.retries[id]
		_, finished := v.log.rc[id]
		v.mu.Unlock()
		if got >= n {
			return true
		}
		if finished || v.stalled() != "" || v.exited() {
			return false
		}
	}
	return false
}

// poweredOff waits at most d for the VM to power off.
func (v *vm) poweredOff(d time.Duration) bool {
	select {
	case <-v.done:
		return true
	case <-time.After(d):
		return false
	}
}

// unfinished is how many cases the VM gave no verdict on: after it
// powered off, the cases it never reached (a boot that failed, a panic).
func (v *vm) unfinished() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.deadlines) - len(v.log.rc)
}
