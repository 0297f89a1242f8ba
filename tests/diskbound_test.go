package tests

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket/pcapgo"

	"github.com/rnicd/rnicd/internal/debtest"
	"github.com/rnicd/rnicd/rnic/trace"
)

// TestDiskBound is "10 minutes of full-speed traffic leaves at most the
// documented bound on disk", scaled down for CI: a daemon with
// --trace and --pcap bounded to 3 files of 256 KiB each carries an
// ib_write_bw of 32 MiB (about 36 MB of capture and more of trace, a
// hundred times the bound), and what is left on disk afterwards is 3
// files of each, none past 256 KiB, every capture file one that tshark
// and gopacket read on its own to its end, every trace file JSON lines
// that read on their own. The bound is the same arithmetic at any size:
// the daemon's default (10 files of 100 MiB) is this with other numbers.
func TestDiskBound(t *testing.T) {
	tshark := debtest.Ensure(t, "tshark", "tshark")
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	if err := os.Mkdir(out, 0o755); err != nil {
		t.Fatal(err)
	}
	const size, files = 256 << 10, 3
	trPath, pcPath := filepath.Join(out, "e.json"), filepath.Join(out, "e.pcap")
	de, err := startDaemon(dir, "rnicE", ownAddr(t), "-trace", trPath, "-trace-size", "256K", "-trace-files", "3",
		"-pcap", pcPath, "-pcap-size", "256K", "-pcap-files", "3")
	if err != nil {
		t.Fatal(err)
	}
	df, err := startDaemon(dir, "rnicF", ownAddr(t))
	if err != nil {
		de.stop()
		t.Fatal(err)
	}
	t.Setenv("RNICD_DIR", dir)
	stopBoth := stopper(t, de, df)

	// 512 WRITEs of 64 KiB: 32,768 packets of MTU 1024 into rnicE, and
	// its ACKs, as fast as the NICs run: every packet passes rnicE's
	// capture.
	writeBW(t, "rnicE", "rnicF", de.addr.String(), "-s", "65536", "-n", "512")
	stopBoth()
	log := de.errb.String()

	// What was written, by the daemon's own account, against what is left.
	m := regexp.MustCompile(`"capture closed" packets=(\d+) files=(\d+)`).FindStringSubmatch(log)
	if m == nil {
		t.Fatalf("rnicE logged no capture summary:\n%s", log)
	}
	packets, _ := strconv.Atoi(m[1])
	opened, _ := strconv.Atoi(m[2])
	if packets < 32768 || opened <= files {
		t.Fatalf("capture: %d packets in %d files, want at least %d packets over more than %d files", packets, opened, 32768, files)
	}
	ents, err := os.ReadDir(out)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	var total int64
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() > size {
			t.Errorf("%s: %d bytes, past the %d bound", e.Name(), fi.Size(), size)
		}
		total += fi.Size()
		names = append(names, e.Name())
	}
	sort.Strings(names)
	var pcaps, traces []string
	for _, n := range names {
		switch {
		case n == "e.pcap" || strings.HasPrefix(n, "e.pcap."):
			pcaps = append(pcaps, filepath.Join(out, n))
		case n == "e.json" || strings.HasPrefix(n, "e.json."):
			traces = append(traces, filepath.Join(out, n))
		default:
			t.Errorf("unexpected file %s", n)
		}
	}
	if len(pcaps) != files || len(traces) != files || total > 2*files*size {
		t.Fatalf("left on disk: %v, %d bytes; want %d capture and %d trace files, at most %d bytes", names, total, files, files, 2*files*size)
	}
	t.Logf("%d packets captured over %d files; left on disk: %v, %d bytes (bound %d)", packets, opened, names, total, 2*files*size)

	for _, p := range pcaps {
		n := readPcap(t, p)
		if n == 0 {
			t.Errorf("%s holds no packet", p)
		}
		bad, err := exec.Command(tshark, "-r", p, "-Y", "_ws.malformed || !infiniband").Output()
		if err != nil || strings.TrimSpace(string(bad)) != "" {
			t.Errorf("tshark -r %s: %v\n%s", p, err, bad)
		}
	}
	for _, p := range traces {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		var n int
		var last uint64
		err = trace.ReadJSON(f, func(e *trace.Event) error {
			if n > 0 && e.Seq <= last {
				return fmt.Errorf("event seq %d after %d", e.Seq, last)
			}
			n, last = n+1, e.Seq
			return nil
		})
		f.Close()
		if err != nil || n == 0 {
			t.Errorf("%s: %d events, then %v: not JSON lines of its own", p, n, err)
		}
	}
}

// writeBW runs ib_write_bw with args, its server on srvDev (at srvAddr)
// and its client on cliDev, and wants both to exit 0.
func writeBW(t *testing.T, srvDev, cliDev, srvAddr string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args = append([]string{"ib_write_bw", "-p", freePort(t)}, args...)
	server := rnic(ctx, append(args, "-d", srvDev)...)
	var sout bytes.Buffer
	server.Stdout, server.Stderr = &sout, &sout
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	var cout bytes.Buffer
	var err error
	for {
		cout.Reset()
		client := rnic(ctx, append(args, "-d", cliDev, srvAddr)...)
		client.Stdout, client.Stderr = &cout, &cout
		err = client.Run()
		if err == nil || !strings.Contains(cout.String(), "connection refused") || ctx.Err() != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		server.Process.Kill()
		server.Wait()
		t.Fatalf("client: %v\n%s", err, cout.String())
	}
	if err := server.Wait(); err != nil {
		t.Fatalf("server: %v\n%s", err, sout.String())
	}
}

// TestDiskFull gives rnicd a trace and a capture it cannot write
// (/dev/full: every write fails with ENOSPC) and traffic: the daemon must
// say so once for each, not every second, and serve on.
func TestDiskFull(t *testing.T) {
	dir := t.TempDir()
	dg, err := startDaemon(dir, "rnicG", ownAddr(t), "-trace", "/dev/full", "-pcap", "/dev/full")
	if err != nil {
		t.Fatal(err)
	}
	dh, err := startDaemon(dir, "rnicI", ownAddr(t))
	if err != nil {
		dg.stop()
		t.Fatal(err)
	}
	defer dh.stop()
	t.Setenv("RNICD_DIR", dir)
	writeBW(t, "rnicG", "rnicI", dg.addr.String(), "-s", "65536", "-n", "64")
	time.Sleep(2500 * time.Millisecond) // a few of the daemon's ticks
	writeBW(t, "rnicG", "rnicI", dg.addr.String(), "-s", "4096", "-n", "64")
	if err := dg.stop(); err != nil {
		t.Fatalf("%v\n%s", err, dg.errb.String())
	}
	log := dg.errb.String()
	for _, what := range []string{"capture stopped", "trace file stopped"} {
		if n := strings.Count(log, what); n != 1 {
			t.Errorf("%d lines say %q, want 1:\n%s", n, what, log)
		}
	}
	if n := strings.Count(log, "level=ERROR"); n != 2 {
		t.Errorf("%d error lines, want 2:\n%s", n, log)
	}
}

// readPcap reads every record of the capture file p with gopacket's
// reader and returns how many there were; a truncated or foreign file
// fails the test.
func readPcap(t *testing.T, p string) int {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", p, err)
	}
	n := 0
	for {
		_, _, err := r.ReadPacketData()
		if errors.Is(err, io.EOF) {
			return n
		}
		if err != nil {
			t.Fatalf("%s: record %d: %v", p, n, err)
		}
		n++
	}
}
