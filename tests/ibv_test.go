package tests

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

var addrLine = regexp.MustCompile(`^  (local|remote) address: +LID 0x0000, QPN 0x([0-9a-f]{6}), PSN 0x([0-9a-f]{6})[,:] GID (\S+)$`)

// TestPingpongTools runs each ibv_*_pingpong between two rnicd processes
// as a user does on two hosts: the server on rnicA, the
// client on rnicB connecting to it over TCP. Each side must
// print the other's QPN, PSN and GID as the other printed them and the
// byte count of the run, and under --chk find every byte as sent.
func TestPingpongTools(t *testing.T) {
	tb := newToolBench(t)
	for _, tc := range pingpongCases {
		t.Run(tc.tool+" "+strings.Join(tc.flags, " "), func(t *testing.T) {
			srv, cli := tb.pair(t, tc.tool, append([]string{"-g", "1"}, tc.flags...)...)
			tb.checkPingpongOutput(t, tc.qps, tc.size, tc.flags, srv, cli)
		})
	}
}

// pingpongCases are the ibv_*_pingpong runs the tests make: the tool, its
// flags, the message size and the number of QPs.
var pingpongCases = []struct {
	tool  string
	flags []string
	size  int
	qps   int
}{
	{"ibv_rc_pingpong", []string{"-s", "1", "-n", "20", "--chk"}, 1, 1},
	{"ibv_rc_pingpong", []string{"-s", "3000", "-n", "50", "--chk"}, 3000, 1},
	{"ibv_rc_pingpong", []string{"-s", "65536", "-n", "20", "--chk", "-e", "-m", "1024"}, 65536, 1},
	{"ibv_uc_pingpong", []string{"-s", "2048", "-n", "50", "--chk"}, 2048, 1},
	{"ibv_ud_pingpong", []string{"-s", "1024", "-n", "50", "--chk"}, 1024, 1},
	{"ibv_srq_pingpong", []string{"-s", "5000", "-n", "60", "-q", "3", "--chk"}, 5000, 3},
}

type ppLine struct{ qpn, psn, gid string }

// checkPingpongOutput checks both outputs by value: each side's remote
// lines are the other's local lines, the GIDs are the NICs' addresses,
// the QPNs are QPNs rnicd hands out (from 0x11), and the totals are right.
func (tb *toolBench) checkPingpongOutput(t *testing.T, nqp, size int, flags []string, srv, cli string) {
	t.Helper()
	checkPingpongGIDs(t, "::ffff:"+tb.a.addr.String(), "::ffff:"+tb.b.addr.String(), nqp, size, flags, srv, cli)
}

// checkPingpongGIDs is checkPingpongOutput for a server whose GID prints
// as srvGID and a client's as cliGID.
func checkPingpongGIDs(t *testing.T, srvGID, cliGID string, nqp, size int, flags []string, srv, cli string) {
	t.Helper()
	parse := func(out string) (local, remote []ppLine, tail []string) {
		for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
			m := addrLine.FindStringSubmatch(l)
			switch {
			case m == nil:
				tail = append(tail, l)
			case m[1] == "local":
				local = append(local, ppLine{m[2], m[3], m[4]})
			default:
				remote = append(remote, ppLine{m[2], m[3], m[4]})
			}
		}
		return
	}
	sl, sr, st := parse(srv)
	cl, cr, ct := parse(cli)
	if len(sl) != nqp || len(cl) != nqp || fmt.Sprint(sl) != fmt.Sprint(cr) || fmt.Sprint(cl) != fmt.Sprint(sr) {
		t.Fatalf("the sides disagree:\nserver:\n%s\nclient:\n%s", srv, cli)
	}
	for i := range sl {
		q, _ := strconv.ParseUint(sl[i].qpn, 16, 32)
		if sl[i].gid != srvGID || cl[i].gid != cliGID || q < 0x11 {
			t.Errorf("QP %d: server %+v client %+v", i, sl[i], cl[i])
		}
	}
	iters := 0
	for i, f := range flags {
		if f == "-n" {
			iters, _ = strconv.Atoi(flags[i+1])
		}
	}
	for _, tail := range [][]string{st, ct} {
		if len(tail) != 2 || !strings.HasPrefix(tail[0], fmt.Sprintf("%d bytes in ", 2*size*iters)) ||
			!strings.HasPrefix(tail[1], fmt.Sprintf("%d iters in ", iters)) || !strings.HasSuffix(tail[1], " usec/iter") {
			t.Errorf("result lines %q", tail)
		}
	}
}
