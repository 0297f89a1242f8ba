package tests

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// readmeBlocks are the README's code blocks (runs of lines indented four
// spaces), each line without the indentation. Blocks of output (trace
// lines, which start with a time) are left out.
func readmeBlocks(t *testing.T) [][]string {
	t.Helper()
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var blocks [][]string
	var cur []string
	end := func() {
		if len(cur) > 0 && !(cur[0][0] >= '0' && cur[0][0] <= '9') {
			blocks = append(blocks, cur)
		}
		cur = nil
	}
	for _, l := range strings.Split(string(b), "\n") {
		line, ok := strings.CutPrefix(l, "    ")
		if !ok || line == "" || strings.HasPrefix(line, " ") {
			end()
			continue
		}
		cur = append(cur, line)
	}
	end()
	return blocks
}

// readmeCommands are the commands of the README's code blocks (lines
// indented four spaces), each without its comment.
func readmeCommands(t *testing.T) []string {
	t.Helper()
	f, err := os.Open("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var cmds []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "    ")
		if !ok || strings.HasPrefix(line, " ") {
			continue
		}
		cmds = append(cmds, line)
	}
	return cmds
}

// command splits a README line into the command and its comment.
func command(line string) (cmd, comment string) {
	cmd, comment, _ = strings.Cut(line, "#")
	return strings.TrimSpace(cmd), strings.TrimSpace(comment)
}

// TestNewUser runs the README's commands as a newcomer would, in the
// order the README gives them, reading them from the README so that the
// two cannot drift apart: the build line in a copy of the source tree
// (the binaries must exist and be executable), `rnicd -h` (exit 0), the
// two daemons the README puts on 127.0.0.1 and 127.0.0.2, then every
// other command of every code block (readmeRun.block says how each kind
// runs), each exiting 0: server and client pairs, the observers, the
// capture read by tshark, a DCQCN run behind an injected link. The
// commands it does not run are in readmeSkips with the reason; it logs
// both lists (go test -v -run TestNewUser ./tests/). The daemons then
// stop on SIGTERM with exit 0.
//
// The README's literal addresses, and the tools' default TCP port 18515,
// would collide with a run of this test beside it (another developer,
// another package under go test -p): every command run has 127.0.0.1 and
// 127.0.0.2 rewritten to this test's own addresses, and each tool pair is
// given a free TCP port with -p. The commands are otherwise the README's.
func TestNewUser(t *testing.T) {
	lines := readmeCommands(t)
	own := strings.NewReplacer("127.0.0.1", ownAddr(t), "127.0.0.2", ownAddr(t))
	for i, l := range lines {
		lines[i] = own.Replace(l)
	}
	find := func(prefix string) []string {
		var out []string
		for _, l := range lines {
			if strings.HasPrefix(l, prefix) {
				out = append(out, l)
			}
		}
		if len(out) == 0 {
			t.Fatalf("README has no command starting %q", prefix)
		}
		return out
	}

	// The build line, in a copy of the tree: it writes where it says.
	src := t.TempDir()
	copyTree(t, "..", src)
	build, _ := command(find("go build")[0])
	sh := func(ctx context.Context, dir, line string, env ...string) *exec.Cmd {
		c := exec.CommandContext(ctx, "sh", "-c", line)
		c.Dir, c.Env = dir, append(os.Environ(), env...)
		return c
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	if out, err := sh(ctx, src, build, "CGO_ENABLED=0").CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", build, err, out)
	}
	// export PATH=$PWD/bin:$PATH, as the README's next line says.
	export, _ := command(find("export PATH=")[0])
	binPath := strings.TrimPrefix(export, "export PATH=")
	binPath = strings.ReplaceAll(strings.ReplaceAll(binPath, "$PWD", src), "$PATH", os.Getenv("PATH"))
	bin := strings.SplitN(binPath, ":", 2)[0]
	for _, b := range []string{"rnicd", "rnic"} {
		st, err := os.Stat(filepath.Join(bin, b))
		if err != nil || !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0 {
			t.Fatalf("after %q: %s/%s: %v (mode %v), want an executable", build, bin, b, err, st.Mode())
		}
	}
	env := []string{"PATH=" + binPath, "RNICD_DIR=" + t.TempDir()}

	// rnicd -h: the usage, exit 0.
	help, _ := command(find("rnicd -h")[0])
	if out, err := sh(ctx, src, help, env...).CombinedOutput(); err != nil || !bytes.Contains(out, []byte("-addr")) {
		t.Fatalf("%s: %v\n%s", help, err, out)
	}

	// The two daemons, in the foreground of this test instead of the
	// shell's background.
	var daemons []*exec.Cmd
	for _, prefix := range []string{"rnicd -d rnicA ", "rnicd -d rnicB "} {
		line, _ := command(find(prefix)[0])
		line = strings.TrimSpace(strings.TrimSuffix(line, "&"))
		d := sh(ctx, src, "exec "+line, env...)
		var errb lockedBuf
		d.Stdout = &errb
		out, err := d.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Start(); err != nil {
			t.Fatal(err)
		}
		daemons = append(daemons, d)
		defer d.Process.Kill()
		r := bufio.NewReader(out)
		for {
			l, err := r.ReadString('\n')
			errb.Write([]byte(l))
			if err != nil {
				t.Fatalf("%s: no ready line (%v)\n%s", line, err, errb.String())
			}
			if strings.Contains(l, `msg="device up"`) {
				break
			}
		}
		go io.Copy(io.Discard, r)
	}

	// Every other command of the README, block by block, as written
	// (addresses and TCP ports made this test's own), beside the two
	// daemons; a block that starts daemons of its own gets a socket
	// directory of its own.
	r := &readmeRun{t: t, ctx: ctx, sh: sh, src: src, env: env, binPath: binPath, own: own}
	r.blocks(readmeBlocks(t))
	for _, must := range []string{"rnic ib_write_bw", "_pingpong", "rnic rping", "rnic res show cm_id -d rnicA", "tshark -r a.pcap", "rnicd -version", "rnic stat"} {
		if !strings.Contains(r.ran.String(), must) {
			t.Errorf("the README's commands run include none with %q:\n%s", must, r.ran.String())
		}
	}
	t.Logf("README commands run:\n%s", r.ran.String())
	t.Logf("README commands not run here, and why:\n%s", r.skipped.String())

	for _, d := range daemons {
		d.Process.Signal(syscall.SIGTERM)
		if err := d.Wait(); err != nil {
			t.Errorf("rnicd after SIGTERM: %v", err)
		}
	}
}

// readmeSkips are the README commands this test does not run, by the
// start of their line, and why. A README command neither run nor listed
// here fails the test.
var readmeSkips = []struct{ prefix, why string }{
	{"go run ./cmd/rnic demo", "the demo, run here from the built binary as the README's `rnic demo` (go run would build it again)"},
	{"go test -race -timeout 30m ./...", "the test suite, of which this test is a part"},
	{"go build -o bin/", "run first, in a copy of the tree"},
	{"export PATH=", "done first: the commands run with bin/ first in PATH"},
	{"rnic demo", "binds 127.0.0.1 and 127.0.0.2, which a run beside it may hold (TestDemo runs it on addresses of its own)"},
	{"rnicd -d rnicA -pcap a.pcap", "takes UDP 4791 on the default route's address, the host's own (TestCMPcapTshark captures the CM's packets)"},
	{"rnicd -d rnic0 ", "takes UDP 4791 on the default route's address, the host's own (TestDaemonStartStop runs rnicd without -d)"},
	{"rnic ib_send_bw | ib_read_bw", "a list of tool names (each tool is run by TestPerftestTools)"},
	{"rnic ibv_uc_pingpong | ibv_ud_pingpong", "a list of tool names (TestPingpongTools runs each)"},
	{"go test -run Example -v ./verbs", "the verbs package's tests, Example among them, which go test ./... runs (37 s more here)"},
	{"make -C clib", "a phase of .ci/run of its own, and the C library's tests build it (26 s more here)"},
	{"RNICD_INTEROP=1", "the rxe interop suite, in a VM (CI runs it)"},
	{"packaging/deb.sh", "the Debian package's build (TestDebContents in packaging/ runs it)"},
	{"apt-get install ./dist/rnicd_", "installs the package on this host (packaging's TestUnitStartsInNetns installs it into a directory)"},
	{"echo 'RNICD_OPTS=", "writes /etc/rnicd (TestUnitStartsInNetns writes the instance's .conf in its install root)"},
	{"systemctl enable --now rnicd@rnic0", "no systemd runs here (TestUnitStartsInNetns runs the unit's ExecStart line, TestUnitVerifies verifies the unit)"},
	{"rnic ibv_devinfo -d rnic0; man rnicd", "the installed service's device (TestUnitStartsInNetns runs ibv_devinfo on it, TestManPages renders the page)"},
	{"rnicd -d rnic6 ", "an IPv6 address this host lacks (TestToolsOverIPv6 runs it in namespaces)"},
	{"rnic ib_write_bw -d rnicA --run_infinitely", "runs until Ctrl-C (TestRunInfinitely in ./cmd/rnic/perftest stops one after three lines, the server then says the client closed)"},
	{"rnic ib_write_bw -d rnic6", "an IPv6 address this host lacks (TestToolsOverIPv6 runs it in namespaces)"},
	{"LD_LIBRARY_PATH=$PWD/clib/build ib_write_bw", "Debian's perftest on the C library (TestCLibPerftest runs it)"},
	{"LD_LIBRARY_PATH=$PWD/clib/build rping -s -a 10.0.0.1", "an address of the reader's network (TestCLibRping runs rping on the C library)"},
	{"rnic trace -d rnicA [-qp N]", "a synopsis ([...] are optional); `rnic trace -d rnicA` is run"},
	{"rnic inject -d rnicA [--tx|--rx]", "a synopsis; `rnic inject -d rnicB --rx link ...` is run"},
	{"rnicd -d rnicA -addr 127.0.0.1 -mtu 1024 --http", "the 30-second DCQCN class demo (TestWebViewDCQCN draws the same congestion point)"},
	{"rnicd -d rnicB -addr 127.0.0.2 -mtu 1024 --http", "the 30-second DCQCN class demo"},
	{"rnic inject -d rnicB --rx link 300mbit", "the 30-second DCQCN class demo"},
	{"rnic ib_write_bw -d rnicB -D 30", "the 30-second DCQCN class demo"},
	{"rnic ib_write_bw -d rnicA -D 30", "the 30-second DCQCN class demo"},
	{"rnicd -d rnicR ", "four QPs of three daemons on a 100 Mbit/s link (TestFairness runs it)"},
	{"rnicd -d rnicS1 ", "four QPs of three daemons on a 100 Mbit/s link (TestFairness)"},
	{"rnicd -d rnicS2 ", "four QPs of three daemons on a 100 Mbit/s link (TestFairness)"},
	{"rnic inject -d rnicR ", "four QPs of three daemons on a 100 Mbit/s link (TestFairness)"},
	{"rnic ib_write_bw -d rnicR ", "four QPs of three daemons on a 100 Mbit/s link (TestFairness)"},
	{"rnic ib_write_bw -d rnicS1 ", "four QPs of three daemons on a 100 Mbit/s link (TestFairness)"},
	{"sleep 2; rnic ib_write_bw -d rnicS2", "four QPs of three daemons on a 100 Mbit/s link (TestFairness)"},
	{"rnic stat -d rnicR ", "four QPs of three daemons on a 100 Mbit/s link (TestFairness)"},
	{"rnic stat -d rnicS1 ", "four QPs of three daemons on a 100 Mbit/s link (TestFairness)"},
	{"curl -s 127.0.0.2:4793/metrics", "four QPs of three daemons on a 100 Mbit/s link (TestFairness)"},
}

// readmeRun runs the README's blocks.
type readmeRun struct {
	t            *testing.T
	ctx          context.Context
	sh           func(context.Context, string, string, ...string) *exec.Cmd
	src, binPath string
	env          []string          // the README's two daemons'
	own          *strings.Replacer // their addresses for the README's
	ran, skipped strings.Builder
}

func (r *readmeRun) blocks(blocks [][]string) {
	for _, b := range blocks {
		r.block(b)
	}
}

// block runs one code block's commands in order. Lines that start an
// rnicd start it in a socket directory of the block's own and wait for
// its device-up line; a line ending in & or commented "server" runs in
// the background, to exit 0 by the block's end; "rnic trace" without -n
// follows for a second and is interrupted (^C); "rnic A | B | C" lists
// tools and runs each; every other line must exit 0 (a client is
// started again while its server runs and it fails, as a user would
// retry one started too early). The block's daemons stop on SIGTERM,
// exit 0.
func (r *readmeRun) block(lines []string) {
	t := r.t
	env := r.env
	first := false // the block of the build and the README's two daemons, run already
	for _, l := range lines {
		first = first || strings.HasPrefix(l, "go build -o bin/")
	}
	// A block that starts daemons of its own has addresses of its own;
	// the others speak of the README's two daemons.
	own := r.own
	for _, l := range lines {
		if _, skip := readmeSkip(l); !first && !skip && strings.HasPrefix(l, "rnicd -d ") {
			repl := []string{}
			for _, a := range []string{"127.0.0.1", "127.0.0.2", "127.0.0.3"} {
				repl = append(repl, a, ownAddr(t))
			}
			for _, p := range []string{"4792", "4793"} {
				repl = append(repl, ":"+p, ":"+freePort(t))
			}
			own = strings.NewReplacer(repl...)
			break
		}
	}
	port := freePort(t) // the block's tools' TCP port
	var daemons []*exec.Cmd
	type bgCmd struct {
		line string
		cmd  *exec.Cmd
		done chan error
	}
	var background []bgCmd
	serverRunning := func() bool {
		for _, b := range background {
			if len(b.done) == 0 {
				return true
			}
		}
		return false
	}
	defer func() {
		for _, d := range daemons {
			d.Process.Signal(syscall.SIGTERM)
			if err := d.Wait(); err != nil {
				t.Errorf("rnicd after SIGTERM: %v", err)
			}
		}
	}()
	var do func(run string, bg bool)
	do = func(run string, bg bool) {
		if f := strings.Fields(run); len(f) > 1 && f[0] == "rnic" && (strings.HasPrefix(f[1], "ib_") || strings.HasSuffix(f[1], "_pingpong") || f[1] == "rping") && !strings.Contains(run, " -p ") {
			run = withPort(run, port)
		}
		start := time.Now()
		defer func() {
			if d := time.Since(start); d > 5*time.Second {
				fmt.Fprintf(&r.ran, "    (%.0f s)\n", d.Seconds())
			}
		}()
		fmt.Fprintf(&r.ran, "  %s\n", run)
		switch {
		case strings.HasPrefix(run, "rnic ") && strings.Contains(run, " | "):
			for i, tool := range strings.Split(strings.TrimPrefix(run, "rnic "), " | ") {
				if i == 0 {
					r.ran.WriteString("    as\n")
				}
				do("rnic "+strings.TrimSpace(tool), false)
			}
		case strings.HasPrefix(run, "rnicd -d "):
			if len(daemons) == 0 {
				env = append(append([]string{}, r.env...), "RNICD_DIR="+t.TempDir())
			}
			daemons = append(daemons, r.daemon(run, env))
		case bg:
			c := r.sh(r.ctx, r.src, "exec "+run, env...)
			out := &lockedBuf{}
			c.Stdout, c.Stderr = out, out
			if err := c.Start(); err != nil {
				t.Fatal(err)
			}
			b := bgCmd{line: run, cmd: c, done: make(chan error, 1)}
			go func() {
				err := c.Wait()
				if err != nil {
					err = fmt.Errorf("%w\n%s", err, out.String())
				}
				b.done <- err
			}()
			background = append(background, b)
		case strings.HasPrefix(run, "rnic trace") && !strings.Contains(run, " -n "):
			c := r.sh(r.ctx, r.src, "exec "+run, env...)
			var out lockedBuf
			c.Stdout, c.Stderr = &out, &out
			if err := c.Start(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Second)
			c.Process.Signal(os.Interrupt)
			done := make(chan error, 1)
			go func() { done <- c.Wait() }()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("%s, then ^C: %v\n%s", run, err, out.String())
				}
			case <-time.After(20 * time.Second):
				c.Process.Kill()
				t.Errorf("%s: still running 20 s after ^C; killed\n%s", run, out.String())
			}
		default:
			if run == "go doc -all ./verbs | less" {
				run = "go doc -all ./verbs" // less wants a terminal
			}
			deadline := time.Now().Add(20 * time.Second)
			for {
				out, err := r.sh(r.ctx, r.src, run, env...).CombinedOutput()
				// A client started before its server listens, or
				// tshark before the capture's first flush (every
				// second), is run again, as a user would.
				if err != nil && (serverRunning() || strings.HasPrefix(run, "tshark ")) && time.Now().Before(deadline) && r.ctx.Err() == nil {
					time.Sleep(100 * time.Millisecond)
					continue
				}
				if err != nil {
					t.Errorf("%s: %v\n%s", run, err, out)
				}
				break
			}
		}
	}
	for _, line := range lines {
		cmd, comment := command(line)
		if cmd == "" {
			continue // a comment
		}
		if why, skip := readmeSkip(line); skip {
			fmt.Fprintf(&r.skipped, "  %s\n      %s\n", cmd, why)
			continue
		}
		if !readmeRunnable(cmd) {
			// Never a go test (it would run this test again), a load
			// generator or a tool of another project: only the
			// commands of rnicd's own programs and their readers.
			fmt.Fprintf(&r.skipped, "  %s\n      %s\n", cmd, "not one of rnicd's programs or their readers (rnic, rnicd, tshark, curl, go doc)")
			continue
		}
		if first && (strings.HasPrefix(cmd, "rnicd -d rnicA ") || strings.HasPrefix(cmd, "rnicd -d rnicB ")) {
			fmt.Fprintf(&r.skipped, "  %s\n      %s\n", cmd, "started first, as the README's two daemons")
			continue
		}
		run := own.Replace(cmd)
		bg := strings.HasSuffix(run, "&") || strings.HasPrefix(comment, "server")
		do(strings.TrimSpace(strings.TrimSuffix(run, "&")), bg)
	}
	// A server whose client failed may wait for ever: it gets a minute
	// after the block's last command, then is killed, as a failure.
	for _, b := range background {
		select {
		case err := <-b.done:
			if err != nil {
				t.Errorf("%s: %v", b.line, err)
			}
		case <-time.After(time.Minute):
			b.cmd.Process.Kill()
			t.Errorf("%s: still running a minute after the block's last command; killed\n%v", b.line, <-b.done)
		}
	}
}

// daemon starts the rnicd of line and waits for its device-up line.
func (r *readmeRun) daemon(line string, env []string) *exec.Cmd {
	t := r.t
	d := r.sh(r.ctx, r.src, "exec "+line, env...)
	var errb lockedBuf
	d.Stdout = &errb
	out, err := d.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReader(out)
	for {
		l, err := rd.ReadString('\n')
		errb.Write([]byte(l))
		if err != nil {
			d.Process.Kill()
			t.Fatalf("%s: no ready line (%v)\n%s", line, err, errb.String())
		}
		if strings.Contains(l, `msg="device up"`) {
			break
		}
	}
	go io.Copy(io.Discard, rd)
	return d
}

// readmeRunnable says whether cmd is one this test runs: rnicd's own
// programs, and what reads their output.
func readmeRunnable(cmd string) bool {
	for _, p := range []string{"rnic ", "rnicd ", "tshark ", "curl ", "go doc ", "sleep 2; rnic "} {
		if strings.HasPrefix(cmd, p) {
			return true
		}
	}
	return false
}

// readmeSkip says whether line is one of readmeSkips, and why.
func readmeSkip(line string) (string, bool) {
	for _, s := range readmeSkips {
		if strings.HasPrefix(line, s.prefix) {
			return s.why, true
		}
	}
	return "", false
}

// withPort gives the rnic tool on line the TCP port port: "rnic tool
// args" becomes "rnic tool -p port args" (-p before the server's host,
// where the tools' flag parsing stops).
func withPort(line, port string) string {
	f := strings.Fields(line)
	if len(f) < 2 || f[0] != "rnic" {
		return line
	}
	return strings.Join(append([]string{f[0], f[1], "-p", port}, f[2:]...), " ")
}

// copyTree copies the source tree at from into to, all but .git and
// the build output.
func copyTree(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.WalkDir(from, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, path)
		if d.IsDir() {
			if rel == ".git" || rel == "bin" {
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(to, rel), 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(to, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}
