package tests

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// udpSockets reads /proc/<pid>/net/udp and udp6 (the sockets of pid's
// network namespace) and returns the inode of each bound to local UDP
// port.
func udpSockets(t *testing.T, pid, port int) map[uint64]string {
	t.Helper()
	found := map[uint64]string{}
	for _, f := range []string{"udp", "udp6"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, f))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Scan() // the header
		for sc.Scan() {
			// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode ...
			fl := strings.Fields(sc.Text())
			if len(fl) < 10 {
				t.Fatalf("/proc/%d/net/%s: line %q", pid, f, sc.Text())
			}
			_, hexPort, _ := strings.Cut(fl[1], ":")
			p, err1 := strconv.ParseUint(hexPort, 16, 16)
			ino, err2 := strconv.ParseUint(fl[9], 10, 64)
			if err1 != nil || err2 != nil {
				t.Fatalf("/proc/%d/net/%s: line %q", pid, f, sc.Text())
			}
			if int(p) == port {
				found[ino] = f + " " + fl[1]
			}
		}
	}
	return found
}

// socketFDs maps each descriptor of pid that is a socket to its inode,
// from the links in /proc/<pid>/fd ("socket:[INODE]").
func socketFDs(t *testing.T, pid int) map[int]uint64 {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	socks := map[int]uint64{}
	for _, e := range ents {
		link, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil {
			continue // closed meanwhile
		}
		if ino, ok := strings.CutPrefix(link, "socket:["); ok {
			fd, _ := strconv.Atoi(e.Name())
			n, err := strconv.ParseUint(strings.TrimSuffix(ino, "]"), 10, 64)
			if err != nil {
				t.Fatalf("%s/%s -> %q", dir, e.Name(), link)
			}
			socks[fd] = n
		}
	}
	return socks
}

// bindRoCE opens a UDP socket and binds it to addr:port, with
// SO_REUSEADDR and SO_REUSEPORT first if reuse, and closes it.
func bindRoCE(addr string, port int, reuse bool) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if reuse {
		for _, o := range []int{unix.SO_REUSEADDR, unix.SO_REUSEPORT} {
			if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, o, 1); err != nil {
				return err
			}
		}
	}
	sa := &unix.SockaddrInet4{Port: port}
	copy(sa.Addr[:], netip.MustParseAddr(addr).AsSlice())
	return unix.Bind(fd, sa)
}

// describeSocket takes a copy of descriptor fd of pid (pidfd_getfd, as a
// debugger would) and says what it is: its domain, type and the address
// it is bound to. The copy is the same open socket as the process's, so
// what it is bound to is all the process can receive on it.
func describeSocket(t *testing.T, pid, fd int) (domain, typ int, local unix.Sockaddr) {
	t.Helper()
	pfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		t.Fatalf("pidfd_open %d: %v", pid, err)
	}
	defer unix.Close(pfd)
	s, err := unix.PidfdGetfd(pfd, fd, 0)
	if err != nil {
		t.Fatalf("pidfd_getfd %d/%d: %v", pid, fd, err)
	}
	defer unix.Close(s)
	if domain, err = unix.GetsockoptInt(s, unix.SOL_SOCKET, unix.SO_DOMAIN); err != nil {
		t.Fatalf("SO_DOMAIN of %d/%d: %v", pid, fd, err)
	}
	if typ, err = unix.GetsockoptInt(s, unix.SOL_SOCKET, unix.SO_TYPE); err != nil {
		t.Fatalf("SO_TYPE of %d/%d: %v", pid, fd, err)
	}
	local, _ = unix.Getsockname(s)
	return domain, typ, local
}

// No client holds the port: while rnic's ib_write_bw and Debian's
// (through the C library) run between two rnicd, no client process has a
// descriptor of a socket bound to UDP 4791 (0x12B7) in /proc/<pid>/net/udp
// and udp6, read against the sockets its /proc/<pid>/fd links to, while
// each daemon does (the check finds one where there is one). Every socket
// a client holds, copied out with pidfd_getfd and asked, is a unix socket
// (its daemon's control connection) or the TCP connection of the tools'
// exchange: none is a UDP socket, so nothing the client can do with its
// own descriptors (recv, connect, attach or detach a SO_REUSEPORT
// program) reaches a packet addressed to another client's QP. Nor can a
// new socket join the port: a bind to a daemon's address and UDP 4791
// fails with EADDRINUSE, with SO_REUSEADDR and SO_REUSEPORT too.
//
// With -engines 2 each daemon's port is a SO_REUSEPORT group of its own
// sockets, one an engine, steered by its eBPF program: the daemon holds
// exactly 2 sockets on the port; a socket of another uid cannot join the
// group (EADDRINUSE); one of the daemon's uid (root here) can, and
// receives no packet while the tools' WRITEs flow.
func TestNoClientHoldsPort(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipped: reading another process's descriptors (pidfd_getfd) needs root or ptrace rights; CI runs as root")
	}
	for _, engines := range []int{1, 2} {
		t.Run(fmt.Sprintf("engines=%d", engines), func(t *testing.T) { testNoClientHoldsPort(t, engines) })
	}
}

func testNoClientHoldsPort(t *testing.T, engines int) {
	const roce = 4791
	flags := []string{"-engines", strconv.Itoa(engines)}
	a, b := daemonsWith(t, t.TempDir(), flags, flags)
	tb := &toolBench{a: a, b: b, ca: open(t, "rnicA"), cb: open(t, "rnicB")}
	real := debianTool(t, "ib_write_bw", "perftest")
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()

	type proc struct {
		name string
		cmd  *exec.Cmd
		out  *lockedBuf
		done chan struct{} // closed when it exited
	}
	var procs []*proc
	start := func(name string, run runner, args ...string) *proc {
		p := &proc{name: name, cmd: run(ctx, "ib_write_bw", args...), out: &lockedBuf{}, done: make(chan struct{})}
		p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
		if err := p.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() {
			p.cmd.Wait()
			close(p.done)
		}()
		return p
	}
	defer func() {
		for _, p := range procs {
			p.cmd.Process.Kill()
			<-p.done
		}
	}()
	// Long runs (-D: seconds of 64 KiB WRITEs), killed once looked at.
	for _, r := range []struct {
		name string
		run  runner
	}{{"rnic", rnicTool}, {"debian", real}} {
		port := freePort(t)
		args := []string{"-d", "rnicA", "-p", port, "-s", "65536", "-D", "60"}
		procs = append(procs, start(r.name+" server", r.run, args...))
		// The client is started again while the server does not listen;
		// one that connected runs for seconds.
		for {
			c := start(r.name+" client", r.run, "-d", "rnicB", "-p", port, "-s", "65536", "-D", "60", "127.0.0.1")
			select {
			case <-c.done:
				if !notListening(c.out.String()) || ctx.Err() != nil {
					t.Fatalf("%s client exited: %v\n%s", r.name, c.cmd.ProcessState, c.out.String())
				}
				time.Sleep(50 * time.Millisecond)
				continue
			case <-time.After(500 * time.Millisecond):
			}
			procs = append(procs, c)
			break
		}
	}
	// Each tool has its QP connected on its daemon (RTS; RTR for a
	// WRITE server, which only receives).
	deadline := time.Now().Add(30 * time.Second)
	for _, p := range procs {
		dev := "rnicA"
		if strings.HasSuffix(p.name, "client") {
			dev = "rnicB"
		}
		want := fmt.Sprintf(" pid %d ", p.cmd.Process.Pid)
		for rts := false; !rts; {
			res := runTool(t, filepath.Join(binDir, "rnic"), "res", "-d", dev)
			for _, line := range strings.Split(res, "\n") {
				rts = rts || (strings.Contains(line, " state RTS ") || strings.Contains(line, " state RTR ")) && strings.Contains(line+" ", want)
			}
			if rts {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s (pid %d) has no connected QP on %s:\n%s\n%s", p.name, p.cmd.Process.Pid, dev, res, p.out.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	// The daemons hold the port: the check sees a socket where there is one.
	for _, d := range []*daemon{tb.a, tb.b} {
		pid := d.cmd.Process.Pid
		held := udpSockets(t, pid, roce)
		n := 0
		for _, ino := range socketFDs(t, pid) {
			if _, ok := held[ino]; ok {
				n++
			}
		}
		if n != engines {
			t.Errorf("rnicd %s (pid %d) holds %d sockets on UDP %d, want one an engine, %d", d.name, pid, n, roce, engines)
		}
	}
	// Nor can a client make itself a socket on the port. With one
	// engine the daemon's socket is in no SO_REUSEPORT group and shares
	// its address with nobody, so a bind to it fails, SO_REUSEADDR and
	// SO_REUSEPORT set or not (this test runs as root, as the tools do
	// here). With several, a socket of another uid cannot join the group;
	// one of the daemon's own uid can, and gets nothing.
	for _, d := range []*daemon{tb.a, tb.b} {
		for _, reuse := range []bool{false, true} {
			if reuse && engines > 1 {
				continue
			}
			if err := bindRoCE(d.addr.String(), roce, reuse); err == nil || !errors.Is(err, unix.EADDRINUSE) {
				t.Errorf("a new socket bound to %s:%d (SO_REUSEADDR and SO_REUSEPORT %v): %v, want EADDRINUSE", d.addr, roce, reuse, err)
			}
		}
	}
	if engines > 1 {
		otherUIDCannotJoin(t, tb.a.addr.String(), roce)
		for _, d := range []*daemon{tb.a, tb.b} {
			joinerGetsNothing(t, d.addr.String(), roce)
		}
	}
	for _, p := range procs {
		pid := p.cmd.Process.Pid
		held := udpSockets(t, pid, roce)
		if len(held) == 0 {
			t.Fatalf("/proc/%d/net/udp lists no socket on UDP %d at all, not even the daemons'", pid, roce)
		}
		var kinds []string
		for fd, ino := range socketFDs(t, pid) {
			if row, ok := held[ino]; ok {
				t.Errorf("%s (pid %d) holds descriptor %d, a socket bound to UDP %d (%s)", p.name, pid, fd, roce, row)
			}
			domain, typ, local := describeSocket(t, pid, fd)
			switch {
			case domain == unix.AF_UNIX:
				kinds = append(kinds, fmt.Sprintf("%d unix", fd))
			case (domain == unix.AF_INET || domain == unix.AF_INET6) && typ == unix.SOCK_STREAM:
				kinds = append(kinds, fmt.Sprintf("%d tcp", fd))
			default:
				t.Errorf("%s (pid %d) holds descriptor %d: domain %d type %d bound to %+v; want only unix sockets and the exchange's TCP",
					p.name, pid, fd, domain, typ, local)
			}
		}
		t.Logf("%s (pid %d): sockets %s", p.name, pid, strings.Join(kinds, ", "))
	}
}

// otherUIDCannotJoin runs a copy of this test binary as another uid
// (nobody) that binds a SO_REUSEPORT socket to addr:port: the kernel
// keeps it out of the daemon's group (EADDRINUSE).
func otherUIDCannotJoin(t *testing.T, addr string, port int) {
	t.Helper()
	uid, gid := otherUser(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := copyExec(t, self, openDir(t))
	cmd := asUser(exec.Command(bin), uid, gid)
	cmd.Env = append(os.Environ(), helperEnv+"=bindroce", "RNICD_HELPER_ADDR="+netip.AddrPortFrom(netip.MustParseAddr(addr), uint16(port)).String())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper as uid %d: %v: %s", uid, err, out)
	}
	if got := strings.TrimSpace(string(out)); got != "EADDRINUSE" {
		t.Errorf("a SO_REUSEPORT socket of uid %d bound to %s:%d: %q, want EADDRINUSE", uid, addr, port, got)
	}
}

// runBindRoCE is the helper of otherUIDCannotJoin: it binds a socket
// with SO_REUSEADDR and SO_REUSEPORT to RNICD_HELPER_ADDR and prints
// EADDRINUSE, or what happened instead.
func runBindRoCE() error {
	ap, err := netip.ParseAddrPort(os.Getenv("RNICD_HELPER_ADDR"))
	if err != nil {
		return err
	}
	switch err := bindRoCE(ap.Addr().String(), int(ap.Port()), true); {
	case errors.Is(err, unix.EADDRINUSE):
		fmt.Println("EADDRINUSE")
	case err == nil:
		fmt.Println("bound: joined the group")
	default:
		fmt.Println(err)
	}
	return nil
}

// joinerGetsNothing joins a daemon's group with a socket of the daemon's
// uid, while the tools' WRITEs flow through it, and checks that the
// socket receives nothing in a second: the daemon's steering program
// selects only its own engines' sockets and drops the rest.
func joinerGetsNothing(t *testing.T, addr string, port int) {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	for _, o := range []int{unix.SO_REUSEADDR, unix.SO_REUSEPORT} {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, o, 1); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 1}); err != nil {
		t.Fatal(err)
	}
	sa := &unix.SockaddrInet4{Port: port}
	copy(sa.Addr[:], netip.MustParseAddr(addr).AsSlice())
	if err := unix.Bind(fd, sa); err != nil {
		t.Fatalf("a SO_REUSEPORT socket of the daemon's uid could not join the group on %s:%d: %v", addr, port, err)
	}
	buf := make([]byte, 9000)
	n, _, err := unix.Recvfrom(fd, buf, 0)
	if !errors.Is(err, unix.EAGAIN) {
		t.Errorf("a socket that joined %s:%d's group received %d bytes in a second (%v), want nothing", addr, port, n, err)
	}
}
