package tests

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Synchronous rdma_cm IDs on the C library: Debian's rdma_server and
// rdma_client (rdma_create_ep, rdma_get_request, the rdma_verbs.h
// helpers) and the C test program cmsync (rdma_migrate_id, a synchronous
// listener's rdma_get_request) between the two rnicd.

// TestCLibRDMACMServerClient runs Debian's rdma_server on rnicA's
// address and rdma_client towards it: the client sends 16 bytes, the
// server receives them and sends them back, each side waiting for its
// completions (rdma_get_recv_comp, rdma_get_send_comp), and both end
// with 0. Each program prints only its start and its result.
func TestCLibRDMACMServerClient(t *testing.T) {
	tb := newToolBench(t)
	srvRun := debianTool(t, "rdma_server", "rdmacm-utils")
	cliRun := debianTool(t, "rdma_client", "rdmacm-utils")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	port := freePort(t)
	server := srvRun(ctx, "rdma_server", "-s", tb.a.addr.String(), "-p", port)
	sout, serr := &lockedBuf{}, &lockedBuf{}
	server.Stdout, server.Stderr = sout, serr
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	tb.waitListener(t)
	client := cliRun(ctx, "rdma_client", "-s", tb.a.addr.String(), "-p", port)
	var cout, cerr strings.Builder
	client.Stdout, client.Stderr = &cout, &cerr
	clientErr := client.Run()
	if clientErr != nil {
		server.Process.Kill()
	}
	serverErr := server.Wait()
	if clientErr != nil || serverErr != nil {
		t.Fatalf("rdma_server: %v\n%s%s\nrdma_client: %v\n%s%s", serverErr, sout, serr, clientErr, cout.String(), cerr.String())
	}
	if want := "rdma_server: start\nrdma_server: end 0\n"; sout.String() != want {
		t.Errorf("rdma_server printed\n%s\nwant\n%s", sout, want)
	}
	if want := "rdma_client: start\nrdma_client: end 0\n"; cout.String() != want {
		t.Errorf("rdma_client printed\n%s\nwant\n%s", cout.String(), want)
	}
	tb.idle(t)
}

// TestCLibCMSync runs the C test program cmsync: a synchronous listener
// on rnicA gets a synchronous client's connect request from rnicB with
// rdma_get_request (its QP made from rdma_create_ep's attributes), both
// sides' calls return once their events came, a message goes each way,
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
	want := "rdma_get_request: a connect request from " + tb.b.addr.String() + ", its QP made\n" +
		"rdma_accept returned with ESTABLISHED\n" +
		"server got \"ping from client\", client got \"pong from server\"\n" +
		"rdma_migrate_id: DISCONNECTED on the new channel, none on the old\n" +
		"rdma_disconnect returned with DISCONNECTED\n" +
		"PASS\n"
	if err != nil || string(out) != want {
		t.Fatalf("cmsync: %v\n%s\nwant\n%s\nstderr:\n%s", err, out, want, stderr.String())
	}
	tb.idle(t)
}
