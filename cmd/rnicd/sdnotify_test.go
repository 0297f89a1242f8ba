package main

import (
	"fmt"
	"net"
	"os"
	"testing"
	"time"
)

// TestSdNotify sends READY=1 to an abstract NOTIFY_SOCKET ("@name", as
// systemd may give one) and finds it there; without NOTIFY_SOCKET it
// sends nothing and says nothing is wrong. (packaging's
// TestUnitStartsInNetns receives the daemon's own on a path socket.)
func TestSdNotify(t *testing.T) {
	name := fmt.Sprintf("rnicd-sdnotify-%d", os.Getpid())
	l, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: "\x00" + name, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	t.Setenv("NOTIFY_SOCKET", "@"+name)
	if err := sdNotify("READY=1"); err != nil {
		t.Fatal(err)
	}
	l.SetReadDeadline(time.Now().Add(10 * time.Second))
	b := make([]byte, 64)
	n, err := l.Read(b)
	if err != nil || string(b[:n]) != "READY=1" {
		t.Fatalf("got %q, %v", b[:n], err)
	}
	t.Setenv("NOTIFY_SOCKET", "")
	if err := sdNotify("READY=1"); err != nil {
		t.Fatalf("without NOTIFY_SOCKET: %v", err)
	}
	t.Setenv("NOTIFY_SOCKET", "@"+name+"-none")
	if err := sdNotify("READY=1"); err == nil {
		t.Fatal("no error sending to a socket nobody holds")
	}
}
