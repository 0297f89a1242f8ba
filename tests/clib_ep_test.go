package tests

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rnicd/rnicd/internal/debtest"
)

// Synchronous rdma_cm IDs on the C library: Debian's rdma_server and
// rdma_client (rdma_create_ep, rdma_get_request, the rdma_verbs.h
// helpers) and the C test program cmsync (rdma_migrate_id, a synchronous
// listener's rdma_get_request) between the two rnicd.

// TestCLibRDMACMServerClient runs Debian's rdma_server on rnicA's
// address and rdma_client towards it: the client sends 16 bytes, the
// server receives them and sends them back, each side waiting for its
// completions (rdma_get_recv_comp, rdma_get_send_comp); then
// rdma_xserver (a listener on the wildcard address, so on both rnicd)
// and rdma_xclient over RC, where the client sends and the server
// receives. Every program prints its start and its result, 0, and
// nothing else.
func TestCLibRDMACMServerClient(t *testing.T) {
	tb := newToolBench(t)
	lib := clibDir(t)
	for _, c := range []struct{ srv, cli string }{{"rdma_server", "rdma_client"}, {"rdma_xserver", "rdma_xclient"}} {
		srvBin, cliBin := debtest.Ensure(t, c.srv, "rdmacm-utils"), debtest.Ensure(t, c.cli, "rdmacm-utils")
		srvArgs := []string{"-p", freePort(t)}
		if c.srv == "rdma_server" {
			srvArgs = append(srvArgs, "-s", tb.a.addr.String())
		}
		sout, cout := tb.cmPair(t, lib, srvBin, srvArgs, cliBin, "-s", tb.a.addr.String(), "-p", srvArgs[1])
		// The programs print argv[0].
		if want := srvBin + ": start\n" + srvBin + ": end 0\n"; sout != want && sout != strings.ReplaceAll(want, srvBin, c.srv) {
			t.Errorf("%s printed\n%s\nwant\n%s", c.srv, sout, want)
		}
		if want := cliBin + ": start\n" + cliBin + ": end 0\n"; cout != want && cout != strings.ReplaceAll(want, cliBin, c.cli) {
			t.Errorf("%s printed\n%s\nwant\n%s", c.cli, cout, want)
		}
	}
}

// cmPair runs the server srvBin with srvArgs, and once rnicA has its
// listener the client cliBin with cliArgs, both on the library in lib;
// it returns what each printed (stdout and stderr) once both exited 0,
// and waits until both daemons hold nothing of them.
func (tb *toolBench) cmPair(t *testing.T, lib, srvBin string, srvArgs []string, cliBin string, cliArgs ...string) (srv, cli string) {
	t.Helper()
	env := append(os.Environ(), "LD_LIBRARY_PATH="+lib)
	srv, cli = runCMPair(t, env, env, func() { tb.waitListener(t) }, srvBin, srvArgs, cliBin, cliArgs...)
	tb.idle(t)
	return srv, cli
}

// runCMPair runs the server srvBin with srvArgs in the environment
// srvEnv, and once listening says it listens the client cliBin with
// cliArgs in cliEnv; it returns what each printed (stdout and stderr)
// once both exited 0.
func runCMPair(t *testing.T, srvEnv, cliEnv []string, listening func(), srvBin string, srvArgs []string, cliBin string, cliArgs ...string) (srv, cli string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	server := exec.CommandContext(ctx, srvBin, srvArgs...)
	server.Env = srvEnv
	sout := &lockedBuf{}
	server.Stdout, server.Stderr = sout, sout
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	defer server.Process.Kill() // a listening that fails leaves it behind
	listening()
	client := exec.CommandContext(ctx, cliBin, cliArgs...)
	client.Env = cliEnv
	var cout strings.Builder
	client.Stdout, client.Stderr = &cout, &cout
	clientErr := client.Run()
	if clientErr != nil {
		server.Process.Kill()
	}
	serverErr := server.Wait()
	if clientErr != nil || serverErr != nil {
		t.Fatalf("%v: %v\n%s\n%v: %v\n%s", server.Args, serverErr, sout, client.Args, clientErr, cout.String())
	}
	return sout.String(), cout.String()
}

// TestCLibCMSync runs the C test program cmsync: a synchronous
// rdma_connect where nobody listens fails with ECONNREFUSED; an address
// no rnicd holds does not bind, 127.0.0.1 does (as on rxe, where rping
// -s -a 127.0.0.1 listens) and a listener there hears a connect to
// 127.0.0.1 and not one from the other rnicd to its address; a
// synchronous listener
// on rnicA gets a synchronous client's connect request from rnicB with
// rdma_get_request (its QP made from rdma_create_ep's attributes), both
// sides' calls return once their events came, rdma_init_qp_attr gives
// the connected QP's attributes, a message goes each way,
// and rdma_migrate_id moves an ID with an event channel to another
// channel, where its DISCONNECTED then arrives; the server's synchronous
// rdma_disconnect returns with its own.
func TestCLibCMSync(t *testing.T) {
	tb := newToolBench(t)
	lib := clibDir(t)
	cmd := exec.Command(filepath.Join(lib, "cmsync"), tb.a.addr.String(), tb.b.addr.String(), freePort(t))
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+lib)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	want := "rdma_connect where nobody listens: ECONNREFUSED, id->event REJECTED with status 8\n" +
		"rdma_bind_addr: 198.51.100.7 EADDRNOTAVAIL; 127.0.0.1 listens, hears 127.0.0.1, refuses the server's address\n" +
		"rdma_get_request: a connect request from " + tb.b.addr.String() + ", its QP made\n" +
		"rdma_accept returned with ESTABLISHED\n" +
		"rdma_init_qp_attr: INIT, RTR (the client's QPN) and RTS\n" +
		"server got \"ping from client\", client got \"pong from server\"\n" +
		"rdma_migrate_id: DISCONNECTED on the new channel, none on the old\n" +
		"rdma_disconnect returned with DISCONNECTED\n" +
		"PASS\n"
	if err != nil || string(out) != want {
		t.Fatalf("cmsync: %v\n%s\nwant\n%s\nstderr:\n%s", err, out, want, stderr.String())
	}
	tb.idle(t)
}

// TestCLibCMATose runs Debian's ucmatose (RC, 2 connections, 10
// messages each way) with and without -m, which moves every ID to a new
// event channel (rdma_migrate_id) before the disconnect, and udaddy
// (UD through SIDR), server on rnicA, client from rnicB: each side's
// output (stdout and stderr) is the program's for a clean run, ending in
// "return status 0", with nothing from the library (a refused request
// would say so on stderr).
func TestCLibCMATose(t *testing.T) {
	tb := newToolBench(t)
	lib := clibDir(t)
	for _, c := range []struct {
		tool     string
		args     []string
		srv, cli string
	}{
		{"ucmatose", []string{"-c", "2", "-C", "10"},
			"cmatose: starting server\ninitiating data transfers\ncompleting sends\nreceiving data transfers\ndata transfers complete\n" +
				"cmatose: disconnecting\ndisconnected\ntest complete\nreturn status 0\n",
			"cmatose: starting client\ncmatose: connecting\nreceiving data transfers\nsending replies\ndata transfers complete\n" +
				"test complete\nreturn status 0\n"},
		{"ucmatose", []string{"-c", "2", "-C", "10", "-m"},
			"cmatose: starting server\ninitiating data transfers\ncompleting sends\nreceiving data transfers\ndata transfers complete\n" +
				"migrating to new event channel\ncmatose: disconnecting\ndisconnected\ntest complete\nreturn status 0\n",
			"cmatose: starting client\ncmatose: connecting\nreceiving data transfers\nsending replies\ndata transfers complete\n" +
				"migrating to new event channel\ntest complete\nreturn status 0\n"},
		{"udaddy", []string{"-c", "2", "-C", "10"},
			"udaddy: starting server\nreceiving data transfers\nsending replies\ndata transfers complete\ntest complete\nreturn status 0\n",
			"udaddy: starting client\nudaddy: connecting\ninitiating data transfers\nreceiving data transfers\ndata transfers complete\n" +
				"test complete\nreturn status 0\n"},
	} {
		bin := debtest.Ensure(t, c.tool, "rdmacm-utils")
		// udaddy has no port option (its -p is the port space): 7174.
		var port []string
		if c.tool == "ucmatose" {
			port = []string{"-p", freePort(t)}
		}
		sout, cout := tb.cmPair(t, lib, bin, append(append([]string{"-b", tb.a.addr.String()}, port...), c.args...),
			bin, append(append([]string{"-s", tb.a.addr.String(), "-b", tb.b.addr.String()}, port...), c.args...)...)
		if sout != c.srv || cout != c.cli {
			t.Errorf("%s %v\nserver printed:\n%s\nwant:\n%s\nclient printed:\n%s\nwant:\n%s", c.tool, c.args, sout, c.srv, cout, c.cli)
		}
	}
}

// TestCLibRDMACMXRC runs Debian's rdma_xserver -c x on one rnicd and
// rdma_xclient -c x on another (XRC over rdma_cm, RDMA_PS_IB): the
// server's synchronous listener gets the request with an XRC target QP
// (rdma_get_request), makes an XRC SRQ in the library's XRC domain
// (rdma_create_srq) and sends its number in the REP's private data; the
// client's XRC initiator QP sends 16 bytes naming that SRQ, which
// complete at the server (rdma_get_recv_comp). Both print their start and
// end 0; the server's rnicd counts one REQ received, one REP sent, one
// RTU received and no REJ, the client's the other halves, and the
// server's rnicd one SEND received (its QP1 takes the CM's five MADs as
// receives too), none refused by an XRC target.
func TestCLibRDMACMXRC(t *testing.T) {
	lib := clibDir(t)
	srvBin, cliBin := debtest.Ensure(t, "rdma_xserver", "rdmacm-utils"), debtest.Ensure(t, "rdma_xclient", "rdmacm-utils")
	p := startApart(t, "xc", nil)
	before := [2]map[string]uint64{must[map[string]uint64](t)(p.ca.Counters()), must[map[string]uint64](t)(p.cb.Counters())}
	port := freePort(t)
	listening := func() {
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			res := exec.Command(filepath.Join(binDir, "rnic"), "res", "-d", p.nameA, "show", "cm_id")
			res.Env = append(os.Environ(), "RNICD_DIR="+p.dirA)
			if out, _ := res.CombinedOutput(); strings.Contains(string(out), " state LISTEN ") {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("no rdma_cm listener on %s", p.nameA)
			}
		}
	}
	sout, cout := runCMPair(t, append(os.Environ(), "LD_LIBRARY_PATH="+lib, "RNICD_DIR="+p.dirA),
		append(os.Environ(), "LD_LIBRARY_PATH="+lib, "RNICD_DIR="+p.dirB), listening,
		srvBin, []string{"-c", "x", "-p", port}, cliBin, "-c", "x", "-s", p.a.addr.String(), "-p", port)
	for _, r := range []struct{ bin, name, out string }{{srvBin, "rdma_xserver", sout}, {cliBin, "rdma_xclient", cout}} {
		if want := r.bin + ": start\n" + r.bin + ": end 0\n"; r.out != want && r.out != strings.ReplaceAll(want, r.bin, r.name) {
			t.Errorf("%s -c x printed\n%s\nwant\n%s", r.name, r.out, want)
		}
	}
	after := [2]map[string]uint64{must[map[string]uint64](t)(p.ca.Counters()), must[map[string]uint64](t)(p.cb.Counters())}
	for i, want := range []map[string]uint64{
		{"cm_rx_msgs_req": 1, "cm_tx_msgs_rep": 1, "cm_rx_msgs_rtu": 1, "cm_tx_msgs_rej": 0, "cm_rx_msgs_rej": 0,
			"cm_tx_msgs_req": 0, "drop_bad_xrc_srq": 0},
		{"cm_tx_msgs_req": 1, "cm_rx_msgs_rep": 1, "cm_tx_msgs_rtu": 1, "cm_tx_msgs_rej": 0, "cm_rx_msgs_rej": 0,
			"cm_rx_msgs_req": 0, "rdma_sends": 1},
	} {
		for k, w := range want {
			if got := after[i][k] - before[i][k]; got != w {
				t.Errorf("%s counts %s %d, want %d", []string{"the server's rnicd", "the client's rnicd"}[i], k, got, w)
			}
		}
	}
	// rdma_recvs counts QP1's receives too: what the server's rnicd
	// received beside the CM's MADs is the one SEND.
	recvs := after[0]["rdma_recvs"] - before[0]["rdma_recvs"]
	for k := range after[0] {
		if strings.HasPrefix(k, "cm_rx_msgs_") {
			recvs -= after[0][k] - before[0][k]
		}
	}
	if recvs != 1 {
		t.Errorf("the server's rnicd received %d messages beside the CM's, want 1", recvs)
	}
}

// TestCLibCMSRQ runs the C test program cmsrq: the server's ID for a
// connect request gets a basic SRQ (rdma_create_srq, no PD: the ID's),
// which its QP made next takes as its receive queue; a receive posted
// through the ID goes there and takes the client's message, bytes and
// completion checked; rdma_create_srq_ex without a type and a second
// SRQ are EINVAL; rdma_destroy_qp and rdma_destroy_srq leave the ID
// with no QP, SRQ nor CQ.
func TestCLibCMSRQ(t *testing.T) {
	tb := newToolBench(t)
	lib := clibDir(t)
	cmd := exec.Command(filepath.Join(lib, "cmsrq"), tb.a.addr.String(), tb.b.addr.String(), freePort(t))
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+lib)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	want := "rdma_create_srq: a basic SRQ on the ID's PD; no type or a second one: EINVAL\n" +
		"rdma_create_qp: the QP takes the ID's SRQ\n" +
		"server got \"through the ID's SRQ\" through the SRQ, its completion on the ID's QP\n" +
		"rdma_destroy_qp, rdma_destroy_srq: the ID holds no QP, SRQ or CQ\n" +
		"PASS\n"
	if err != nil || string(out) != want {
		t.Fatalf("cmsrq: %v\n%s\nwant\n%s\nstderr:\n%s", err, out, want, stderr.String())
	}
	tb.idle(t)
}
