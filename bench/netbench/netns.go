package main

// netns.go: the benchmark's two network namespaces and the veth pair
// between them, made with netlink as `ip netns add` and `ip link add ...
// type veth` make them, and entered by netbench itself as `ip netns exec`
// enters them. A quiet machine lent for a few minutes has no iproute2 and
// no package installs (issue 25 asks for the run there from copied-in
// binaries); with these the folder bench/run.sh -build makes is all the
// benchmark needs. The namespaces are named under /run/netns, where ip(8)
// keeps its own, so that `ip netns exec rnb-a ...` still reaches them
// while a run is on.

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

const netnsDir = "/run/netns"

// nsExecArg, as netbench's first argument, makes it the ip-netns-exec of
// its own commands: netbench nsExecArg NS PROGRAM ARGS... enters NS and
// executes PROGRAM there (inNS).
const nsExecArg = "-netns-exec"

// ends is where the benchmark's two sides run: a network namespace each
// ("" is netbench's own) and the address of each side's programs.
type ends struct {
	nsA, nsB     string
	addrA, addrB string
	what         string // the table's words for it
}

func vethEnds() ends {
	return ends{nsA, nsB, addrA, addrB, "Two network namespaces joined by veth, MTU 9000 (IB MTU 4096)"}
}

// loopbackEnds is both sides on lo, for a machine that refused the
// namespaces (why, if not nil, goes into the table's words).
func loopbackEnds(why error) ends {
	what := "Both sides on loopback (127.0.0.61 and .62, MTU 65536, IB MTU 4096)"
	if why != nil {
		what += ", the veth pair having failed: " + firstLine(why.Error())
	}
	return ends{"", "", "127.0.0.61", "127.0.0.62", what}
}

// setup makes the two namespaces and the veth pair at the given MTU.
func setup(mtu int) error {
	teardown()
	for _, ns := range []string{nsA, nsB} {
		if err := addNetNS(ns); err != nil {
			return err
		}
	}
	a, err := netns.GetFromPath(filepath.Join(netnsDir, nsA))
	if err != nil {
		return fmt.Errorf("netns %s: %w", nsA, err)
	}
	defer a.Close()
	b, err := netns.GetFromPath(filepath.Join(netnsDir, nsB))
	if err != nil {
		return fmt.Errorf("netns %s: %w", nsB, err)
	}
	defer b.Close()
	veth := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: "rnb0", MTU: mtu, Namespace: netlink.NsFd(int(a))},
		PeerName:      "rnb1",
		PeerMTU:       uint32(mtu),
		PeerNamespace: netlink.NsFd(int(b)),
	}
	if err := netlink.LinkAdd(veth); err != nil {
		return fmt.Errorf("veth rnb0-rnb1, MTU %d: %w", mtu, err)
	}
	for _, end := range []struct {
		ns       netns.NsHandle
		dev, ip4 string
	}{{a, "rnb0", addrA}, {b, "rnb1", addrB}} {
		if err := linkUp(end.ns, end.dev, end.ip4); err != nil {
			return err
		}
	}
	return nil
}

// linkUp gives dev in ns its address (a /24) and sets it and lo up.
func linkUp(ns netns.NsHandle, dev, ip4 string) error {
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return fmt.Errorf("netlink in the namespace of %s: %w", dev, err)
	}
	defer h.Close()
	l, err := h.LinkByName(dev)
	if err != nil {
		return fmt.Errorf("%s: %w", dev, err)
	}
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: net.ParseIP(ip4), Mask: net.CIDRMask(24, 32)}}
	if err := h.AddrAdd(l, addr); err != nil {
		return fmt.Errorf("%s: address %s: %w", dev, ip4, err)
	}
	if err := h.LinkSetUp(l); err != nil {
		return fmt.Errorf("%s up: %w", dev, err)
	}
	lo, err := h.LinkByName("lo")
	if err == nil {
		err = h.LinkSetUp(lo)
	}
	if err != nil {
		return fmt.Errorf("lo up beside %s: %w", dev, err)
	}
	return nil
}

// teardown ends what a run (this one, or one that died) left in the
// namespaces and deletes them; deleting the namespaces deletes the veth.
func teardown() {
	for _, ns := range []string{nsA, nsB} {
		for _, pid := range nsPIDs(ns) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		p := filepath.Join(netnsDir, ns)
		unix.Unmount(p, unix.MNT_DETACH)
		os.Remove(p)
	}
}

// addNetNS makes a network namespace and names it as ip-netns(8) does: a
// bind mount of it on netnsDir/name, which keeps it alive with no process
// in it.
func addNetNS(name string) error {
	if err := os.MkdirAll(netnsDir, 0o755); err != nil {
		return fmt.Errorf("netns %s: %w", name, err)
	}
	p := filepath.Join(netnsDir, name)
	f, err := os.OpenFile(p, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return fmt.Errorf("netns %s: %w", name, err)
	}
	f.Close()
	// unshare moves only the calling thread into the new namespace. The
	// goroutine keeps its thread locked to the end, so the runtime ends
	// that thread with it and no other goroutine ever runs in there.
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("unshare: %w", err)
			return
		}
		self := fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid())
		errc <- unix.Mount(self, p, "", unix.MS_BIND, "")
	}()
	if err := <-errc; err != nil {
		os.Remove(p)
		return fmt.Errorf("netns %s: %w", name, err)
	}
	return nil
}

// nsPIDs lists the processes in the named namespace, as `ip netns pids`.
func nsPIDs(name string) []int {
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(netnsDir, name), &st); err != nil {
		return nil
	}
	want := fmt.Sprintf("net:[%d]", st.Ino)
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if l, err := os.Readlink(filepath.Join("/proc", e.Name(), "ns", "net")); err == nil && l == want {
			pids = append(pids, pid)
		}
	}
	return pids
}

// execInNetNS is netbench nsExecArg NS PROGRAM ARGS...: it moves its
// thread into NS and executes PROGRAM on it, so that the program is the
// process netbench started (its PID, its signals) and lives in NS. It
// returns only on failure.
func execInNetNS(ns, prog string, args []string) error {
	runtime.LockOSThread() // setns moves this thread; execve keeps it
	f, err := os.Open(filepath.Join(netnsDir, ns))
	if err != nil {
		return fmt.Errorf("netns %s: %w", ns, err)
	}
	if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("setns %s: %w", ns, err)
	}
	f.Close()
	path, err := exec.LookPath(prog)
	if err != nil && !errors.Is(err, exec.ErrDot) {
		return err
	}
	return fmt.Errorf("exec %s: %w", path, unix.Exec(path, append([]string{prog}, args...), os.Environ()))
}
