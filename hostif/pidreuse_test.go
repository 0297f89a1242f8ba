package hostif

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rnicd/rnicd/abi"
	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/internal/looptest"
)

// TestMain runs the test binary as TestRegMRMappedPidReused's children
// where HOSTIF_PIDREUSE says so, else the tests.
func TestMain(m *testing.M) {
	pidReuseChild(os.Getenv("HOSTIF_PIDREUSE"))
	os.Exit(m.Run())
}

// pidReuseChild is a child of TestRegMRMappedPidReused, by mode: one
// that connects to the daemon's socket and hands the connection to its
// parent before it exits ("connect"), or another user's process with
// shared anonymous memory ("victim"); for "", nothing.
func pidReuseChild(mode string) {
	switch mode {
	case "connect":
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET, 0)
		if err == nil {
			err = unix.Connect(fd, &unix.SockaddrUnix{Name: os.Getenv("HOSTIF_SOCK")})
		}
		if err == nil {
			err = unix.Sendmsg(3, []byte{1}, unix.UnixRights(fd), nil, 0)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	case "victim":
		mem, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
		if err != nil {
			os.Exit(1)
		}
		copy(mem, "the victim's secret")
		fmt.Printf("%d\n", uintptr(unsafe.Pointer(&mem[0])))
		bufio.NewReader(os.Stdin).ReadByte() // until the test closes it
		os.Exit(0)
	}
}

// A connection outlives the process that made it (it forked, or passed
// the socket on, and exited), and its pid comes back for another
// process, another user's. The daemon read that process's
// /proc/PID/maps and opened its /proc/PID/map_files as the client's,
// and so registered the other process's shared memory in the client's
// PD. Here the connecting process exits, the test makes the kernel give
// its pid to the next process (ns_last_pid, as CRIU restores pids), and
// a registration of that process's memory over the old connection must
// be refused.
func TestRegMRMappedPidReused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipped: the daemon needs CAP_SYS_ADMIN for map_files and the test root for ns_last_pid; CI runs as root")
	}
	n := newNIC(t, looptest.Get(t).String())
	sock := filepath.Join(t.TempDir(), "d.sock")
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: sock, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for try := 0; ; try++ {
		if try == 20 {
			t.Fatal("the dead client's pid never came back for the next process: the machine starts processes faster than the test can aim")
		}
		c, dead := deadClient(t, n, ln, sock)
		victim, addr, ok := processAt(t, dead)
		if !ok {
			c.Close()
			continue
		}
		var pd abi.Handle
		call(t, c, abi.KindAllocPD, &abi.Empty{}, nil, &pd)
		var mr abi.RegMRReply
		_, err = c.Call(abi.KindRegMRMapped, &abi.RegMRMappedReq{PD: pd.H, Access: uint32(ib.AccessRemoteRead), Addr: addr, Length: 4096}, nil, &mr)
		victim.Process.Kill()
		victim.Wait()
		c.Close()
		wantCode(t, "another process's memory, at the pid of the client that connected", err, abi.CodeInvalid)
		return
	}
}

// deadClient is a connection to n made by a process that then exited,
// and that process's pid.
func deadClient(t *testing.T, n *nic, ln *net.UnixListener, sock string) (*Client, int) {
	t.Helper()
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pair[0])
	child := os.NewFile(uintptr(pair[1]), "pair")
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "HOSTIF_PIDREUSE=connect", "HOSTIF_SOCK="+sock)
	cmd.ExtraFiles = []*os.File{child}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	child.Close()
	uc, err := ln.AcceptUnix()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { n.srv.ServeConn(uc); close(done) }()
	t.Cleanup(func() { <-done })
	oob := make([]byte, unix.CmsgSpace(4))
	_, oobn, _, _, err := unix.Recvmsg(pair[0], make([]byte, 1), oob, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("connecting child: %v", err)
	}
	cms, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(cms) != 1 {
		t.Fatalf("no connection from the child: %v", err)
	}
	fds, err := unix.ParseUnixRights(&cms[0])
	if err != nil || len(fds) != 1 {
		t.Fatalf("no connection from the child: %v", err)
	}
	f := os.NewFile(uintptr(fds[0]), "conn")
	fc, err := net.FileConn(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	return NewClient(fc.(*net.UnixConn)), cmd.Process.Pid
}

// processAt starts a victim process at pid, if the kernel gives it that
// pid, and returns it with the address of its shared memory.
func processAt(t *testing.T, pid int) (*exec.Cmd, uint64, bool) {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "HOSTIF_PIDREUSE=victim")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile("/proc/sys/kernel/ns_last_pid", []byte(strconv.Itoa(pid-1)), 0); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close() })
	if cmd.Process.Pid != pid {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, 0, false
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	addr, err := strconv.ParseUint(line[:len(line)-1], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return cmd, addr, true
}
