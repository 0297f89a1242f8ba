package interop

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
)

// The harness's own parts, without a VM.

func TestParseVMLog(t *testing.T) {
	l := parseVMLog([]byte("=== gid 1 0000:0000:0000:0000:0000:ffff:c612:0002\r\n" +
		"=== out 0 3 hello\n=== retry 0 3 1\n=== out 0 3 world\n=== case 0 3 rc=17\n=== case 2 0 rc=0\nnoise\n"))
	if rc, ok := l.rc[caseID{0, 3}]; !ok || rc != 17 {
		t.Errorf("case 0 3: rc %d, finished %v; want 17, true", rc, ok)
	}
	if _, ok := l.rc[caseID{0, 2}]; ok {
		t.Error("case 0 2 finished, but the log never said so")
	}
	if l.retries[caseID{0, 3}] != 1 || l.out[caseID{0, 3}].String() != "hello\nworld\n" {
		t.Errorf("case 0 3: retries %d, output %q", l.retries[caseID{0, 3}], l.out[caseID{0, 3}].String())
	}
	if g := l.gids[1]; g != sysfsGID(netip.MustParseAddr(vmAddr)) {
		t.Errorf("GID 1 %q, want the VM's IPv4 GID", g)
	}
}

func TestSysfsGID(t *testing.T) {
	for addr, want := range map[string]string{
		"198.18.0.2":    "0000:0000:0000:0000:0000:ffff:c612:0002",
		"2001:db8:1::2": "2001:0db8:0001:0000:0000:0000:0000:0002",
	} {
		if got := sysfsGID(netip.MustParseAddr(addr)); got != want {
			t.Errorf("%s: %s, want %s", addr, got, want)
		}
	}
}

// A case with an impairment of its own runs alone under it, in both
// roles, after the plain phases and never in them; ports never repeat.
func TestPlanImpairedCase(t *testing.T) {
	ce := markCE(10, nil)
	cases := []tcase{{tool: "ib_write_bw"}, {tool: "ib_send_bw", impair: ce}, {tool: "ib_read_bw", loss: true}}
	phases := plan(cases)
	var roles []string
	ports := map[int]bool{}
	for _, ph := range phases {
		for i, c := range ph.cases {
			if ports[ph.ports[i]] {
				t.Errorf("port %d used twice", ph.ports[i])
			}
			ports[ph.ports[i]] = true
			if (c.impair != nil) != (ph.impair == ce) {
				t.Errorf("case %s in a phase under %v", c.name(), ph.impair)
			}
		}
		if ph.impair == ce {
			if len(ph.cases) != 1 {
				t.Errorf("the impaired case shares its phase: %d cases", len(ph.cases))
			}
			roles = append(roles, ph.rxeRole)
		}
	}
	if len(roles) != 2 || roles[0] == roles[1] {
		t.Errorf("the impaired case ran with rxe as %v, want client and server", roles)
	}
	if len(phases) != 2+3+2 {
		t.Errorf("%d phases, want 2 plain, 3 loss and corruption, 2 for the impaired case", len(phases))
	}
}

// The IPv6 cases run over rxe's IPv6 GID on both sides and an rnicd on
// hostAddr6; the exchange goes over IPv6 only where the VM's side is
// rdma-core's pingpong client (Debian's perftest resolves AF_INET only,
// the pingpong server listens on 0.0.0.0).
func TestIPv6CaseCommands(t *testing.T) {
	for _, tc := range []struct {
		c        tcase
		vm, host string
		index    string
	}{
		{tcase{tool: "ib_write_bw", args: []string{"-s", "8"}, ipv6: true}, hostAddr, vmAddr, "-x"},
		{tcase{tool: "ibv_rc_pingpong", args: []string{"--chk"}, ipv6: true}, hostAddr6, vmAddr, "-g"},
	} {
		vm := vmCommand(tc.c, 20001, true)
		if want := fmt.Sprintf("%s -d rxe0 %s $g6 -p 20001 %s %s", tc.c.tool, tc.index, strings.Join(tc.c.args, " "), tc.vm); vm != want {
			t.Errorf("VM: %q, want %q", vm, want)
		}
		host := strings.Join(hostArgs(tc.c, 20001, true), " ")
		if want := fmt.Sprintf("%s -d %s %s 1 -p 20001 %s %s", tc.c.tool, device6, tc.index, strings.Join(tc.c.args, " "), tc.host); host != want {
			t.Errorf("host: %q, want %q", host, want)
		}
	}
}
