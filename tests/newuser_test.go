package tests

import (
	"bufio"
	"bytes"
	"context"
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
// two daemons the README puts on 127.0.0.1 and 127.0.0.2, and each tool
// the README shows as a server and client pair (a perftest tool, a
// pingpong), each side exiting 0. The daemons then stop on SIGTERM with
// exit 0.
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
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
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

	// Each server and client pair the README shows.
	var server string
	pairs := "" // the servers run, for the check below
	for _, l := range lines {
		cmd, comment := command(l)
		switch comment {
		case "server":
			server = cmd
		case "client":
			if server == "" {
				t.Fatalf("README: client %q without a server before it", cmd)
			}
			port := freePort(t)
			runPair(t, ctx, sh, src, env, withPort(server, port), withPort(cmd, port))
			pairs += server + "\n"
			server = ""
		}
	}
	if !strings.Contains(pairs, "rnic ib_") || !strings.Contains(pairs, "_pingpong") {
		t.Fatalf("README's server and client pairs: %q, want a perftest tool and a pingpong", pairs)
	}

	for _, d := range daemons {
		d.Process.Signal(syscall.SIGTERM)
		if err := d.Wait(); err != nil {
			t.Errorf("rnicd after SIGTERM: %v", err)
		}
	}
}

// runPair runs server, then client until the server listens (as a user
// retries a client started too early), and wants both to exit 0.
func runPair(t *testing.T, ctx context.Context, sh func(context.Context, string, string, ...string) *exec.Cmd,
	dir string, env []string, server, client string) {
	t.Helper()
	srv := sh(ctx, dir, "exec "+server, env...)
	var sout bytes.Buffer
	srv.Stdout, srv.Stderr = &sout, &sout
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer srv.Process.Kill()
	var cout []byte
	var err error
	for {
		cout, err = sh(ctx, dir, client, env...).CombinedOutput()
		if err == nil || !bytes.Contains(cout, []byte("connection refused")) || ctx.Err() != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("%s: %v\n%s", client, err, cout)
	}
	if err := srv.Wait(); err != nil {
		t.Fatalf("%s: %v\n%s", server, err, sout.String())
	}
	t.Logf("%s / %s: both exit 0", server, client)
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
