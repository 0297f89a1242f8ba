package tests

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rnicd/rnicd/abi"
	"github.com/rnicd/rnicd/hostif"
	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/rdmacm"
	"github.com/rnicd/rnicd/verbs"
)

// helperTB lets a helper process use the tests' set-up functions
// (newEnd, connect): a failure ends the process with the reason.
type helperTB struct{ testing.TB }

func (helperTB) Helper() {}
func (helperTB) Fatal(a ...any) {
	fmt.Fprintln(os.Stderr, a...)
	os.Exit(1)
}
func (helperTB) Fatalf(f string, a ...any) {
	fmt.Fprintf(os.Stderr, f+"\n", a...)
	os.Exit(1)
}

// wakeEvents is how many completion events the wake hog makes its
// armed CQ write into its completion channel, never reading them: a
// wake pipe holds 4096 bytes, 512 wake-ups of 8, so the daemon's later
// writes find it full.
const wakeEvents = 1500

// runWakeHog is the helper role "wakehog": a client that takes every
// descriptor rnicd handed it (its completion channel's, its CQs' and
// its rdma_cm event channel's wake pipes), clears O_NONBLOCK on each and
// writes into each what it can, then makes the daemon signal its
// channel wakeEvents times without ever reading it. It prints "cleared
// N", "filled", and waits to be killed.
func runWakeHog() error {
	tb := helperTB{}
	had := pipesOpen()
	c, err := verbs.OpenDaemon(os.Getenv("RNICD_HELPER_DEV"))
	if err != nil {
		return err
	}
	ch, err := c.CreateCompChannel()
	if err != nil {
		return err
	}
	a, b := newEnd(tb, c, endOpts{typ: verbs.QPTypeRC, ch: ch}), newEnd(tb, c, endOpts{typ: verbs.QPTypeRC})
	connect(tb, a, b, verbs.QPTypeRC, 7, 14)
	connect(tb, b, a, verbs.QPTypeRC, 7, 14)
	ech, err := rdmacm.CreateEventChannelOn(c)
	if err != nil {
		return err
	}
	pa, err := c.QueryPort()
	if err != nil {
		return err
	}
	id := ech.CreateID()
	if err := id.BindAddr(netip.AddrPortFrom(pa.Addr, 7471)); err != nil {
		return err
	}
	if err := id.Listen(); err != nil {
		return err
	}
	// Every pipe opened since the start came from rnicd.
	var pipes []string
	for fd, link := range pipesOpen() {
		if had[fd] != "" {
			continue
		}
		fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
		if err != nil {
			continue
		}
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFL, fl&^unix.O_NONBLOCK); err != nil {
			return fmt.Errorf("clear O_NONBLOCK on %s: %w", link, err)
		}
		// A read end takes no write (EBADF): the eventfd the daemon
		// used to write could be filled to its limit from here.
		for i := 0; i < 1000; i++ {
			if _, err := unix.Write(fd, []byte{0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}); err != nil {
				break
			}
		}
		pipes = append(pipes, fmt.Sprintf("%d=%s", fd, link))
	}
	fmt.Printf("cleared %d %s\n", len(pipes), strings.Join(pipes, ","))
	wcs := make([]verbs.WC, 1)
	for i := range wakeEvents {
		if err := a.cq.ReqNotify(false); err != nil {
			return err
		}
		post(tb, a, verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{a.mr.SGE(0, 64)}, RemoteAddr: b.mr.Addr, RKey: b.mr.RKey})
		for a.cq.Poll(wcs) == 0 {
			time.Sleep(20 * time.Microsecond)
		}
		if wcs[0].Status != verbs.WCSuccess {
			return fmt.Errorf("hog WRITE %d: %v", i, wcs[0].Status)
		}
	}
	fmt.Println("filled")
	io.Copy(io.Discard, os.Stdin)
	return nil
}

// pipesOpen lists this process's descriptors that are pipes.
func pipesOpen() map[int]string {
	m := map[int]string{}
	ents, _ := os.ReadDir("/proc/self/fd")
	for _, e := range ents {
		fd, _ := strconv.Atoi(e.Name())
		if link, _ := os.Readlink("/proc/self/fd/" + e.Name()); strings.HasPrefix(link, "pipe:") {
			m[fd] = link
		}
	}
	return m
}

// victimTraffic WRITEs from a to b, each WRITE checked byte for byte at
// b, until stop closes; it returns how many WRITEs went through, or the
// first failure.
func victimTraffic(a, b *end, stop <-chan struct{}) (int, error) {
	wcs := make([]verbs.WC, 1)
	for i := 0; ; i++ {
		select {
		case <-stop:
			return i, nil
		default:
		}
		data := pattern(4096, byte(i))
		copy(a.mr.Buf, data)
		if err := a.qp.PostSend([]verbs.SendWR{{WRID: uint64(i), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{a.mr.SGE(0, 4096)}, RemoteAddr: b.mr.Addr + 8192, RKey: b.mr.RKey}}); err != nil {
			return i, err
		}
		deadline := time.Now().Add(10 * time.Second)
		for a.cq.Poll(wcs) == 0 {
			if time.Now().After(deadline) {
				return i, fmt.Errorf("WRITE %d: no completion in 10 s", i)
			}
			time.Sleep(50 * time.Microsecond)
		}
		if wcs[0].Status != verbs.WCSuccess || wcs[0].WRID != uint64(i) || wcs[0].ByteLen != 4096 {
			return i, fmt.Errorf("WRITE %d: completion %v", i, &wcs[0])
		}
		if got := b.mr.Buf[8192 : 8192+4096]; string(got) != string(data) {
			return i, fmt.Errorf("WRITE %d: data differs at the peer", i)
		}
	}
}

// startVictim connects two QPs of a client of dev and runs
// victimTraffic between them until the returned function is called,
// which reports its WRITEs and fails t on any failure.
func startVictim(t *testing.T, dev string) func() int {
	t.Helper()
	c := open(t, dev)
	a, b := newEnd(t, c, endOpts{typ: verbs.QPTypeRC}), newEnd(t, c, endOpts{typ: verbs.QPTypeRC})
	connect(t, a, b, verbs.QPTypeRC, 3, 14)
	connect(t, b, a, verbs.QPTypeRC, 3, 14)
	stop := make(chan struct{})
	var n int
	var err error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); n, err = victimTraffic(a, b, stop) }()
	var once sync.Once
	halt := func() { once.Do(func() { close(stop); wg.Wait() }) }
	t.Cleanup(halt) // before the context's memory goes
	return func() int {
		halt()
		if err != nil {
			t.Fatalf("the other client's traffic: %v after %d WRITEs", err, n)
		}
		return n
	}
}

// TestHostileWakeDescriptors: a client clears O_NONBLOCK on every
// descriptor rnicd gave it to wake it (its completion channel, CQs and
// rdma_cm event channel: the read ends of wake pipes whose write ends
// only the daemon holds) and makes the daemon signal its channel far
// past what the pipe holds, never reading it. Another client's WRITEs
// go on meanwhile and after, checked byte for byte; rnicd stops on
// SIGTERM at once with the attacker still alive.
func TestHostileWakeDescriptors(t *testing.T) {
	dir := t.TempDir()
	d, err := startDaemon(dir, "rnicW", ownAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	defer d.cmd.Process.Kill()
	t.Setenv("RNICD_DIR", dir)
	stopVictim := startVictim(t, "rnicW")

	hog := exec.Command(os.Args[0], "-test.run=^$")
	hog.Env = append(os.Environ(), helperEnv+"=wakehog", "RNICD_HELPER_DEV=rnicW")
	stdin := must[io.WriteCloser](t)(hog.StdinPipe())
	defer stdin.Close()
	stdout := must[io.ReadCloser](t)(hog.StdoutPipe())
	hog.Stderr = os.Stderr
	if err := hog.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { hog.Process.Kill(); hog.Wait() }()
	lines := bufio.NewScanner(stdout)
	// The completion channel, two CQs, the event channel.
	if !lines.Scan() || !strings.HasPrefix(lines.Text(), "cleared 4 ") {
		t.Fatalf("hog: %q, want cleared 4", lines.Text())
	}
	if !lines.Scan() || lines.Text() != "filled" {
		t.Fatalf("hog: %q, want filled", lines.Text())
	}
	if n := stopVictim(); n == 0 {
		t.Fatal("the other client moved nothing while the hog filled its channel")
	}
	// After the fill, with the hog alive and its pipe full: a client
	// that connects now gets through as well.
	goodClient(t, "rnicW", 0x5a)

	start := time.Now()
	d.cmd.Process.Signal(unix.SIGTERM)
	select {
	case err := <-d.done:
		if err != nil {
			t.Fatalf("rnicd exit: %v\n%s", err, d.errb.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("rnicd did not stop on SIGTERM in 10 s with the hog alive\n%s", d.errb.String())
	}
	t.Logf("rnicd stopped %v after SIGTERM", time.Since(start).Round(time.Millisecond))
}

// TestHostileTruncate: a client tries to truncate or grow every memfd it
// holds that rnicd maps: the rings of its CQ, QP and SRQ (the daemon
// sealed them at their size) and its registered memory (sealed against
// shrinking by the daemon, or by the client). Every try fails with
// EPERM; a region whose memfd can take no seal is refused, saying so,
// and counted. Another
// client's WRITEs meanwhile and after are unaffected byte for byte and
// the daemon serves on.
func TestHostileTruncate(t *testing.T) {
	dir := t.TempDir()
	d, err := startDaemon(dir, "rnicF", ownAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	defer d.stop()
	t.Setenv("RNICD_DIR", dir)
	stopVictim := startVictim(t, "rnicF")
	obs := open(t, "rnicF")
	before := must[map[string]uint64](t)(obs.Counters())

	x, err := hostif.Dial(verbs.SocketPath("rnicF"))
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	var pd abi.Handle
	if _, err := x.Call(abi.KindAllocPD, &abi.Empty{}, nil, &pd); err != nil {
		t.Fatal(err)
	}
	var cq abi.RingReply
	cqFDs, err := x.Call(abi.KindCreateCQ, &abi.CreateCQReq{CQE: 64}, nil, &cq)
	if err != nil || len(cqFDs) != 2 {
		t.Fatalf("create_cq: %d descriptors, %v", len(cqFDs), err)
	}
	var qp abi.RingReply
	qpFDs, err := x.Call(abi.KindCreateQP, &abi.CreateQPReq{PD: pd.H, SendCQ: cq.H, RecvCQ: cq.H, Type: ib.QPTypeRC,
		Caps: ib.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}}, nil, &qp)
	if err != nil || len(qpFDs) != 1 {
		t.Fatalf("create_qp: %d descriptors, %v", len(qpFDs), err)
	}
	var srq abi.RingReply
	srqFDs, err := x.Call(abi.KindCreateSRQ, &abi.CreateSRQReq{PD: pd.H, MaxWR: 16, MaxSGE: 1}, nil, &srq)
	if err != nil || len(srqFDs) != 1 {
		t.Fatalf("create_srq: %d descriptors, %v", len(srqFDs), err)
	}
	rings := map[string]int{"CQ ring": cqFDs[0], "QP rings": qpFDs[0], "SRQ ring": srqFDs[0]}
	for what, fd := range rings {
		defer unix.Close(fd)
		seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
		if want := unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL; err != nil || seals&want != want {
			t.Errorf("%s: seals %#x, %v; want SHRINK|GROW|SEAL", what, seals, err)
		}
		for _, size := range []int64{0, 4096, 64 << 20} {
			if err := unix.Ftruncate(fd, size); !errors.Is(err, unix.EPERM) {
				t.Errorf("%s: ftruncate to %d: %v, want EPERM", what, size, err)
			}
		}
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_WRITE); !errors.Is(err, unix.EPERM) {
			t.Errorf("%s: adding a seal: %v, want EPERM (F_SEAL_SEAL)", what, err)
		}
	}
	unix.Close(cqFDs[1])
	// The QP's rings are still the daemon's to read: a doorbell with
	// nothing posted is fetched from the whole ring and changes nothing.
	if err := x.Send(abi.KindDoorbell, &abi.DoorbellReq{H: qp.H, Queue: abi.DoorbellSend}); err != nil {
		t.Fatal(err)
	}

	// Registered memory: a memfd that may shrink is sealed against it by
	// the daemon as it registers it (the program's memfd stays shared);
	// one that can take no more seals is refused, saying why; a sealed
	// one is registered as it is. None of them can shrink afterwards.
	memfd := func(seals int) int {
		fd, err := unix.MemfdCreate("hostile", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
		if err != nil {
			t.Fatal(err)
		}
		if err := unix.Ftruncate(fd, 1<<20); err != nil {
			t.Fatal(err)
		}
		if seals != 0 {
			if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
				t.Fatal(err)
			}
		}
		return fd
	}
	req := &abi.RegMRReq{PD: pd.H, Access: uint32(verbs.AccessLocalWrite | verbs.AccessRemoteWrite), Length: 1 << 20}
	frozen := memfd(unix.F_SEAL_SEAL)
	defer unix.Close(frozen)
	if _, err := x.Call(abi.KindRegMR, req, []int{frozen}, &abi.RegMRReply{}); err == nil || !strings.Contains(err.Error(), "cannot be sealed against shrinking") {
		t.Fatalf("reg_mr of a memfd that may shrink and takes no seal: %v, want a refusal saying it cannot be sealed", err)
	}
	for _, c := range []struct {
		what  string
		seals int
	}{{"a memfd that may shrink", 0}, {"a memfd sealed against shrinking", unix.F_SEAL_SHRINK}} {
		fd := memfd(c.seals)
		defer unix.Close(fd)
		if _, err := x.Call(abi.KindRegMR, req, []int{fd}, &abi.RegMRReply{}); err != nil {
			t.Fatalf("reg_mr of %s: %v", c.what, err)
		}
		if seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0); err != nil || seals != unix.F_SEAL_SHRINK {
			t.Errorf("%s after reg_mr: seals %#x, %v; want F_SEAL_SHRINK alone", c.what, seals, err)
		}
		if err := unix.Ftruncate(fd, 0); !errors.Is(err, unix.EPERM) {
			t.Fatalf("ftruncate of %s, registered: %v, want EPERM", c.what, err)
		}
	}

	if n := stopVictim(); n == 0 {
		t.Fatal("the other client moved nothing meanwhile")
	}
	goodClient(t, "rnicF", 0x3c)
	after := must[map[string]uint64](t)(obs.Counters())
	if got := after["hostif_unsealed_memfd"] - before["hostif_unsealed_memfd"]; got != 1 {
		t.Errorf("hostif_unsealed_memfd went up by %d, want 1 (the region that could take no seal)", got)
	}
	if !strings.Contains(d.errb.String(), "cannot be sealed against shrinking") {
		t.Errorf("the daemon's log does not say why it refused the region:\n%s", d.errb.String())
	}
}
