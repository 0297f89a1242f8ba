// Package looptest hands each test its own IPv4 loopback addresses, so
// that tests starting NICs on real sockets (UDP 4791) never collide with
// the tests of another package running beside them (go test -p 2) or with
// another run of the suite on the same machine.
//
// The scheme: 127.128.0.0/9 is cut into 2048 blocks of 4096 addresses
// (127.128.0.0/20, 127.128.16.0/20, ...). A process takes the first block
// from pid mod 2048 onwards whose lock file it can flock(2); the lock is
// held until the process exits, so two processes never hold the same
// block, and a crashed run leaves nothing behind. Within its block the
// process counts addresses up, one per Get, skipping any address whose UDP
// port 4791 something else holds (a program that does not take part in
// the locking). Nothing outside this package binds in 127.128.0.0/9.
//
// The block also owns 15 port numbers, 1024+15*block and on, for tools
// that listen on every address (perftest's and the pingpongs' exchange)
// and for UDP ports on ::1, where there is one address only: all of them
// below the kernel's ephemeral range (32768 and up by default), so no
// connect() anywhere is given one between the check and the bind, as
// happens to a port the kernel chose with :0.
package looptest

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
)

const (
	blockBits = 12 // 4096 addresses a block: tests/ takes about 60 a run
	nBlocks   = 1 << (23 - blockBits)
	roceV2    = 4791
	// blockPorts TCP ports a block: 2048 blocks of 15 end at 31743,
	// below 32768 where Linux's ephemeral ports start.
	blockPorts = 15
	firstPort  = 1024
)

// alloc is the process's block and counter. It is process-wide on
// purpose: the block lock belongs to the process, and every test in it
// must draw from the same counter.
var alloc struct {
	mu    sync.Mutex
	block int      // index of the locked block; valid when lock != nil
	lock  *os.File // held open for the life of the process
	next  int      // next host offset in the block to try
	port  int      // count of Port calls; the port is the count mod blockPorts
}

// Get returns a loopback address no other test, in this process or
// another, has been given, and whose UDP port 4791 is free now.
func Get(t testing.TB) netip.Addr {
	t.Helper()
	a, err := get()
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// Pair returns two addresses from Get, for the usual two NICs.
func Pair(t testing.TB) (a, b netip.Addr) {
	t.Helper()
	return Get(t), Get(t)
}

// Port returns a port number of this process's block that is free now
// for TCP and for UDP on every address. The block's 15 ports are handed
// out in turn, so a port comes back only after 14 others: the server that
// had it has long exited.
func Port(t testing.TB) int {
	t.Helper()
	alloc.mu.Lock()
	defer alloc.mu.Unlock()
	if alloc.lock == nil {
		if err := lockBlock(os.Getpid() % nBlocks); err != nil {
			t.Fatal(err)
		}
	}
	for range blockPorts {
		p := firstPort + alloc.block*blockPorts + alloc.port%blockPorts
		alloc.port++
		ln, err := net.Listen("tcp", fmt.Sprintf(":%d", p))
		if err != nil {
			continue
		}
		ln.Close()
		if c, err := net.ListenPacket("udp", fmt.Sprintf(":%d", p)); err == nil {
			c.Close()
			return p
		}
	}
	t.Fatalf("looptest: all %d ports of block %d are taken", blockPorts, alloc.block)
	return 0
}

func get() (netip.Addr, error) {
	alloc.mu.Lock()
	defer alloc.mu.Unlock()
	for {
		if alloc.lock == nil || alloc.next == 1<<blockBits {
			first := os.Getpid() % nBlocks
			if alloc.lock != nil {
				// Block used up (a long -count run): move to the next.
				first = (alloc.block + 1) % nBlocks
				alloc.lock.Close()
				alloc.lock = nil
			}
			if err := lockBlock(first); err != nil {
				return netip.Addr{}, err
			}
			alloc.next = 0
		}
		a := addrOf(alloc.block, alloc.next)
		alloc.next++
		if a.As4()[3] == 0 || a.As4()[3] == 255 {
			continue // keep clear of anything that reads as network or broadcast
		}
		if free(a) {
			return a, nil
		}
	}
}

// lockBlock takes the first block from first onwards whose lock file is
// not held by another process.
func lockBlock(first int) error {
	dir := filepath.Join(os.TempDir(), "rnicd-looptest")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return fmt.Errorf("looptest: %w", err)
	}
	os.Chmod(dir, 0o777|os.ModeSticky) // shared by every user's runs
	for i := range nBlocks {
		b := (first + i) % nBlocks
		f, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("%d.lock", b)), os.O_RDWR|os.O_CREATE, 0o666)
		if err != nil {
			continue // another user's file we may not open: not ours anyway
		}
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			alloc.block, alloc.lock = b, f
			return nil
		}
		f.Close()
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return fmt.Errorf("looptest: lock block %d: %w", b, err)
		}
	}
	return fmt.Errorf("looptest: all %d blocks of 127.128.0.0/9 are held by other processes", nBlocks)
}

// addrOf is host offset off in block b of 127.128.0.0/9.
func addrOf(b, off int) netip.Addr {
	n := 1<<23 | b<<blockBits | off
	return netip.AddrFrom4([4]byte{127, byte(n >> 16), byte(n >> 8), byte(n)})
}

// free reports whether UDP a:4791 can be bound now.
func free(a netip.Addr) bool {
	c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(a, roceV2)))
	if err != nil {
		return false
	}
	c.Close()
	return true
}
