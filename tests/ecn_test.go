package tests

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rnicd/rnicd/internal/debtest"
)

// With rnicd's defaults (-cc dcqcn) and the README's commands as written,
// a switch's CE marks make the NIC slow down: nftables on the receiver's
// host marks a fifth of the RoCE packets that arrive there CE (as a
// congested ECN switch would), while `rnic ib_write_bw` runs from the
// sender's host. Off the receiver's wire (tshark on its veth, before
// netfilter), every data packet the sender put there is ECT(0) and the
// receiver sends CNPs (BTH opcode 0x81) back; the receiver's notification
// point counted CE packets and the CNPs it sent (no fewer than the
// capture shows), and the sender's reaction point handled CNPs. The
// lent-socket path this replaced sent no ECT packet and no CNP here.
//
// Over veth the daemon's UDP_SEGMENT runs stay one skb each: nftables
// marks, and tshark sees, a whole run (about 900 frames for 19,200
// packets), so their counts are of runs and the NIC's of packets: only
// "some" compares across them.
func TestNFTablesCEGivesCNPs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipped: needs root to make network namespaces and nftables rules; CI runs as root")
	}
	nft := debtest.Ensure(t, "nft", "nftables")
	tshark := debtest.Ensure(t, "tshark", "tshark")
	hosts := newHosts6(t)
	dir := t.TempDir()
	a, err := startDaemonIn(hosts.path(hosts.a), dir, "rnicEa", v4A.String())
	if err != nil {
		t.Fatal(err)
	}
	b, err := startDaemonIn(hosts.path(hosts.b), dir, "rnicEb", v4B.String())
	if err != nil {
		a.stop()
		t.Fatal(err)
	}
	stopper(t, a, b)
	t.Setenv("RNICD_DIR", dir)
	inB := func(name string, args ...string) *exec.Cmd {
		return exec.Command("nsenter", append([]string{"--net=" + hosts.path(hosts.b), "--", name}, args...)...)
	}
	for _, rule := range [][]string{
		{"add", "table", "ip", "ce"},
		{"add", "chain", "ip", "ce", "in", "{ type filter hook prerouting priority 0; }"},
		{"add", "rule", "ip", "ce", "in", "udp", "dport", "4791", "numgen", "random", "mod", "5", "0", "ip", "ecn", "set", "ce", "counter"},
	} {
		if out, err := inB(nft, rule...).CombinedOutput(); err != nil {
			t.Fatalf("nft %v: %v\n%s", rule, err, out)
		}
	}
	pc := filepath.Join(dir, "b.pcap")
	capture := inB(tshark, "-i", "v6b", "-f", "udp port 4791", "-w", pc)
	capture.Stderr = &lockedBuf{}
	if err := capture.Start(); err != nil {
		t.Fatal(err)
	}
	defer capture.Process.Kill()
	// tshark says "Capturing on 'v6b'" once it captures.
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(capture.Stderr.(*lockedBuf).String(), "Capturing on"); {
		if time.Now().After(deadline) {
			t.Fatalf("tshark never started capturing:\n%s", capture.Stderr.(*lockedBuf).String())
		}
		time.Sleep(20 * time.Millisecond)
	}

	// rnicEb's tool serves; rnicEa's writes 64 KiB WRITEs to it.
	tb := &toolBench{a: b, b: a, ca: open(t, "rnicEb"), cb: open(t, "rnicEa"), host: v4B.String()}
	tb.pairRun(t, hosts.rnicIn(hosts.b), hosts.rnicIn(hosts.a), "rnicEb", "rnicEa", "ib_write_bw", "-s", "65536", "-n", "300")
	mA, errA := tb.cb.Counters()
	mB, errB := tb.ca.Counters()
	if errA != nil || errB != nil {
		t.Fatal(errA, errB)
	}
	time.Sleep(200 * time.Millisecond) // the last packets reach the file
	capture.Process.Signal(os.Interrupt)
	capture.Wait()
	out, err := inB("nft", "list", "table", "ip", "ce").CombinedOutput()
	if err != nil {
		t.Fatalf("nft list: %v\n%s", err, out)
	}
	_, rest, _ := strings.Cut(string(out), "counter packets ")
	f := strings.Fields(rest)
	if len(f) == 0 {
		t.Fatalf("nft counter: %s", out)
	}
	marked, _ := strconv.ParseUint(f[0], 10, 64)

	// The wire: tshark's fields of every RoCEv2 packet, before netfilter.
	rows, err := exec.CommandContext(context.Background(), tshark, "-r", pc, "-T", "fields", "-E", "separator=,",
		"-e", "ip.src", "-e", "ip.dsfield.ecn", "-e", "infiniband.bth.opcode").Output()
	if err != nil {
		t.Fatalf("tshark -r: %v", err)
	}
	var data, ect, cnps int
	for _, line := range strings.Split(strings.TrimSpace(string(rows)), "\n") {
		c := strings.Split(line, ",")
		if len(c) != 3 {
			t.Fatalf("tshark row %q", line)
		}
		op, _ := strconv.Atoi(c[2])
		switch {
		case c[0] == v4A.String() && op >= 6 && op <= 11: // RC RDMA WRITE First ... Only with Immediate
			data++
			if c[1] == "2" {
				ect++
			}
		case c[0] == v4B.String() && c[2] == "129":
			cnps++
		}
	}
	t.Logf("wire at rnicEb: %d WRITE packets from rnicEa, %d of them ECT(0); %d CNPs from rnicEb; nftables marked %v CE; rnicEb np_ecn_marked_roce_packets %v np_cnp_sent %v; rnicEa rp_cnp_handled %v",
		data, ect, cnps, marked, mB["np_ecn_marked_roce_packets"], mB["np_cnp_sent"], mA["rp_cnp_handled"])
	if data == 0 || ect != data {
		t.Errorf("%d of %d WRITE packets on the wire are ECT(0); want all, and some", ect, data)
	}
	if marked == 0 || mB["np_ecn_marked_roce_packets"] == 0 {
		t.Errorf("nftables marked %v runs CE, rnicEb counted %v CE packets: want some of each", marked, mB["np_ecn_marked_roce_packets"])
	}
	// The capture may miss packets on a loaded host, never add any.
	if cnps == 0 || uint64(cnps) > mB["np_cnp_sent"] {
		t.Errorf("%d CNPs on the wire, rnicEb np_cnp_sent %v: want some, and no more than sent", cnps, mB["np_cnp_sent"])
	}
	if mA["rp_cnp_handled"] == 0 || mA["rp_cnp_handled"]+mA["rp_cnp_ignored"] > mB["np_cnp_sent"] {
		t.Errorf("rnicEa rp_cnp_handled %v, rp_cnp_ignored %v of rnicEb's %v CNPs: want some handled, none invented",
			mA["rp_cnp_handled"], mA["rp_cnp_ignored"], mB["np_cnp_sent"])
	}
}
