package interop

// What Debian's ucx_perftest prints, both sides, and the check of a UCX
// case.

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
)

// epCfgRE is the line UCX_LOG_LEVEL=info prints for each endpoint
// configuration UCP made: its lanes, each "kind(transport/device:port)",
// as "ep_cfg[0]: tag(rc_verbs/rxe0:1)".
var epCfgRE = regexp.MustCompile(`(?m)ep_cfg\[\d+\]: (.*)$`)

// ucxCheck checks both sides' output of a ucx_perftest case: the client
// printed its Final line with the -n iterations; the server accepted the
// client's connection from the client's address; and each side's every
// endpoint put every lane on rc_verbs over its own device (rxe0 in the
// VM, rnicd's on the host), so that no message went over the auxiliary
// ud_verbs or anything else. "" if all held.
func ucxCheck(c tcase, rxeRole, hostOut, vmOut string) string {
	iters := "1000"
	for i := 0; i+1 < len(c.args); i++ {
		if c.args[i] == "-n" {
			iters = c.args[i+1]
		}
	}
	client, server := hostOut, vmOut
	clientSide, serverSide, clientAddr := "rnic's client", "rxe's server", hostAddr
	if rxeRole == "client" {
		client, server = vmOut, hostOut
		clientSide, serverSide, clientAddr = "rxe's client", "rnic's server", vmAddr
	}
	if !regexp.MustCompile(`(?m)^Final:\s+` + iters + `\s`).MatchString(client) {
		return fmt.Sprintf("%s printed no Final line of %s iterations", clientSide, iters)
	}
	if !strings.Contains(server, "Accepted connection from "+clientAddr+":") {
		return fmt.Sprintf("%s did not say it accepted a connection from %s", serverSide, clientAddr)
	}
	for _, s := range []struct{ side, out, dev string }{{"rnic's side", hostOut, device}, {"rxe's side", vmOut, "rxe0"}} {
		cfgs := epCfgRE.FindAllStringSubmatch(s.out, -1)
		if len(cfgs) == 0 {
			return s.side + " printed no endpoint configuration (ep_cfg)"
		}
		for _, m := range cfgs {
			for _, lane := range strings.Fields(m[1]) {
				if !strings.HasSuffix(lane, "(rc_verbs/"+s.dev+":1)") {
					return fmt.Sprintf("%s's endpoint has a lane %s, not on rc_verbs/%s:1", s.side, lane, s.dev)
				}
			}
		}
	}
	return ""
}

// The check against what ucx_perftest printed between two rnicd (UCX
// 1.13.1, -t tag_lat -n 100), with the devices renamed; and what it
// finds wrong.
func TestUCXCheck(t *testing.T) {
	client := func(dev, lane string) string {
		return "[1795732728.010453] [vm:5696 :0]      ucp_worker.c:1763 UCX  INFO    ep_cfg[0]: " + lane + "(rc_verbs/" + dev + ":1)\n" +
			"Final:                   100     27.829    76.389    76.389        0.10       0.10       13091       13091\n"
	}
	server := func(dev, from string) string {
		return "Waiting for connection...\nAccepted connection from " + from + ":34430\n" +
			"| Test:         tag match latency                                                                          |\n" +
			"[1795732728.010626] [vm:5694 :0]      ucp_worker.c:1763 UCX  INFO    ep_cfg[0]: tag(rc_verbs/" + dev + ":1)\n"
	}
	c := tcase{tool: "ucx_perftest", args: []string{"-t", "tag_lat", "-n", "100"}, clib: true}
	for _, tc := range []struct {
		name, role, host, vm, want string
	}{
		{"rxe client", "client", server(device, vmAddr), client("rxe0", "tag"), ""},
		{"rxe server", "server", client(device, "tag"), server("rxe0", hostAddr), ""},
		{"few iterations", "server", strings.Replace(client(device, "tag"), " 100 ", " 10 ", 1), server("rxe0", hostAddr), "rnic's client printed no Final line of 100 iterations"},
		{"other client", "server", client(device, "tag"), server("rxe0", "198.18.0.9"), "rxe's server did not say it accepted a connection from " + hostAddr},
		{"no lanes", "client", server(device, vmAddr), strings.Replace(client("rxe0", "tag"), "ep_cfg", "ep", 1), "rxe's side printed no endpoint configuration (ep_cfg)"},
		{"ud lane", "client", server(device, vmAddr) + "ep_cfg[1]: tag(rc_verbs/" + device + ":1) am(ud_verbs/" + device + ":1)\n", client("rxe0", "tag"),
			"rnic's side's endpoint has a lane am(ud_verbs/" + device + ":1), not on rc_verbs/" + device + ":1"},
	} {
		if got := ucxCheck(c, tc.role, tc.host, tc.vm); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
