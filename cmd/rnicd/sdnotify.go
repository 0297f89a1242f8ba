package main

import (
	"fmt"
	"net"
	"os"
)

// sdNotify sends state to the service manager as sd_notify(3) does: one
// datagram to the unix socket $NOTIFY_SOCKET ("@name" an abstract one).
// The unit is Type=notify, so that systemctl start, and units ordered
// After= an instance, wait until the control socket serves ("READY=1"
// after "device up"), not only until the process exists. Without
// NOTIFY_SOCKET (not run by systemd) it does nothing.
func sdNotify(state string) error {
	path := os.Getenv("NOTIFY_SOCKET")
	if path == "" {
		return nil
	}
	if path[0] == '@' {
		path = "\x00" + path[1:]
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("sd_notify %s: %w", os.Getenv("NOTIFY_SOCKET"), err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(state)); err != nil {
		return fmt.Errorf("sd_notify %s: %w", os.Getenv("NOTIFY_SOCKET"), err)
	}
	return nil
}
