package tests

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/rnicd/rnicd/verbs"
)

// runHolder is the helper role "holder": open the device in
// RNICD_HELPER_DEV, allocate a PD (a refused connection learns why at
// its first request), print "ok" or "refused: ERR", and hold the
// connection until stdin closes.
func runHolder() error {
	c, err := verbs.OpenDaemon(os.Getenv("RNICD_HELPER_DEV"))
	if err == nil {
		_, err = c.AllocPD()
	}
	if err != nil {
		fmt.Printf("refused: %v\n", err)
	} else {
		fmt.Println("ok")
	}
	io.Copy(io.Discard, os.Stdin)
	return nil
}

// otherUser is a uid and gid that are neither root nor this process's:
// nobody's, as the tests run as root.
func otherUser(t *testing.T) (uid, gid uint32) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root, to run a client as another uid")
	}
	u, err := user.Lookup("nobody")
	if err != nil {
		t.Fatal(err)
	}
	id, _ := strconv.Atoi(u.Uid)
	g, _ := strconv.Atoi(u.Gid)
	return uint32(id), uint32(g)
}

// openDir is a directory every uid may enter (a socket directory, a
// copy of a program), removed when the test ends.
func openDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "rnicd-open-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

// copyExec copies the program at src into dir, executable by every uid.
func copyExec(t *testing.T, src, dir string) string {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, filepath.Base(src))
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return dst
}

// asUser runs cmd as uid:gid.
func asUser(cmd *exec.Cmd, uid, gid uint32) *exec.Cmd {
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid}}
	return cmd
}

// TestSocketModeUnderUmask000: rnicd started under umask 000 gives its
// control and monitor sockets the mode it sets, 0600 (its own uid and
// root), not srwxrwxrwx; with -group, 0660 and that group. Another uid
// cannot connect to a 0600 socket.
func TestSocketModeUnderUmask000(t *testing.T) {
	uid, gid := otherUser(t)
	dir := openDir(t)
	old := syscall.Umask(0)
	d, err := startDaemon(dir, "rnicU", ownAddr(t))
	syscall.Umask(old)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.stop() })
	old = syscall.Umask(0)
	g, err := startDaemon(dir, "rnicG", ownAddr(t), "-group", strconv.Itoa(int(gid)))
	syscall.Umask(old)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.stop() })
	for _, c := range []struct {
		file string
		mode os.FileMode
		gid  uint32
	}{
		{"rnicU.sock", 0o600, 0}, {"rnicU.http", 0o600, 0},
		{"rnicG.sock", 0o660, gid}, {"rnicG.http", 0o660, gid},
	} {
		fi, err := os.Stat(filepath.Join(dir, c.file))
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != c.mode || st.Gid != c.gid {
			t.Errorf("%s: %v group %d, want a socket of mode %v group %d", c.file, fi.Mode(), st.Gid, c.mode, c.gid)
		}
	}
	// nobody connects to the -group daemon, not to the other.
	bin := copyExec(t, os.Args[0], openDir(t))
	for dev, want := range map[string]string{"rnicU": "refused: ", "rnicG": "ok"} {
		h := asUser(exec.Command(bin, "-test.run=^$"), uid, gid)
		h.Env = append(os.Environ(), helperEnv+"=holder", "RNICD_HELPER_DEV="+dev, "RNICD_DIR="+dir)
		h.Stdin = strings.NewReader("")
		out, err := h.Output()
		if err != nil || !strings.HasPrefix(string(out), want) {
			t.Errorf("uid %d on %s: %q, %v; want %q", uid, dev, out, err, want)
		}
	}
}

// TestInjectRefusedForOtherUID: a client of another uid, let in by
// -group, runs `rnic inject -d X drop 100%`: refused with the reason,
// counted (hostif_admin_refused) and logged, and other clients' WRITEs
// go on; root's own inject is obeyed.
func TestInjectRefusedForOtherUID(t *testing.T) {
	uid, gid := otherUser(t)
	dir := openDir(t)
	d, err := startDaemon(dir, "rnicI", ownAddr(t), "-group", strconv.Itoa(int(gid)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.stop() })
	t.Setenv("RNICD_DIR", dir)
	rnic := copyExec(t, filepath.Join(binDir, "rnic"), openDir(t))
	cmd := asUser(exec.Command(rnic, "inject", "-d", "rnicI", "drop", "100%"), uid, gid)
	cmd.Env = append(os.Environ(), "RNICD_DIR="+dir)
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "403") || !strings.Contains(string(out), fmt.Sprintf("refused for uid %d", uid)) {
		t.Fatalf("rnic inject as uid %d: %v, %q; want a refusal naming the uid", uid, err, out)
	}
	goodClient(t, "rnicI", 0x21)
	c := open(t, "rnicI")
	if n := must[map[string]uint64](t)(c.Counters())["hostif_admin_refused"]; n != 1 {
		t.Errorf("hostif_admin_refused %d, want 1", n)
	}
	if !strings.Contains(d.errb.String(), "administrative request refused") {
		t.Errorf("no log line for the refusal:\n%s", d.errb.String())
	}
	// Root's is obeyed.
	if out := runTool(t, rnic, "inject", "-d", "rnicI", "off"); out != "rnicI tx: off\nrnicI rx: off\n" {
		t.Errorf("rnic inject off as root printed %q", out)
	}
}

// TestUserLimit: with -user-max-conns 5, five processes of one uid
// connect and the sixth is refused with an ENOMEM-style error naming
// the flag, counted; root's clients are not held to it, and once one of
// the five leaves, a sixth gets in.
func TestUserLimit(t *testing.T) {
	uid, gid := otherUser(t)
	dir := openDir(t)
	d, err := startDaemon(dir, "rnicL", ownAddr(t), "-group", strconv.Itoa(int(gid)), "-user-max-conns", "5")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.stop() })
	t.Setenv("RNICD_DIR", dir)
	bin := copyExec(t, os.Args[0], openDir(t))
	hold := func() (*exec.Cmd, io.WriteCloser, string) {
		t.Helper()
		h := asUser(exec.Command(bin, "-test.run=^$"), uid, gid)
		h.Env = append(os.Environ(), helperEnv+"=holder", "RNICD_HELPER_DEV=rnicL", "RNICD_DIR="+dir)
		in := must[io.WriteCloser](t)(h.StdinPipe())
		out := must[io.ReadCloser](t)(h.StdoutPipe())
		h.Stderr = os.Stderr
		if err := h.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { in.Close(); h.Wait() })
		line := bufio.NewScanner(out)
		line.Scan()
		return h, in, line.Text()
	}
	var ins []io.WriteCloser
	for i := range 5 {
		_, in, got := hold()
		if got != "ok" {
			t.Fatalf("process %d of uid %d: %q, want ok", i+1, uid, got)
		}
		ins = append(ins, in)
	}
	_, _, got := hold()
	if !strings.HasPrefix(got, "refused: ") || !strings.Contains(got, "rnicd -user-max-conns raises it") ||
		!strings.Contains(got, "this user holds 5 connections") || !strings.Contains(got, "cannot allocate memory") {
		t.Fatalf("sixth process of uid %d: %q, want a refusal (ENOMEM) naming -user-max-conns", uid, got)
	}
	// Root's clients are not that user's: a sixth connection of root
	// (this process) and a WRITE through it.
	goodClient(t, "rnicL", 0x44)
	c := open(t, "rnicL")
	m := must[map[string]uint64](t)(c.Counters())
	if m["hostif_over_limit"] != 1 || m["hostif_users"] != 1 {
		t.Errorf("hostif_over_limit %d, hostif_users %d; want 1 and 1", m["hostif_over_limit"], m["hostif_users"])
	}
	// One leaves: its share comes back, and the next process gets in.
	// Held: the five, and c (goodClient's connection goes as the daemon
	// sees it hang up).
	heldConns := func() uint64 { return must[map[string]uint64](t)(c.Counters())["hostif_held_conns"] }
	eventually(t, "goodClient's connection released", func() bool { return heldConns() == 6 })
	ins[0].Close()
	eventually(t, "the leaver's connection released", func() bool { return heldConns() == 5 })
	if _, _, got := hold(); got != "ok" {
		t.Fatalf("after one left: %q, want ok", got)
	}
}
