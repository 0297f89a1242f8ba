package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestDemo builds rnic and runs `rnic demo` as a newcomer does: two NICs
// on loopback addresses, no root. A newcomer's run takes the defaults,
// 127.0.0.1 and 127.0.0.2; the test gives -a and -b addresses of its own,
// so that a run beside it (another package, another developer) cannot
// hold UDP 4791 there. Every test must report its data
// checked, and the account of one 4096-byte WRITE at MTU 1024 must show
// 4 packets out, 4 in, one ACK back and the CQE.
func TestDemo(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "rnic")
	build := exec.Command("go", "build", "-o", bin, "../cmd/rnic")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	addrA, addrB := ownAddr(t), ownAddr(t)
	out, err := exec.Command(bin, "demo", "-a", addrA, "-b", addrB, "-n", "50", "-s", "16384").CombinedOutput()
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out)
	}
	s := string(out)
	t.Logf("\n%s", s)
	for _, test := range []string{"RDMA_WRITE", "RDMA_READ", "SEND", "ATOMIC_FETCH_AND_ADD"} {
		size := "16384"
		if test == "ATOMIC_FETCH_AND_ADD" {
			size = "8"
		}
		re := regexp.MustCompile(`(?m)^ ` + test + ` +` + size + ` +50 +[0-9.]+ +[0-9.]+ +[0-9.]+  ok$`)
		if !re.MatchString(s) {
			t.Errorf("no result line for %s", test)
		}
	}
	for _, want := range []string{
		"A on " + addrA + " (QPN 0x000011), B on " + addrB + " (QPN 0x000011)",
		"segments 4096 bytes by the MTU into 4 packets",
		"UDP to " + addrB + ":4791\n             sent_pkts +4\n",
		"rcvd_pkts +4, ICRC checked (icrc_errors +0)",
		"(out_of_seq_request +0, duplicate_request +0)",
		"sent (sent_pkts +1)",
		"the ACK arrives (rcvd_pkts +1)",
		"CQE written: wr_id 42 status SUCCESS opcode RDMA_WRITE qp 0x000011",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("no %q", want)
		}
	}
	// The PSN range of the explained WRITE is four consecutive PSNs.
	m := regexp.MustCompile(`PSN 0x([0-9a-f]{6})\.\.0x([0-9a-f]{6})`).FindStringSubmatch(s)
	if m == nil {
		t.Fatal("no PSN range")
	}
	first, err1 := strconv.ParseUint(m[1], 16, 32)
	last, err2 := strconv.ParseUint(m[2], 16, 32)
	if err1 != nil || err2 != nil || (last-first)&0xffffff != 3 {
		t.Errorf("PSNs 0x%06x..0x%06x are not 4 packets", first, last)
	}
}
