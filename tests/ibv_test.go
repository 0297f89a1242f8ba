package tests

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// buildRnic builds the toolbox once per test.
func buildRnic(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "rnic")
	build := exec.Command("go", "build", "-o", bin, "../cmd/rnic")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return bin
}

// freeTCPPort finds a port for a pingpong server; another program may take
// it in between, which shows as a failed run, not a wrong result.
func freeTCPPort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, p, _ := net.SplitHostPort(ln.Addr().String())
	return p
}

var addrLine = regexp.MustCompile(`^  (local|remote) address: +LID 0x0000, QPN 0x([0-9a-f]{6}), PSN 0x([0-9a-f]{6})[,:] GID (\S+)$`)

// TestPingpongProcesses runs each ibv_*_pingpong as two processes, as a
// user does on two hosts: the server on 127.0.0.1, the client on
// 127.0.0.2 connecting to it over TCP, each with its own in-process NIC
// (--local; with rnicd running, -d picks its device instead). Each side
// must print the other's QPN, PSN and GID as the other printed them, the
// byte count of the run, and no invalid page under -c.
func TestPingpongProcesses(t *testing.T) {
	bin := buildRnic(t)
	for _, tc := range []struct {
		tool  string
		flags []string
		size  int
		qps   int
	}{
		{"ibv_rc_pingpong", []string{"-s", "3000", "-n", "100", "-c"}, 3000, 1},
		{"ibv_rc_pingpong", []string{"-s", "65536", "-n", "20", "-c", "-e", "-m", "4096"}, 65536, 1},
		{"ibv_uc_pingpong", []string{"-s", "2048", "-n", "50", "-c"}, 2048, 1},
		{"ibv_ud_pingpong", []string{"-s", "1024", "-n", "50", "-c"}, 1024, 1},
		{"ibv_srq_pingpong", []string{"-s", "5000", "-n", "60", "-q", "3", "-c"}, 5000, 3},
	} {
		t.Run(tc.tool+" "+strings.Join(tc.flags, " "), func(t *testing.T) {
			port := freeTCPPort(t)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			args := append([]string{tc.tool, "-g", "0", "-p", port}, tc.flags...)
			srv := exec.CommandContext(ctx, bin, append(args, "--local", "127.0.0.1")...)
			var srvOut, srvErr bytes.Buffer
			srv.Stdout, srv.Stderr = &srvOut, &srvErr
			if err := srv.Start(); err != nil {
				t.Fatal(err)
			}
			// The client connects once, as rdma-core's does; until the server
			// listens, a refused client is started again.
			var cliOut []byte
			for {
				cli := exec.CommandContext(ctx, bin, append(args, "--local", "127.0.0.2", "127.0.0.1")...)
				var errb bytes.Buffer
				cli.Stderr = &errb
				out, err := cli.Output()
				if err == nil {
					cliOut = out
					break
				}
				if !strings.Contains(errb.String(), "connection refused") || ctx.Err() != nil {
					srv.Process.Kill()
					srv.Wait()
					t.Fatalf("client: %v\n%s%s\nserver:\n%s%s", err, out, errb.String(), srvOut.String(), srvErr.String())
				}
				time.Sleep(50 * time.Millisecond)
			}
			if err := srv.Wait(); err != nil {
				t.Fatalf("server: %v\n%s%s", err, srvOut.String(), srvErr.String())
			}
			checkPingpongOutput(t, tc.qps, tc.size, tc.flags, srvOut.String(), string(cliOut))
		})
	}
}

type ppLine struct{ qpn, psn, gid string }

// checkPingpongOutput checks both outputs by value: each side's remote
// lines are the other's local lines, the GIDs are the NICs' addresses,
// the QPNs are QPNs rnicd hands out (from 0x11), and the totals are right.
func checkPingpongOutput(t *testing.T, nqp, size int, flags []string, srv, cli string) {
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
		if sl[i].gid != "::ffff:127.0.0.1" || cl[i].gid != "::ffff:127.0.0.2" || q < 0x11 {
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
