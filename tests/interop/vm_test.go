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
	"time"
)

// vmScript runs each phase's cases in order: a client retries until the
// host's server listens; a server waits for the host's client. It first
// finds rxe0's IPv6 GID, for the IPv6 cases, and after each of those says
// what the VM dropped of rnicd's IPv6 packets: UDP checksum errors and
// other UDP input errors (Udp6InCsumErrors, Udp6InErrors), and packets
// rxe logged as "bad ICRC from" rnicd's address; rxe counts no such drops
// in its hw_counters.
func vmScript(phases []phase) string {
	var b strings.Builder
	fmt.Fprintf(&b, "g6=; for n in 0 1 2 3 4 5 6 7; do [ \"$(cat /sys/class/infiniband/rxe0/ports/1/gids/$n 2>/dev/null)\" = %s ] && g6=$n; done\n",
		sysfsGID(netip.MustParseAddr(vmAddr6)))
	for pi, ph := range phases {
		for i, c := range ph.cases {
			// perftest measures the CPU clock for its report and gives up
			// ("Can't produce a report") when the samples scatter, as they
			// may in an emulated CPU: that case runs again, at most twice,
			// and a retry line tells the host to run its side again too.
			fmt.Fprintf(&b, "a=0; while :; do\n")
			if ph.rxeRole == "client" {
				// Retry only while the host's server is not listening yet.
				fmt.Fprintf(&b, "  i=0; while :; do %s > /tmp/out 2>&1; rc=$?; [ $rc -eq 0 ] && break; "+
					"grep -q \"Couldn't connect\" /tmp/out || break; i=$((i+1)); [ $i -ge 300 ] && break; sleep 1; done\n",
					vmCommand(c, ph.ports[i], true))
			} else {
				fmt.Fprintf(&b, "  %s > /tmp/out 2>&1; rc=$?\n", vmCommand(c, ph.ports[i], false))
			}
			fmt.Fprintf(&b, "  [ $rc -ne 0 ] && [ $a -lt 2 ] && grep -q \"Can't produce a report\" /tmp/out || break\n"+
				"  a=$((a+1)); echo \"=== retry %d %d $a\" > /dev/ttyS1\ndone\n", pi, i)
			if c.ipv6 {
				fmt.Fprintf(&b, "echo \"=== drops %d %d $(awk '/^Udp6InCsumErrors/{c=$2} /^Udp6InErrors/{e=$2} END{print c+0, e+0}' /proc/net/snmp6) "+
					"$(dmesg | grep -c 'bad ICRC from %s')\" > /dev/ttyS1\n", pi, i, hostAddr6)
			}
			fmt.Fprintf(&b, "{ sed 's/^/=== out %d %d /' /tmp/out; echo \"=== case %d %d rc=$rc\"; } > /dev/ttyS1\n", pi, i, pi, i)
		}
	}
	return b.String()
}

// caseID is case i of phase p.
type caseID struct{ phase, i int }

// vmLog is what the VM has reported so far: each case's exit code, how
// many times it ran again, its output, and rxe0's GID table at boot.
type vmLog struct {
	rc      map[caseID]int
	retries map[caseID]int
	out     map[caseID]*strings.Builder
	gids    map[int]string // as sysfs shows them
	// drops are what the VM dropped of rnicd's IPv6 packets by the end
	// of an IPv6 case: Udp6InCsumErrors, Udp6InErrors, "bad ICRC" lines.
	drops map[caseID][3]int
}

var (
	caseRE  = regexp.MustCompile(`^=== case (\d+) (\d+) rc=(\d+)`)
	retryRE = regexp.MustCompile(`^=== retry (\d+) (\d+) (\d+)`)
	outRE   = regexp.MustCompile(`^=== out (\d+) (\d+) (.*)`)
	gidRE   = regexp.MustCompile(`^=== gid (\d+) (\S*)`)
	dropsRE = regexp.MustCompile(`^=== drops (\d+) (\d+) (\d+) (\d+) (\d+)`)
)

// parseVMLog reads the whole log: it is small.
func parseVMLog(data []byte) *vmLog {
	l := &vmLog{rc: map[caseID]int{}, retries: map[caseID]int{}, out: map[caseID]*strings.Builder{}, gids: map[int]string{},
		drops: map[caseID][3]int{}}
	id := func(m []string) caseID {
		p, _ := strconv.Atoi(m[1])
		i, _ := strconv.Atoi(m[2])
		return caseID{p, i}
	}
	for _, line := range strings.Split(strings.ReplaceAll(string(data), "\r", ""), "\n") {
		if m := caseRE.FindStringSubmatch(line); m != nil {
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
		} else if m := gidRE.FindStringSubmatch(line); m != nil {
			n, _ := strconv.Atoi(m[1])
			l.gids[n] = m[2]
		}
	}
	return l
}

// vm is a booted VM and the latest reading of its log.
type vm struct {
	cmd     *exec.Cmd
	logPath string
	console bytes.Buffer
	done    chan struct{} // closed when qemu has exited

	mu  sync.Mutex
	log *vmLog
}

// bootVM boots the VM of img on ns's tap with the link MTU, to run
// script; it reads the VM's log every 200 ms until the VM powers off.
func bootVM(ctx context.Context, img string, ns *netns, linkMTU int, script, dir string) (*vm, error) {
	v := &vm{logPath: dir + "/verdicts", done: make(chan struct{}), log: parseVMLog(nil)}
	v.cmd = exec.CommandContext(ctx, "./vm.sh", "boot", img, ns.name, "tap0", vmAddr, vmAddr6, strconv.Itoa(linkMTU), script, v.logPath)
	v.cmd.Stdout, v.cmd.Stderr = &v.console, &v.console
	if err := v.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { v.cmd.Wait(); close(v.done) }()
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

func (v *vm) read() {
	data, _ := os.ReadFile(v.logPath)
	l := parseVMLog(data)
	v.mu.Lock()
	v.log = l
	v.mu.Unlock()
}

// finished says whether the VM has given its verdict on case id.
func (v *vm) finished(id caseID) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	_, ok := v.log.rc[id]
	return ok
}

// run is the VM's side of case id as far as it has gone.
func (v *vm) run(id caseID) vmRun {
	v.mu.Lock()
	defer v.mu.Unlock()
	var r vmRun
	r.rc, r.finished = v.log.rc[id]
	if b := v.log.out[id]; b != nil {
		r.out = b.String()
	}
	if d, ok := v.log.drops[id]; ok {
		r.drops = &d
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
		if finished {
			return false
		}
	}
	return false
}

// waitVerdict waits at most d for the VM's verdict on case id.
func (v *vm) waitVerdict(id caseID, d time.Duration) {
	for deadline := time.Now().Add(d); ; time.Sleep(100 * time.Millisecond) {
		v.read()
		if v.finished(id) || time.Now().After(deadline) {
			return
		}
	}
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
