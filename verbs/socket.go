package verbs

import (
	"errors"
	"fmt"

	"os"
	"path/filepath"
	"sort"

	"strings"

	"golang.org/x/sys/unix"
)

// SocketDir is the directory of the daemons' control sockets, NAME.sock:
// $RNICD_DIR if set, else /run/rnicd for root, else
// $XDG_RUNTIME_DIR/rnicd, else /tmp/rnicd-UID; in a network namespace
// other than pid 1's, or where pid 1's cannot be read (a user's process, a
// sandbox), the subdirectory net-INODE of that, the namespace's inode as
// `lsns -t net` and `stat -L /proc/self/ns/net` show it.
//
// A device is an address in a network namespace, so its name is too: two
// namespaces (two containers, two `ip netns exec`) each run `rnicd -d
// rnic0`, and each namespace's tools see only its own, as each sees only
// its own interfaces. A directory per namespace, rather than the abstract
// socket namespace (which Linux keeps per network namespace by itself),
// because the sockets stay files: their modes say who may use a device,
// `ls` shows what runs, and the host's namespace keeps the paths it always
// had. Where pid 1's namespace cannot be read, this one may be another, so
// it gets its own directory: a daemon and its clients in one namespace
// compute the same path either way.
func SocketDir() string {
	if d := os.Getenv("RNICD_DIR"); d != "" {
		return d
	}
	var base string
	switch d := os.Getenv("XDG_RUNTIME_DIR"); {
	case os.Geteuid() == 0:
		base = "/run/rnicd"
	case d != "":
		base = filepath.Join(d, "rnicd")
	default:
		base = fmt.Sprintf("/tmp/rnicd-%d", os.Getuid())
	}
	if ns := netnsDir(); ns != "" {
		return filepath.Join(base, ns)
	}
	return base
}

// netnsDir is "net-INODE" for the calling thread's network namespace
// unless it is pid 1's, then "" ("" too if /proc cannot say). The thread's, not the process's: a Go program
// may enter a namespace on one locked thread (netns.Set) and open a device
// there.
func netnsDir() string {
	var self, host unix.Stat_t
	if unix.Stat("/proc/thread-self/ns/net", &self) != nil {
		return ""
	}
	if unix.Stat("/proc/1/ns/net", &host) == nil && self.Ino == host.Ino && self.Dev == host.Dev {
		return ""
	}
	return fmt.Sprintf("net-%d", self.Ino)
}

// SocketPath is the control socket of device name.
func SocketPath(name string) string { return filepath.Join(SocketDir(), name+".sock") }

// MonitorSocketPath is where the daemon of device name serves its
// monitor (counters, trace, fault injection) over HTTP, for the rnic
// stat, trace and inject tools. It does not end in .sock, so Devices
// does not take it for a device.
func MonitorSocketPath(name string) string { return filepath.Join(SocketDir(), name+".http") }

// Devices lists the devices whose daemons serve a socket in SocketDir
// (ibv_get_device_list), sorted. A socket left by a daemon that was
// killed is no device: it refuses connections, and is left out.
func Devices() ([]string, error) {
	ents, err := os.ReadDir(SocketDir())
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("verbs: list devices: %w", err)
	}
	var names []string
	for _, e := range ents {
		if n, ok := strings.CutSuffix(e.Name(), ".sock"); ok && e.Type()&os.ModeSocket != 0 && !stale(SocketPath(n)) {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names, nil
}

// stale reports whether nobody listens on the socket at path. The probe
// connects and hangs up at once, which a live daemon sees as a client
// that came and went; any other failure (permissions, ...) is left for
// Open to report.
func stale(path string) bool {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	return errors.Is(unix.Connect(fd, &unix.SockaddrUnix{Name: path}), unix.ECONNREFUSED)
}
