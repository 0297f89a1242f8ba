package tests

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCLibAsyncQueueOverLimit runs Debian's ibv_devinfo on the C library
// as a client whose -client-max-fds its connection fills: ibv_open_device
// opens the context's event queue, which the daemon refuses as it
// refuses every creating request past a limit (hostif_over_limit, its
// log's warning), and the library says so on stderr, and what the
// context lacks for it, where it fell back silently before; the context
// works on (ibv_devinfo prints the device, exit 0).
func TestCLibAsyncQueueOverLimit(t *testing.T) {
	devinfo := debianTool(t, "ibv_devinfo", "ibverbs-utils")
	dir := t.TempDir()
	d := ownDaemon(t, dir, "rnicF", "-client-max-fds", "1")
	t.Setenv("RNICD_DIR", dir)
	// ibv_get_device_list asks each daemon its port on a connection of
	// its own, which the daemon gives back once it sees the hang-up: an
	// ibv_open_device right after may find it still held, and its
	// connection, not its queue, refused (a line naming connect): then
	// the open fails, as TestCLibOpenRefused shows. Each run is refused
	// once either way; the queue's refusal is looked for over up to 20
	// runs.
	refusal := func(what string) string {
		return "libibverbs-rnicd: rnicd refused ibv_open_device: " + what + ": this client holds 1 descriptors and asks for 1 more, " +
			"over its limit of 1 (rnicd -client-max-fds raises it)\n"
	}
	queueRefused := refusal("open_async") + "libibverbs-rnicd: rnicF: no asynchronous events on this context but DEVICE_FATAL\n"
	connRefused := refusal("connect") + "libibverbs-rnicd: open rnicF: rnicd refused the connection\n"
	runs, queue := 0, false
	for ; runs < 20 && !queue; runs++ {
		cmd := devinfo(context.Background(), "", "-d", "rnicF")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if strings.HasPrefix(stderr.String(), connRefused) && err != nil {
			continue
		}
		if err != nil || !strings.Contains(string(out), "hca_id:\trnicF\n") {
			t.Fatalf("ibv_devinfo: %v\n%s%s", err, out, stderr.String())
		}
		if queue = stderr.String() == queueRefused; !queue {
			t.Fatalf("ibv_devinfo's stderr\n%q\nwant\n%q", stderr.String(), queueRefused)
		}
	}
	if !queue {
		t.Fatalf("in %d runs the daemon never refused the queue itself", runs)
	}
	// This process's own connection fills its own limit; reading the
	// counters costs nothing.
	c := open(t, "rnicF")
	if m := must[map[string]uint64](t)(c.Counters()); m["hostif_over_limit"] != uint64(runs) {
		t.Fatalf("hostif_over_limit %d, want %d (a refusal a run)", m["hostif_over_limit"], runs)
	}
	told := false
	for _, l := range strings.Split(d.errb.String(), "\n") {
		told = told || strings.Contains(l, `msg="client over a limit"`) && strings.Contains(l, "comm=ibv_devinfo") &&
			strings.Contains(l, "open_async: ")
	}
	if !told {
		t.Fatalf("the daemon's log never told the refusal:\n%s", d.errb.String())
	}
}

// TestCLibOpenRefused runs clib/test/openlimit against an rnicd started
// with -client-max-conns 1: an ibv_open_device past the limit fails
// (NULL, ENOMEM) with the daemon's reason on stderr, as the kernel's
// open of a uverbs device fails, instead of handing back a context whose
// every call fails (its connection already closed); once the first
// context is closed, an open works again.
func TestCLibOpenRefused(t *testing.T) {
	lib := clibDir(t)
	dir := t.TempDir()
	ownDaemon(t, dir, "rnicF", "-client-max-conns", "1")
	cmd := exec.Command(filepath.Join(lib, "openlimit"), "rnicF")
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+lib, "RNICD_DIR="+dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	want := "the first context, once the probe's connection went: ok\n" +
		"a second context past -client-max-conns: NULL, ENOMEM: ok\n" +
		"after the first closed, an open that works: ok\nPASS\n"
	if err != nil || string(out) != want {
		t.Fatalf("openlimit: %v, printed\n%s\nwant\n%s\nstderr:\n%s", err, out, want, stderr.String())
	}
	// The first context's opens may be refused while the probe's
	// connection is still held; the second's is refused for certain.
	refused := "libibverbs-rnicd: rnicd refused ibv_open_device: connect: this client holds 1 connections and asks for 1 more, " +
		"over its limit of 1 (rnicd -client-max-conns raises it)\n" +
		"libibverbs-rnicd: open rnicF: rnicd refused the connection\n"
	if e := stderr.String(); !strings.Contains(e, refused) {
		t.Fatalf("openlimit's stderr\n%s\nwants the refusal\n%s", e, refused)
	}
	if e := strings.ReplaceAll(stderr.String(), refused, ""); e != "" {
		t.Fatalf("openlimit's stderr has more than refusals:\n%s", e)
	}
}
