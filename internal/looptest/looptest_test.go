package looptest

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
)

var block9 = netip.MustParsePrefix("127.128.0.0/9")

// Addresses come out distinct, inside 127.128.0.0/9, with UDP 4791 free,
// and one whose port something else holds is passed over.
func TestGetDistinctAndFree(t *testing.T) {
	seen := map[netip.Addr]bool{}
	for range 50 {
		a := Get(t)
		if !block9.Contains(a) || seen[a] {
			t.Fatalf("Get gave %v (seen before: %v), want a new address in %v", a, seen[a], block9)
		}
		seen[a] = true
	}
	// Hold the next address's port, as a program outside the scheme would.
	alloc.mu.Lock()
	held := addrOf(alloc.block, alloc.next)
	alloc.mu.Unlock()
	c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(held, roceV2)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if a := Get(t); a == held || seen[a] {
		t.Fatalf("Get gave %v with %v:4791 held elsewhere", a, held)
	}
}

// Ports come from the block's own 15, below the ephemeral range, and one
// something listens on is passed over.
func TestPort(t *testing.T) {
	Get(t) // the block is locked
	lo := firstPort + alloc.block*blockPorts
	p := Port(t)
	if p < lo || p >= lo+blockPorts || p >= 32768 {
		t.Fatalf("Port gave %d, want one of %d..%d", p, lo, lo+blockPorts-1)
	}
	ln, err := net.Listen("tcp", fmt.Sprintf(":%d", lo+alloc.port%blockPorts))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	held := ln.Addr().(*net.TCPAddr).Port
	if q := Port(t); q == held || q == p || q < lo || q >= lo+blockPorts {
		t.Fatalf("Port gave %d with %d held and %d given before", q, held, p)
	}
}

const childEnv = "LOOPADDR_TEST_CHILD"

// TestChild prints its first address when run as the child of
// TestOtherProcess.
func TestChild(t *testing.T) {
	if os.Getenv(childEnv) == "" {
		t.Skip("run by TestOtherProcess only")
	}
	os.Stdout.WriteString("addr " + Get(t).String() + "\n")
}

// A second process, while this one holds its block, draws from another
// block: the two never share an address.
func TestOtherProcess(t *testing.T) {
	mine := Get(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestChild$", "-test.v")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	_, s, ok := strings.Cut(string(out), "addr ")
	if !ok {
		t.Fatalf("child printed no address:\n%s", out)
	}
	theirs := netip.MustParseAddr(strings.Fields(s)[0])
	p := netip.PrefixFrom(mine, 32-blockBits).Masked()
	if p.Contains(theirs) {
		t.Fatalf("child got %v, inside this process's block %v", theirs, p)
	}
}
