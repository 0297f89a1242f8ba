package tests

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/rnicd/rnicd/internal/syncbuf"
)

// TestDevNodeBeforeSocket: a program that finds rnicd's control socket
// finds its device node too (UCX lists devices by /dev/infiniband/<dev>),
// however early it looks: the daemon makes the node before it listens.
// The test watches for the socket from the daemon's start and looks for
// the node the moment the socket is there; a daemon that listened first
// left a window of its whole start (port, engines, CM, monitor) with a
// socket and no node.
func TestDevNodeBeforeSocket(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("making /dev/infiniband nodes needs root (CAP_MKNOD)")
	}
	name := fmt.Sprintf("nd%06x", time.Now().UnixNano()&0xffffff)
	node := "/dev/infiniband/rnicd-" + name
	dir := t.TempDir()
	sock := filepath.Join(dir, name+".sock")
	cmd := exec.Command(filepath.Join(binDir, "rnicd"), "-d", name, "-addr", ownAddr(t), "-mtu", "1024")
	cmd.Env = append(os.Environ(), "RNICD_DIR="+dir)
	var log syncbuf.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("rnicd: %v\n%s", err, log.String())
			}
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			t.Errorf("rnicd did not stop on SIGTERM\n%s", log.String())
		}
		if _, err := os.Lstat(node); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s after the daemon stopped: %v", node, err)
		}
	}()

	// Look as fast as the machine lets us: the window this closes
	// lasted milliseconds.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Lstat(sock); err == nil {
			break
		}
		select {
		case err := <-done:
			done <- err
			t.Fatalf("rnicd exited before listening: %v\n%s", err, log.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no socket %s after 30 s\n%s", sock, log.String())
		}
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(node, &st); err != nil {
		t.Fatalf("the socket is there and the device node is not: %v\n%s", err, log.String())
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFCHR {
		t.Errorf("%s: mode %#o, want a character device", node, st.Mode)
	}
}
