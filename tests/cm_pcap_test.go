package tests

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rnicd/rnicd/internal/debtest"
)

// rnicd --pcap captures QP1's packets, which tshark decodes as CM MADs:
// one rping through the server's daemon, captured there, shows the REQ
// in, the REP out, the RTU in, then the client's DREQ in and the DREP
// out, each a UD SEND from QP1 to QP1 with the GSI Q_Key, none malformed.
// The REQ names rping's port in its service ID and both addresses in its
// cma_hdr (tshark -V's "IP CM" lines); the QPNs and starting PSNs the REQ
// and REP carry are those of the RC packets that follow: the server sends
// to the REQ's QPN from the REQ's PSN, the client to the REP's QPN from
// the REP's.
func TestCMPcapTshark(t *testing.T) {
	tshark := debtest.Ensure(t, "tshark", "tshark")
	dir := t.TempDir()
	capture := filepath.Join(dir, "rnicA.pcap")
	a, err := startDaemon(dir, "rnicA", ownAddr(t), "-pcap", capture)
	if err != nil {
		t.Fatal(err)
	}
	b, err := startDaemon(dir, "rnicB", ownAddr(t))
	if err != nil {
		a.stop()
		t.Fatal(err)
	}
	t.Setenv("RNICD_DIR", dir)
	stop := stopper(t, a, b)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	bin := filepath.Join(binDir, "rnic")
	port := freePort(t)
	srv, _, srvErr := startRpingServer(t, ctx, a, port)
	// A REQ sent before the server listens would be refused and captured
	// too: connect once it listens.
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(runTool(t, bin, "res", "-d", "rnicA", "show", "cm_id"), "state LISTEN"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the rping server never listened: %s", srvErr.String())
		}
	}
	if out, err := rnic(ctx, "rping", "-c", "-a", a.addr.String(), "-I", b.addr.String(), "-p", port, "-C", "1", "-V").CombinedOutput(); err != nil {
		t.Fatalf("client: %v\n%s", err, out)
	}
	if err := srv.Wait(); err != nil {
		t.Fatalf("server: %v\n%s", err, srvErr.String())
	}
	// The DREP may still be on its way when the client ends.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		m := must[map[string]uint64](t)(open(t, "rnicA").Counters())
		if m["cm_tx_msgs_drep"] == 1 || time.Now().After(deadline) {
			break
		}
	}
	stop() // rnicd closes its capture on the way out

	fields := []string{"ip.src", "infiniband.bth.opcode", "infiniband.bth.destqp", "infiniband.bth.psn", "infiniband.deth.q_key",
		"infiniband.deth.srcqp", "infiniband.cm.req.localqpn", "infiniband.cm.req.startpsn", "infiniband.cm.rep.localqpn",
		"infiniband.cm.rep.startpsn", "_ws.malformed", "_ws.col.Info"}
	args := []string{"-r", capture, "-T", "fields", "-E", "separator=|"}
	for _, f := range fields {
		args = append(args, "-e", f)
	}
	out, err := exec.Command(tshark, args...).Output()
	if err != nil {
		t.Fatalf("tshark: %v\n%s", err, out)
	}
	type frame map[string]string
	var mads, rc []frame
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		vals := strings.Split(line, "|")
		if len(vals) != len(fields) {
			t.Fatalf("tshark line %q", line)
		}
		f := frame{}
		for i, k := range fields {
			f[k] = strings.TrimSpace(vals[i])
		}
		if f["_ws.malformed"] != "" {
			t.Errorf("malformed frame: %s", line)
		}
		if f["infiniband.bth.destqp"] == "0x000001" {
			mads = append(mads, f)
		} else {
			rc = append(rc, f)
		}
	}
	want := []struct{ info, from string }{
		{"CM: ConnectRequest", b.addr.String()}, {"CM: ConnectReply", a.addr.String()}, {"CM: ReadyToUse", b.addr.String()},
		{"CM: DisconnectRequest", b.addr.String()}, {"CM: DisconnectReply", a.addr.String()},
	}
	if len(mads) != len(want) {
		t.Fatalf("%d frames to QP1 in the capture, want %d:\n%s", len(mads), len(want), out)
	}
	for i, w := range want {
		f := mads[i]
		if f["_ws.col.Info"] != w.info || f["ip.src"] != w.from || f["infiniband.bth.opcode"] != "100" ||
			f["infiniband.deth.srcqp"] != "0x00000001" || f["infiniband.deth.q_key"] != "0x0000000080010000" {
			t.Errorf("QP1 frame %d: %v, want %s from %s, a UD SEND ONLY from QP1 with the GSI Q_Key", i, f, w.info, w.from)
		}
	}

	// The connection the REQ and REP set up, as its packets show it: the
	// client's first SEND (opcode 4) and the server's first RDMA READ
	// request (12).
	first := func(from, opcode string) frame {
		for _, f := range rc {
			if f["ip.src"] == from && f["infiniband.bth.opcode"] == opcode {
				return f
			}
		}
		t.Fatalf("no RC frame of opcode %s from %s:\n%s", opcode, from, out)
		return nil
	}
	num := func(s string) uint64 {
		n, err := strconv.ParseUint(s, 0, 32)
		if err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		return n
	}
	req, rep := mads[0], mads[1]
	send, read := first(b.addr.String(), "4"), first(a.addr.String(), "12")
	for _, c := range []struct {
		what      string
		got, want string
	}{
		{"REQ's QPN, the server's READ's destination", req["infiniband.cm.req.localqpn"], read["infiniband.bth.destqp"]},
		{"REQ's starting PSN, the server's first PSN", req["infiniband.cm.req.startpsn"], read["infiniband.bth.psn"]},
		{"REP's QPN, the client's SEND's destination", rep["infiniband.cm.rep.localqpn"], send["infiniband.bth.destqp"]},
		{"REP's starting PSN, the client's first PSN", rep["infiniband.cm.rep.startpsn"], send["infiniband.bth.psn"]},
	} {
		if num(c.got) != num(c.want) {
			t.Errorf("%s: %s, the packets say %s", c.what, c.got, c.want)
		}
	}

	// tshark -V: the REQ's service ID and cma_hdr as rdma_cm wrote them.
	verbose, err := exec.Command(tshark, "-r", capture, "-V", "-c", "1").Output()
	if err != nil {
		t.Fatalf("tshark -V: %v", err)
	}
	p, _ := strconv.Atoi(port)
	for _, line := range []string{"CM ConnectRequest", "Protocol: 0x06", fmt.Sprintf("Destination Port: 0x%04x", p),
		"Primary Local Port GID: " + b.addr.String(), "Primary Remote Port GID: " + a.addr.String(),
		"0100 .... = IP CM IP Version: 0x4", "IP CM Source IP: " + b.addr.String(), "IP CM Destination IP: " + a.addr.String()} {
		if !strings.Contains(string(verbose), line) {
			t.Errorf("tshark -V of the REQ lacks %q:\n%s", line, verbose)
		}
	}
}
