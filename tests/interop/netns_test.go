package interop

// The namespace of one link MTU: a bridge with rnicd's addresses and a
// tap for the VM, and the nftables rules that impair the tap.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// netns is the namespace of one link: br0 holds rnicd's addresses, tap0
// is the VM's wire.
type netns struct {
	name string
}

func sh(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%v: %v\n%s", args, err, out)
	}
}

// newNetns makes the namespace of a link of MTU mtu. Its name carries
// this process's id: two runs of the suite on one machine do not delete
// each other's namespaces.
func newNetns(t *testing.T, mtu int) *netns {
	n := &netns{name: fmt.Sprintf("rnio-%d-%d", mtu, os.Getpid())}
	m := strconv.Itoa(mtu)
	sh(t, "ip", "netns", "add", n.name)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", n.name).Run() })
	sh(t, "ip", "-n", n.name, "link", "set", "lo", "up")
	sh(t, "ip", "-n", n.name, "link", "add", "br0", "mtu", m, "type", "bridge")
	sh(t, "ip", "-n", n.name, "addr", "add", hostAddr+"/24", "dev", "br0")
	sh(t, "ip", "-n", n.name, "addr", "add", udpAddr+"/24", "dev", "br0")
	// No duplicate address detection: the address is usable at once, and
	// the link has no one else to collide with.
	sh(t, "ip", "-n", n.name, "addr", "add", hostAddr6+"/64", "dev", "br0", "nodad")
	sh(t, "ip", "-n", n.name, "tuntap", "add", "dev", "tap0", "mode", "tap")
	// A long queue: the VM under TCG drains the tap slowly, and a burst of
	// unreliable (UC, UD) packets the queue drops is a message lost for
	// good, which would fail a case for the emulator's sake.
	sh(t, "ip", "-n", n.name, "link", "set", "tap0", "mtu", m, "txqueuelen", "20000", "master", "br0", "up")
	sh(t, "ip", "-n", n.name, "link", "set", "br0", "up")
	return n
}

func (n *netns) command(ctx context.Context, env []string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", n.name}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	return cmd
}

// impairment is what nftables does to the tap's RoCE packets for a phase
// (this kernel has no netem): its chains go in table netdev rnio, hooked
// on tap0 (ingress is what the VM sends, egress what it receives).
type impairment struct {
	name   string // as the summary table shows it
	chains string
	// check says what rnicd's counters must show after a phase under the
	// impairment, moved as they moved over the phase; "" if they do. Nil
	// checks nothing.
	check func(rxeRole string, moved map[string]uint64) string
}

// The impairments of the loss cases.
var (
	loss = &impairment{name: "3% loss each way",
		chains: `chain in { type filter hook ingress device tap0 priority 0; udp dport 4791 numgen random mod 100 < 3 counter drop; }
  chain out { type filter hook egress device tap0 priority 0; udp dport 4791 numgen random mod 100 < 3 counter drop; }`,
		check: func(rxeRole string, moved map[string]uint64) string {
			switch {
			// rxe as client: a lost request leaves a gap rnicd sees
			// when a later one comes; a lost READ response, a READ
			// rxe asks again for. A READ case alone has few requests
			// (8 of ib_read_bw -n 8, none of them lost in about four
			// runs of five at 3%) but about 250 lost responses.
			case rxeRole == "client" && moved["out_of_seq_request"] == 0 && moved["duplicate_request"] == 0:
				return "out_of_seq_request or duplicate_request moved (rnicd saw rxe's gaps or its retries)"
			case rxeRole == "server" && moved["retransmitted_pkts"] == 0:
				return "retransmitted_pkts moved (rnicd went back)"
			}
			return ""
		}}
	// The corruption sets the last byte of the BTH (the PSN's low byte)
	// to 0xff, which the ICRC covers: rnicd must drop such a packet and
	// count it.
	corrupt = &impairment{name: "2% of rxe's packets corrupted",
		chains: `chain in { type filter hook ingress device tap0 priority 0; udp dport 4791 numgen random mod 100 < 2 @th,152,8 set 0xff counter; }`,
		check: func(_ string, moved map[string]uint64) string {
			if moved["icrc_errors"] == 0 {
				return "icrc_errors moved (rnicd dropped rxe's corrupted packets)"
			}
			return ""
		}}
)

// markCE is an impairment that marks percent of the RoCE packets each
// way Congestion Experienced, as a congested switch would: what a case
// of the flow-control work installs (the kernel has no ECN qdisc).
func markCE(percent int, check func(rxeRole string, moved map[string]uint64) string) *impairment {
	rule := fmt.Sprintf("udp dport 4791 numgen random mod 100 < %d ip ecn set ce counter;", percent)
	return &impairment{name: fmt.Sprintf("%d%% CE-marked each way", percent),
		chains: "chain in { type filter hook ingress device tap0 priority 0; " + rule + " }\n" +
			"  chain out { type filter hook egress device tap0 priority 0; " + rule + " }",
		check: check}
}

// impair installs im on the tap and returns what removes it; a nil im
// installs nothing.
func (n *netns) impair(t *testing.T, im *impairment) (remove func()) {
	t.Helper()
	if im == nil {
		return func() {}
	}
	cmd := n.command(context.Background(), nil, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader("table netdev rnio {\n  " + im.chains + "\n}\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nft (%s): %v\n%s", im.name, err, out)
	}
	return func() {
		if out, err := n.command(context.Background(), nil, "nft", "delete", "table", "netdev", "rnio").CombinedOutput(); err != nil {
			t.Errorf("nft: remove %s: %v\n%s", im.name, err, out)
		}
	}
}
