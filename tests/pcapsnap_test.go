package tests

import (
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/rnicd/rnicd/internal/debtest"
)

// TestCaptureSnapLen: rnicd -pcap -pcap-snap 128 keeps every packet and
// the first 128 bytes of each, as tcpdump -s: tshark decodes each frame
// as RoCEv2 (BTH, RETH with the WRITE's length, AETH) and says each is
// 128 bytes of a longer one, and the capture holds as many packets each
// way as the daemon's counters, for `rnic ib_write_bw -s 8192` at MTU
// 1024 (eight packets a message).
func TestCaptureSnapLen(t *testing.T) {
	tshark := debtest.Ensure(t, "tshark", "tshark")
	dir := t.TempDir()
	t.Setenv("RNICD_DIR", dir)
	pc := filepath.Join(dir, "rnicA.pcap")
	addrA := ownAddr(t)
	a, err := startDaemon(dir, "rnicA", addrA, "-pcap", pc, "-pcap-snap", "128")
	if err != nil {
		t.Fatal(err)
	}
	b, err := startDaemon(dir, "rnicB", ownAddr(t))
	if err != nil {
		a.stop()
		t.Fatal(err)
	}
	stopBoth := stopper(t, a, b)
	if !strings.Contains(a.errb.String(), `snap="128 bytes a frame"`) {
		t.Errorf("rnicA's log does not say what it keeps of a frame:\n%s", a.errb.String())
	}
	tb := &toolBench{a: a, b: b, ca: open(t, "rnicA"), cb: open(t, "rnicB")}
	const msgs = 20
	tb.pair(t, "ib_write_bw", "-s", "8192", "-n", strconv.Itoa(msgs))
	c := must[map[string]uint64](t)(tb.ca.Counters())
	stopBoth()

	from, to := tsharkCount(t, tshark, []string{pc}, addrA)
	if uint64(from) != c["sent_pkts"] || uint64(to) != c["rcvd_pkts"] {
		t.Errorf("the capture has %d packets from rnicA and %d to it, its counters %d and %d", from, to, c["sent_pkts"], c["rcvd_pkts"])
	}
	out, err := exec.Command(tshark, "-r", pc, "-T", "fields", "-E", "separator=,",
		"-e", "frame.len", "-e", "frame.cap_len", "-e", "infiniband.bth.opcode", "-e", "infiniband.reth.dmalen").Output()
	if err != nil {
		t.Fatalf("tshark: %v", err)
	}
	cut, firsts := 0, 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(line, ",")
		if len(f) != 4 {
			t.Fatalf("tshark line %q", line)
		}
		n, _ := strconv.Atoi(f[0])
		kept, _ := strconv.Atoi(f[1])
		if kept != min(n, 128) {
			t.Errorf("frame %q: %d bytes kept of %d, want %d", line, kept, n, min(n, 128))
		}
		if n > 128 {
			cut++
		}
		if f[2] == "6" { // RDMA WRITE First: its RETH survives the cut
			firsts++
			if f[3] != "8192" {
				t.Errorf("frame %q: a WRITE First whose RETH says %q bytes, want 8192", line, f[3])
			}
		}
	}
	if cut < 8*msgs || firsts < msgs {
		t.Errorf("%d frames cut and %d WRITE Firsts, want at least %d and %d", cut, firsts, 8*msgs, msgs)
	}
}
