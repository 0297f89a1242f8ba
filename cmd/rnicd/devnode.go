package main

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// devNodeDir is where programs look for an RDMA device's node.
const devNodeDir = "/dev/infiniband"

// devNode is /dev/infiniband/rnicd-NAME, the node of this daemon's device.
//
// UCX (1.13, uct_ib_device_is_accessible) lists a verbs device only if
// /dev/infiniband/<dev_name> is a character device the program may read
// and write: the kernel's uverbs node for a real device. The C library
// names an rnicd device's dev_name rnicd-NAME, and the daemon makes that
// node, rather than the library answering something else or a program
// running in a private mount namespace, because it is what a user
// expects of a NIC (`ls /dev/infiniband` shows the device), it works for
// any program that checks the same way, and its owner and mode follow the
// control socket's (0600, or 0660 with -group): UCX offers the device to
// exactly the users who may connect to it. Nothing opens the node (the
// library talks to the socket), so it is the null device's (1:3): opened
// by mistake it reads nothing and swallows writes. Making it needs root
// (CAP_MKNOD); a daemon without says so once and runs on, unlisted by
// UCX. A node already there (another daemon of the same name, in another
// network namespace, or one left by a daemon that was killed) is used and
// left in place; the one this daemon made goes when it stops.
type devNode struct {
	path string
	made bool
	ino  uint64
}

// devNodeNumber is the device number of the node: the null device's.
var devNodeNumber = unix.Mkdev(1, 3)

// makeDevNode makes the node of device name with mode and group gid (-1:
// the daemon's).
func makeDevNode(log *slog.Logger, name string, mode os.FileMode, gid int) *devNode {
	n := &devNode{path: filepath.Join(devNodeDir, "rnicd-"+name)}
	if err := n.make(mode, gid); err != nil {
		log.Info("no device node: UCX will not list this device", "node", n.path, "err", err,
			"fix", fmt.Sprintf("as root: mkdir -p %s && mknod -m %#o %s c 1 3", devNodeDir, mode, n.path))
	}
	return n
}

func (n *devNode) make(mode os.FileMode, gid int) error {
	var st unix.Stat_t
	if err := unix.Lstat(n.path, &st); err == nil {
		if st.Mode&unix.S_IFMT != unix.S_IFCHR {
			return fmt.Errorf("%s exists and is not a character device", n.path)
		}
		return nil // another daemon's, or a killed one's: used as it is
	}
	if err := os.MkdirAll(devNodeDir, 0o755); err != nil {
		return err
	}
	// Made with no permissions, then given its group and mode: never
	// open to others in between.
	if err := unix.Mknod(n.path, unix.S_IFCHR, int(devNodeNumber)); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil // made by a daemon of the same name meanwhile
		}
		return fmt.Errorf("mknod %s: %w", n.path, err)
	}
	n.made = true
	if err := unix.Lstat(n.path, &st); err == nil {
		n.ino = st.Ino
	}
	if gid >= 0 {
		if err := os.Lchown(n.path, -1, gid); err != nil {
			return fmt.Errorf("give %s to group %d: %w", n.path, gid, err)
		}
	}
	return os.Chmod(n.path, mode)
}

// remove removes the node if this daemon made it and it is still the one
// it made.
func (n *devNode) remove() {
	if n == nil || !n.made {
		return
	}
	var st unix.Stat_t
	if err := unix.Lstat(n.path, &st); err == nil && st.Ino == n.ino {
		os.Remove(n.path)
	}
}
