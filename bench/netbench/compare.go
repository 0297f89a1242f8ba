package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The -compare mode: the daemon's path, the only one, of one
// or more builds against honest anchors of the same run, on one veth pair
// of MTU 9000 (IB MTU 4096). Every figure is taken -rounds times and the
// best kept (the machine is shared: the best is the least disturbed); the
// builds take turns within each round, so that a change in the host's
// load falls on all of them. Anchors: a C UDP ping-pong built from source
// (bench/udppp), busy-polling and blocking; bench/udprr (Go, blocking);
// iperf3 UDP at 108 B and at full packets, TCP one stream and -P 8.
// Per build: the rnic tools (ib_send_lat -s 2, ib_write_lat -s 2,
// ib_write_bw -s 64 on 1 and 16 QPs, -s 65536 on 1 QP and in 1, 2, 4 and
// 8 parallel pairs), Debian's perftest through the build's C library
// (ib_send_lat -s 2, ib_write_lat -s 2, ib_write_bw -s 64), and the
// daemons' CPU: per Gbit/s of the 64 KiB run, and idle.
//
// What is missing (iperf3, Debian's perftest) is said in the table, not
// fatal: a quiet machine gets the binaries copied in, no package installs.

// buildDir is one build's folder: rnicd, rnic, clib/ (libibverbs.so.1 and
// librdmacm.so.1) and COMMIT, and the flags its two rnicd get (none: the
// defaults). The same folder twice with different flags measures a
// setting against the default in one run.
type buildDir struct {
	name, dir string
	flags     []string
}

// parseBuild reads a build argument: NAME=DIR, or NAME='DIR FLAG...' for
// rnicd flags ("ack0=/tmp/b/this -ack-hold 0").
func parseBuild(a string) (buildDir, error) {
	name, spec, ok := strings.Cut(a, "=")
	f := strings.Fields(spec)
	if !ok || name == "" || name == anchorCol || len(f) == 0 {
		return buildDir{}, fmt.Errorf("build %q: want NAME=DIR or NAME='DIR RNICD_FLAG...'", a)
	}
	return buildDir{name: name, dir: f[0], flags: f[1:]}, nil
}

// String is the build as the table's heading names it.
func (b buildDir) String() string {
	s := b.name + " = " + commitOf(b.dir)
	if len(b.flags) > 0 {
		s += " with rnicd " + strings.Join(b.flags, " ")
	}
	return s
}

type cmpConfig struct {
	anchors string // udppp, udprr; iperf3 and perftest's tools if copied in
	net     ends   // where the two sides run
	builds  []buildDir
	secs    int
	rounds  int
	out     string
	quick   bool
	// only, if set, keeps the figures whose name it matches (anchors and
	// builds alike), to repeat one figure over many rounds.
	only *regexp.Regexp
}

// want reports whether figure what is measured (-only).
func (c cmpConfig) want(what string) bool { return c.only == nil || c.only.MatchString(what) }

// figure is one measured quantity; best keeps the best of the rounds.
type figure struct {
	what   string
	unit   string
	higher bool   // higher is better (rates); else lower (latency, CPU)
	anchor string // the anchor figure's what, "" for an anchor itself
	vals   map[string]float64
	notes  map[string]string
}

type scoreboard struct {
	mu    sync.Mutex
	order []*figure
	by    map[string]*figure
}

func (s *scoreboard) fig(what, unit string, higher bool, anchor string) *figure {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f, ok := s.by[what]; ok {
		return f
	}
	f := &figure{what: what, unit: unit, higher: higher, anchor: anchor, vals: map[string]float64{}, notes: map[string]string{}}
	s.by[what] = f
	s.order = append(s.order, f)
	return f
}

// put records v for column col if it beats what the column has.
func (f *figure) put(col string, v float64) {
	old, ok := f.vals[col]
	if !ok || f.higher && v > old || !f.higher && v < old {
		f.vals[col] = v
	}
}

// fail notes why a column has no value (kept only if none comes).
func (f *figure) fail(col, why string) {
	if _, ok := f.notes[col]; !ok {
		f.notes[col] = why
	}
}

const anchorCol = "anchor"

func compareMain(args []string) error {
	var cfg cmpConfig
	fs := newFlagSet("netbench -compare")
	fs.StringVar(&cfg.anchors, "anchors", "", "directory of the anchors' binaries (udppp, udprr; iperf3 and perftest's ib_* if copied in)")
	fs.IntVar(&cfg.secs, "t", 3, "seconds per throughput run")
	fs.IntVar(&cfg.rounds, "rounds", 3, "rounds: every figure is taken this many times and the best kept")
	fs.StringVar(&cfg.out, "o", "BENCHMARKS.md", "file to add the table to (\"\" writes none)")
	fs.BoolVar(&cfg.quick, "quick", false, "one short round, to check the script")
	netFlag := fs.String("net", "auto", "veth: two network namespaces joined by veth; loopback: 127.0.0.61 and .62 in netbench's own namespace; auto: veth, else (namespaces refused) loopback")
	only := fs.String("only", "", "measure only the figures whose name matches this `REGEXP` (as the table names them: '65536, 1 QP$')")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *only != "" {
		re, err := regexp.Compile(*only)
		if err != nil {
			return fmt.Errorf("-only: %w", err)
		}
		cfg.only = re
	}
	for _, a := range fs.Args() {
		b, err := parseBuild(a)
		if err != nil {
			return err
		}
		for _, o := range cfg.builds {
			if o.name == b.name {
				return fmt.Errorf("build %q: the name %s is taken (each build is a column)", a, b.name)
			}
		}
		cfg.builds = append(cfg.builds, b)
	}
	if len(cfg.builds) == 0 || cfg.anchors == "" {
		return errors.New("usage: netbench -compare -anchors DIR NAME=DIR [NAME='DIR RNICD_FLAG...' ...] (bench/run.sh builds them)")
	}
	if cfg.quick {
		cfg.secs, cfg.rounds = 2, 1
	}
	start, load := time.Now(), loadAvg()
	switch *netFlag {
	case "veth", "auto":
		cfg.net = vethEnds()
		if err := setup(9000); err != nil {
			teardown()
			if *netFlag == "veth" {
				return err
			}
			// A container may refuse new namespaces; the kernel's UDP
			// over lo is still a path both anchors and builds share.
			fmt.Fprintf(os.Stderr, "netbench: %v: running on loopback\n", err)
			cfg.net = loopbackEnds(err)
			break
		}
		defer teardown()
	case "loopback":
		cfg.net = loopbackEnds(nil)
	default:
		return fmt.Errorf("-net %q: want veth, loopback or auto", *netFlag)
	}
	sb := &scoreboard{by: map[string]*figure{}}
	for r := 0; r < cfg.rounds; r++ {
		fmt.Printf("round %d of %d (load %s)\n", r+1, cfg.rounds, loadAvg())
		anchorRound(cfg, sb)
		for i := range cfg.builds {
			b := cfg.builds[(i+r)%len(cfg.builds)] // take turns
			buildRound(cfg, b, sb)
		}
	}
	end := loadAvg()
	var table bytes.Buffer
	printCompare(&table, cfg, sb)
	printTargets(&table, cfg, sb)
	os.Stdout.Write(table.Bytes())
	fmt.Printf("load average %s at the start, %s at the end\n", load, end)
	if cfg.out == "" {
		return nil
	}
	var head bytes.Buffer
	fmt.Fprintf(&head, "\nMeasured by `bench/run.sh` (netbench -compare) on %s UTC: %s; load average %s at the start, %s at the end.\n",
		start.UTC().Format("2006-01-02 at 15:04"), machine(), load, end)
	fmt.Fprintf(&head, "%s; every figure the best of %d rounds, the builds taking turns within each round. Builds:", cfg.net.what, cfg.rounds)
	for _, b := range cfg.builds {
		fmt.Fprintf(&head, " %s;", b)
	}
	head.WriteString(" ratios are to the figure's anchor in the same run.\n\n")
	head.Write(table.Bytes())
	return insertRun(cfg.out, head.Bytes())
}

// commitOf is the commit a build folder was built from (bench/run.sh
// writes COMMIT), or its path.
func commitOf(dir string) string {
	if b, err := os.ReadFile(filepath.Join(dir, "COMMIT")); err == nil {
		return strings.TrimSpace(string(b))
	}
	return dir
}

// insertRun puts a run under the title of the file at path, above the
// earlier runs, as run does.
func insertRun(path string, run []byte) error {
	old, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	var b bytes.Buffer
	b.WriteString(title)
	b.Write(run)
	if rest := bytes.TrimPrefix(old, []byte(title)); len(bytes.TrimSpace(rest)) > 0 {
		b.WriteString("\nEarlier runs:\n")
		b.Write(rest)
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}

// program is how to start one of the anchors' programs.
type program struct {
	path string   // what to execute
	pre  []string // arguments before the program's own
	libs string   // libraries copied in with it ("": the machine's own)
}

// find returns how to start program name: a binary in dir (copied in); a
// Debian binary that bench/run.sh -build copied into dir/debian/bin with
// its libraries and their loader, started by that loader so that the
// machine's own libc, or none, does not matter; else name on PATH.
func find(dir, name string) (program, bool) {
	if p := filepath.Join(dir, name); isExec(p) {
		return program{path: p}, true
	}
	deb := filepath.Join(dir, "debian")
	bin, ld := filepath.Join(deb, "bin", name), filepath.Join(deb, "lib", "ld.so")
	if isExec(bin) && isExec(ld) {
		return program{path: ld, pre: []string{"--argv0", name, bin}, libs: filepath.Join(deb, "lib")}, true
	}
	p, err := exec.LookPath(name)
	return program{path: p}, err == nil
}

// argv is p's arguments before args: the loader's, then args.
func (p program) argv(args ...string) []string {
	return append(append([]string{}, p.pre...), args...)
}

// env is the environment p needs beside env, its libraries searched after
// the directories first names (the build's clib for Debian's perftest).
func (p program) env(first ...string) []string {
	dirs := first[:len(first):len(first)]
	if p.libs != "" {
		dirs = append(dirs, p.libs)
	}
	if len(dirs) == 0 {
		return nil
	}
	return []string{"LD_LIBRARY_PATH=" + strings.Join(dirs, ":")}
}

func isExec(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}

const (
	ppBusy  = "C UDP ping-pong 2 B, busy-polling (MSG_DONTWAIT), median one way"
	ppBlock = "C UDP ping-pong 2 B, blocking, median one way"
	udp108  = "iperf3 UDP 108 B, datagram rate"
	udpFull = "iperf3 UDP 4154 B (a full RoCE packet at MTU 4096)"
	tcp1    = "iperf3 TCP, 1 stream"
	tcp8    = "iperf3 TCP, -P 8"
)

// anchorRound measures the kernel's own transports once.
func anchorRound(cfg cmpConfig, sb *scoreboard) {
	n := "20000"
	if cfg.quick {
		n = "2000"
	}
	for _, m := range []struct {
		what string
		busy bool
	}{{ppBusy, true}, {ppBlock, false}} {
		if !cfg.want(m.what) {
			continue
		}
		f := sb.fig(m.what, "us", false, "")
		if v, err := udppp(cfg, m.busy, n); err != nil {
			f.fail(anchorCol, err.Error())
		} else {
			f.put(anchorCol, v)
		}
	}
	if what := "Go UDP ping-pong 2 B (bench/udprr), blocking, median one way"; cfg.want(what) {
		f := sb.fig(what, "us", false, "")
		if v, err := udprrAt(cfg.net, cfg.anchors); err != nil {
			f.fail(anchorCol, err.Error())
		} else {
			f.put(anchorCol, v)
		}
	}
	iperfBin, ok := find(cfg.anchors, "iperf3")
	for _, m := range []struct {
		what, unit string
		args       []string
		scale      float64
	}{
		{udp108, "M/s", []string{"-u", "-b", "0", "-l", "108"}, 1e9 / (8 * 108) / 1e6},
		{udpFull, "Gbit/s", []string{"-u", "-b", "0", "-l", "4154"}, 1},
		{tcp1, "Gbit/s", []string{"-P", "1", "-l", "65536"}, 1},
		{tcp8, "Gbit/s", []string{"-P", "8", "-l", "65536"}, 1},
	} {
		if !cfg.want(m.what) {
			continue
		}
		f := sb.fig(m.what, m.unit, true, "")
		if !ok {
			f.fail(anchorCol, "not measured: no iperf3 (install it, or bench/run.sh -build on a machine that has it)")
			continue
		}
		v, err := iperf3At(cfg.net, cfg.secs, iperfBin, m.args...)
		if err != nil {
			f.fail(anchorCol, firstLine(err.Error()))
			continue
		}
		f.put(anchorCol, v*m.scale)
	}
}

// iperf3At is iperf3 with the binary and duration given.
func iperf3At(e ends, secs int, bin program, args ...string) (float64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(secs+30)*time.Second)
	defer cancel()
	srv := inNS(ctx, e.nsB, bin.env(), bin.path, bin.argv("-s", "-1", "-B", e.addrB)...)
	if err := srv.Start(); err != nil {
		return 0, fmt.Errorf("iperf3 server: %w", err)
	}
	defer srv.Wait()
	time.Sleep(300 * time.Millisecond)
	cargs := bin.argv(append([]string{"-c", e.addrB, "-t", strconv.Itoa(secs), "-J"}, args...)...)
	out, err := inNS(ctx, e.nsA, bin.env(), bin.path, cargs...).Output()
	if err != nil {
		return 0, fmt.Errorf("iperf3 client: %w: %s", err, out)
	}
	return parseIperf3(out)
}

// udppp runs the C ping-pong: server in B, client in A.
func udppp(cfg cmpConfig, busy bool, n string) (float64, error) {
	bin := filepath.Join(cfg.anchors, "udppp")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e := cfg.net
	sargs, cargs := []string{"-s", e.addrB, "18601"}, []string{e.addrB, "18601", "-n", n}
	if busy {
		sargs, cargs = append(sargs, "-busy"), append(cargs, "-busy")
	}
	srv := inNS(ctx, e.nsB, nil, bin, sargs...)
	if err := srv.Start(); err != nil {
		return 0, err
	}
	defer func() { srv.Process.Kill(); srv.Wait() }()
	time.Sleep(300 * time.Millisecond)
	out, err := inNS(ctx, e.nsA, nil, bin, cargs...).Output()
	if err != nil {
		return 0, fmt.Errorf("udppp: %w: %s", err, out)
	}
	f := lastFields(out)
	if len(f) < 5 {
		return 0, fmt.Errorf("udppp output %q", out)
	}
	return strconv.ParseFloat(f[3], 64)
}

// tool is one side of a perftest run: a program and how it finds its NIC.
type tool struct {
	name string // perftest's name of the test: ib_send_lat, ...
	path string
	pre  []string // the arguments before perftest's own (rnic's subcommand; the loader's)
	nic  []string // -d DEV
	env  []string
}

// argv is t's arguments: pre, then the device, then more.
func (t tool) argv(more ...[]string) []string {
	a := append(append([]string{}, t.pre...), t.nic...)
	for _, m := range more {
		a = append(a, m...)
	}
	return a
}

// rnicTool is the build's rnic clone of perftest's tool name.
func rnicTool(b buildDir, dev string) func(string) tool {
	return func(name string) tool {
		return tool{name: name, path: filepath.Join(b.dir, "rnic"), pre: []string{name}, nic: []string{"-d", dev},
			env: []string{"RNICD_DIR=" + daemonDir(dev)}}
	}
}

// debianTool is Debian's perftest tool name on the build's C library.
func debianTool(cfg cmpConfig, b buildDir, dev string) func(string) (tool, bool) {
	return func(name string) (tool, bool) {
		p, ok := find(cfg.anchors, name)
		return tool{name: name, path: p.path, pre: p.pre, nic: []string{"-d", dev},
			env: append([]string{"RNICD_DIR=" + daemonDir(dev)}, p.env(filepath.Join(b.dir, "clib"))...)}, ok
	}
}

func daemonDir(dev string) string { return filepath.Join(os.TempDir(), "netbench-"+dev) }

// pairRun runs a perftest server in B and its client in A on TCP port,
// with args, and parses the client's result.
func pairRun(e ends, secs int, srv, cli tool, port int, args []string) (result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(3*secs+120)*time.Second)
	defer cancel()
	p := []string{"-p", strconv.Itoa(port)}
	s := inNS(ctx, e.nsB, srv.env, srv.path, srv.argv(p, args)...)
	var sout bytes.Buffer
	s.Stdout, s.Stderr = &sout, &sout
	if err := s.Start(); err != nil {
		return result{}, err
	}
	var out []byte
	var err error
	// The server listens a moment after it starts: a refused client goes
	// again, as a user would.
	for i := 0; ; i++ {
		time.Sleep(300 * time.Millisecond)
		c := inNS(ctx, e.nsA, cli.env, cli.path, cli.argv(p, args, []string{e.addrB})...)
		out, err = c.CombinedOutput()
		if err == nil || i == 20 || ctx.Err() != nil ||
			!bytes.Contains(out, []byte("refused")) && !bytes.Contains(out, []byte("Couldn't connect")) {
			break
		}
	}
	if err != nil {
		s.Process.Kill()
	}
	serr := s.Wait()
	if err != nil {
		return result{}, fmt.Errorf("client: %w: %s", err, lastLines(out, 3))
	}
	if serr != nil {
		return result{}, fmt.Errorf("server: %w: %s", serr, lastLines(sout.Bytes(), 3))
	}
	return parsePerftest(cli.name, out)
}

func lastLines(b []byte, n int) string {
	l := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(l[max(0, len(l)-n):], " / ")
}

// cpuTicks is utime+stime of pid and its threads, in clock ticks
// (/proc/<pid>/stat fields 14 and 15; USER_HZ 100 on Linux).
func cpuTicks(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command may hold spaces: the fields start after the last ')'.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, s)
	}
	u, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, s)
	}
	return u + st, nil
}

const userHZ = 100

// buildRound measures one build once.
func buildRound(cfg cmpConfig, b buildDir, sb *scoreboard) {
	col := b.name
	fmt.Printf("  %s\n", b)
	stopA, err := startDaemon(config{bin: b.dir}, cfg.net.nsA, cfg.net.addrA, "rnba", b.flags)
	if err != nil {
		sb.fig("rnicd", "", true, "").fail(col, firstLine(err.Error()))
		return
	}
	defer stopA()
	stopB, err := startDaemon(config{bin: b.dir}, cfg.net.nsB, cfg.net.addrB, "rnbb", b.flags)
	if err != nil {
		sb.fig("rnicd", "", true, "").fail(col, firstLine(err.Error()))
		return
	}
	defer stopB()
	pids := make([]int, 2)
	for i, n := range []string{"rnba", "rnbb"} {
		if pids[i], err = daemonPID(n); err != nil {
			sb.fig("rnicd", "", true, "").fail(col, err.Error())
			return
		}
	}
	cpu := func() uint64 {
		var sum uint64
		for _, p := range pids {
			t, _ := cpuTicks(p)
			sum += t
		}
		return sum
	}

	// Idle: a second with no client, after the start-up has settled.
	var c0 uint64
	var t0 time.Time
	if what := "rnicd CPU when idle, per daemon (/proc/<pid>/stat over 1 s; 1 tick = 1%)"; cfg.want(what) {
		time.Sleep(time.Second)
		c0, t0 = cpu(), time.Now()
		time.Sleep(time.Second)
		idle := float64(cpu()-c0) / userHZ / time.Since(t0).Seconds() * 100 / 2
		sb.fig(what, "% of a core", false, "").put(col, idle)
	}

	srvRnic, cliRnic := rnicTool(b, "rnbb"), rnicTool(b, "rnba")
	srvDeb, cliDeb := debianTool(cfg, b, "rnbb"), debianTool(cfg, b, "rnba")
	n := "20000"
	if cfg.quick {
		n = "2000"
	}
	D := strconv.Itoa(cfg.secs)
	port := 18515
	nextPort := func() int { port++; return port }

	lat := func(what, anchor string, srv, cli tool) {
		if !cfg.want(what) {
			return
		}
		f := sb.fig(what, "us", false, anchor)
		res, err := pairRun(cfg.net, cfg.secs, srv, cli, nextPort(), []string{"-s", "2", "-n", n})
		if err != nil {
			f.fail(col, firstLine(err.Error()))
			return
		}
		f.put(col, res.median)
		sb.fig(what+", p99", "us", false, "").put(col, res.p99)
	}
	rate := func(what string, srv, cli tool, qps string) {
		if !cfg.want(what) {
			return
		}
		f := sb.fig(what, "Mpps", true, udp108)
		res, err := pairRun(cfg.net, cfg.secs, srv, cli, nextPort(), []string{"-s", "64", "-D", D, "-q", qps})
		if err != nil {
			f.fail(col, firstLine(err.Error()))
			return
		}
		f.put(col, res.mpps)
	}
	lat("rnic ib_send_lat -s 2, median", ppBusy, srvRnic("ib_send_lat"), cliRnic("ib_send_lat"))
	lat("rnic ib_write_lat -s 2, median", ppBusy, srvRnic("ib_write_lat"), cliRnic("ib_write_lat"))
	rate("rnic ib_write_bw -s 64, 1 QP, message rate", srvRnic("ib_write_bw"), cliRnic("ib_write_bw"), "1")
	rate("rnic ib_write_bw -s 64, 16 QPs, message rate", srvRnic("ib_write_bw"), cliRnic("ib_write_bw"), "16")

	// 64 KiB, 1 QP, with the daemons' CPU over the run.
	if what := "rnic ib_write_bw -s 65536, 1 QP"; cfg.want(what) {
		f := sb.fig(what, "Gbit/s", true, tcp1)
		c0, t0 = cpu(), time.Now()
		res, err := pairRun(cfg.net, cfg.secs, srvRnic("ib_write_bw"), cliRnic("ib_write_bw"), nextPort(),
			[]string{"-s", "65536", "-D", D, "--report_gbits"})
		cores := float64(cpu()-c0) / userHZ / time.Since(t0).Seconds()
		if err != nil {
			f.fail(col, firstLine(err.Error()))
		} else {
			f.put(col, res.bw)
			if res.bw > 0 {
				sb.fig("both rnicd's CPU per Gbit/s of that run (start-up included)", "% of a core", false, "").put(col, cores*100/res.bw)
			}
		}
	}

	// N pairs at once, each its own QP and tools, through the one pair of
	// daemons: the aggregate.
	for _, np := range []int{1, 2, 4, 8} {
		what := fmt.Sprintf("rnic ib_write_bw -s 65536, %d parallel pairs, aggregate", np)
		if !cfg.want(what) {
			continue
		}
		f := sb.fig(what, "Gbit/s", true, tcp8)
		var wg sync.WaitGroup
		var mu sync.Mutex
		var sum float64
		var firstErr error
		for i := 0; i < np; i++ {
			p := nextPort()
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := pairRun(cfg.net, cfg.secs, srvRnic("ib_write_bw"), cliRnic("ib_write_bw"), p, []string{"-s", "65536", "-D", D, "--report_gbits"})
				mu.Lock()
				defer mu.Unlock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				sum += res.bw
			}()
		}
		wg.Wait()
		if firstErr != nil {
			f.fail(col, firstLine(firstErr.Error()))
		} else {
			f.put(col, sum)
		}
	}

	// Debian's perftest through the build's C library.
	for _, t := range []struct{ tool, what string }{
		{"ib_send_lat", "Debian ib_send_lat -s 2 (clib), median"},
		{"ib_write_lat", "Debian ib_write_lat -s 2 (clib), median"},
		{"ib_write_bw", "Debian ib_write_bw -s 64 (clib), 1 QP, message rate"},
	} {
		if !cfg.want(t.what) {
			continue
		}
		srv, ok1 := srvDeb(t.tool)
		cli, ok2 := cliDeb(t.tool)
		if _, err := os.Stat(filepath.Join(b.dir, "clib", "libibverbs.so.1")); !ok1 || !ok2 || err != nil {
			f := sb.fig(t.what, "", false, "")
			f.fail(col, fmt.Sprintf("not measured: no %s (Debian's perftest) or no clib in the build", t.tool))
			continue
		}
		if t.tool == "ib_write_bw" {
			rate(t.what, srv, cli, "1")
		} else {
			lat(t.what, ppBusy, srv, cli)
		}
	}
}

// tableHead writes a markdown table's head: the columns first, then one
// per build, aligned as align says ("---:" right, "---" left).
func tableHead(w io.Writer, first []string, builds []buildDir, align string) {
	var head, rule strings.Builder
	for _, c := range first {
		fmt.Fprintf(&head, "| %s ", c)
		rule.WriteString("|---")
	}
	for _, b := range builds {
		fmt.Fprintf(&head, "| %s ", b.name)
		rule.WriteString("|" + align)
	}
	fmt.Fprintf(w, "%s|\n%s|\n", head.String(), rule.String())
}

// printCompare writes the table: a row per figure, a column per build.
func printCompare(w io.Writer, cfg cmpConfig, sb *scoreboard) {
	tableHead(w, []string{"figure", "anchor (same run)"}, cfg.builds, "---:")
	cell := func(f *figure, col string) string {
		v, ok := f.vals[col]
		if !ok {
			return f.notes[col]
		}
		s := fmt.Sprintf("%.3g %s", v, f.unit)
		if a := sb.by[f.anchor]; a != nil && col != anchorCol {
			if av, ok := a.vals[anchorCol]; ok && av > 0 {
				s += fmt.Sprintf(" (%.2fx)", v/av)
			}
		}
		return s
	}
	for _, f := range sb.order {
		if f.anchor == "" && len(f.vals) > 0 && f.vals[anchorCol] != 0 || f.notes[anchorCol] != "" {
			fmt.Fprintf(w, "| %s | %s |", f.what, cell(f, anchorCol))
			for range cfg.builds {
				fmt.Fprint(w, " |")
			}
			fmt.Fprintln(w)
			continue
		}
		anchor := f.anchor
		if anchor == "" {
			anchor = "-"
		}
		fmt.Fprintf(w, "| %s | %s |", f.what, anchor)
		for _, b := range cfg.builds {
			fmt.Fprintf(w, " %s |", cell(f, b.name))
		}
		fmt.Fprintln(w)
	}
}
