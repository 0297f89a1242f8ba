package tests

import (
	"bytes"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPerftestTools runs each perftest tool of the rnic binary as a
// server and a client process, each with its own in-process NIC
// (--local on 127.78.0.1 and .2, clear of the daemon tests; two rnicd on
// 127.0.0.1 and .2 replace them once verbs.Open lands), and checks
// both exit 0 and print a result line with the size and iterations asked.
func TestPerftestTools(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "rnic")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/rnic").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	cases := []struct {
		tool  string
		conn  string
		sizes []string
	}{
		{"ib_write_bw", "RC", []string{"1", "1024", "1025", "65536"}},
		{"ib_read_bw", "RC", []string{"1", "1024", "1025", "65536"}},
		{"ib_send_bw", "RC", []string{"1", "1024", "1025", "65536"}},
		{"ib_send_bw", "UD", []string{"1", "1024"}},
		{"ib_write_bw", "UC", []string{"1", "1024"}},
		{"ib_atomic_bw", "RC", []string{"8"}},
		{"ib_write_lat", "RC", []string{"1", "1024", "1025", "65536"}},
		{"ib_read_lat", "RC", []string{"1", "1024", "1025", "65536"}},
		{"ib_send_lat", "RC", []string{"1", "1024", "1025", "65536"}},
		{"ib_send_lat", "UD", []string{"1", "1024"}},
	}
	for _, c := range cases {
		for _, size := range c.sizes {
			t.Run(fmt.Sprintf("%s/%s/%s", c.tool, c.conn, size), func(t *testing.T) {
				runPair(t, bin, c.tool, "-c", c.conn, "-s", size, "-n", "20", "-m", "1024")
			})
		}
	}
}

func runPair(t *testing.T, bin, tool string, args ...string) {
	if tool == "ib_atomic_bw" {
		args = []string{"-n", "20"} // atomics have a fixed size and RC only
	}
	port := freePort(t)
	common := append([]string{tool, "-p", fmt.Sprint(port)}, args...)
	var sout, serr, cout, cerr bytes.Buffer
	server := exec.Command(bin, append(common, "--local", "127.78.0.1")...)
	server.Stdout, server.Stderr = &sout, &serr
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	defer server.Process.Kill()
	// The client retries until the server listens.
	var clientErr error
	for i := 0; i < 50; i++ {
		cout.Reset()
		cerr.Reset()
		client := exec.Command(bin, append(common, "--local", "127.78.0.2", "127.78.0.1")...)
		client.Stdout, client.Stderr = &cout, &cerr
		clientErr = client.Run()
		if clientErr == nil || !strings.Contains(cerr.String(), "connection refused") {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	done := make(chan error, 1)
	go func() { done <- server.Wait() }()
	var serverErr error
	select {
	case serverErr = <-done:
	case <-time.After(60 * time.Second):
		server.Process.Kill()
		serverErr = fmt.Errorf("server did not exit")
	}
	if clientErr != nil || serverErr != nil {
		t.Fatalf("client: %v\n%s%s\nserver: %v\n%s%s", clientErr, cout.String(), cerr.String(), serverErr, sout.String(), serr.String())
	}
	size, iters := flagValue(args, "-s", "2"), "20"
	if tool == "ib_atomic_bw" {
		size = "8"
	}
	checkResult(t, "client", cout.String(), size, iters)
	if tool != "ib_read_lat" { // read_lat's server prints no result
		checkResult(t, "server", sout.String(), size, iters)
	}
}

func flagValue(args []string, name, def string) string {
	for i := 0; i+1 < len(args); i++ {
		if args[i] == name {
			return args[i+1]
		}
	}
	return def
}

// checkResult finds the result line under the table header and checks
// its #bytes and #iterations.
func checkResult(t *testing.T, who, out, size, iters string) {
	t.Helper()
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, " #bytes") && i+1 < len(lines) {
			f := strings.Fields(lines[i+1])
			if len(f) < 3 || f[0] != size || f[1] != iters {
				t.Fatalf("%s result line %q, want %s bytes and %s iterations\n%s", who, lines[i+1], size, iters, out)
			}
			return
		}
	}
	t.Fatalf("%s printed no result table:\n%s", who, out)
}

func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
