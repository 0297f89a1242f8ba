package main

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rnicd/rnicd/internal/looptest"
	"github.com/rnicd/rnicd/verbs"
)

func ibvRunTool(t *testing.T, args ...string) (string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	rc := run(args, &out, &errb)
	if errb.Len() > 0 {
		t.Logf("%v: stderr: %s", args, errb.String())
	}
	return out.String(), rc
}

func TestDevicesLocal(t *testing.T) {
	addr := looptest.Get(t)
	v4 := addr.As4()
	out, rc := ibvRunTool(t, "ibv_devices", "--local", addr.String())
	// The node GUID is 02:00:00:00 and the IPv4 address's four bytes.
	want := "    device          \t   node GUID\n" +
		"    ------          \t----------------\n" +
		fmt.Sprintf("    rnic0           \t02000000%02x%02x%02x%02x\n", v4[0], v4[1], v4[2], v4[3])
	if rc != 0 || out != want {
		t.Fatalf("rc %d, output\n%q\nwant\n%q", rc, out, want)
	}
}

func TestDevinfoLocal(t *testing.T) {
	addr := looptest.Get(t)
	v4 := addr.As4()
	out, rc := ibvRunTool(t, "ibv_devinfo", "--local", addr.String(), "-d", "rnic7", "-v")
	if rc != 0 {
		t.Fatalf("rc %d", rc)
	}
	// Loopback's MTU is 65536: the active MTU is the largest, 4096.
	for _, want := range []string{
		"hca_id:\trnic7\n",
		"\ttransport:\t\t\tInfiniBand (0)\n",
		fmt.Sprintf("\tnode_guid:\t\t\t0200:0000:%02x%02x:%02x%02x\n", v4[0], v4[1], v4[2], v4[3]),
		"\tphys_port_cnt:\t\t\t1\n",
		"\tmax_qp_wr:\t\t\t16384\n",
		"\tatomic_cap:\t\t\tATOMIC_HCA (1)\n",
		"\t\tport:\t1\n",
		"\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n",
		"\t\t\tmax_mtu:\t\t4096 (5)\n",
		"\t\t\tactive_mtu:\t\t4096 (5)\n",
		"\t\t\tlink_layer:\t\tEthernet\n",
		"\t\t\tGID[  0]:\t\t::ffff:" + addr.String() + ", RoCE v2\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
	short, _ := ibvRunTool(t, "ibv_devinfo", "--local", addr.String())
	if strings.Contains(short, "max_qp_wr") || strings.Contains(short, "GID[") || !strings.Contains(short, "active_mtu:\t\t4096 (5)") {
		t.Errorf("without -v:\n%s", short)
	}
	if _, rc := ibvRunTool(t, "ibv_devinfo", "--local", addr.String(), "-i", "2"); rc != 4 {
		t.Errorf("port 2: rc %d, want 4 as ibv_devinfo", rc)
	}
}

// Without a daemon, every tool says how to start one and where it looked.
func TestToolsNeedADevice(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("RNICD_DIR", dir)
	for _, args := range [][]string{
		{"ibv_devices"}, {"ibv_devinfo"}, {"res"}, {"ibv_rc_pingpong"}, {"ib_write_bw"},
		{"ibv_devinfo", "-d", "rnic9"}, {"res", "-d", "rnic9"}, {"ibv_ud_pingpong", "-d", "rnic9"}, {"ib_send_lat", "-d", "rnic9"},
	} {
		var out, errb bytes.Buffer
		rc := run(args, &out, &errb)
		want := "no rnicd running: start one with `rnicd -d rnic0` (no control socket in " + dir
		if len(args) > 1 {
			want = "IB device 'rnic9' wasn't found: no rnicd runs; start one with `rnicd -d rnic9` (no control socket in " + dir + ";"
		}
		if rc != 1 || !strings.Contains(errb.String(), want) {
			t.Errorf("%v: rc %d, stderr %q, want rc 1 and %q", args, rc, errb.String(), want)
		}
	}
	// With a device running, a name that is not one says which are.
	l, err := net.Listen("unixpacket", filepath.Join(dir, "rnicA.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, args := range [][]string{{"ibv_devinfo", "-d", "rnicX"}, {"res", "show", "qp", "-d", "rnicX"}, {"stat", "-d", "rnicX"}} {
		var out, errb bytes.Buffer
		if rc := run(args, &out, &errb); rc != 1 || !strings.Contains(errb.String(), "IB device 'rnicX' wasn't found; the devices are rnicA\n") {
			t.Errorf("%v: rc %d, stderr %q, want rdma-core's words and the devices", args, rc, errb.String())
		}
	}
	local := looptest.Get(t).String()
	for _, bad := range [][]string{
		{"ibv_rc_pingpong", "--local", local, "-o"},
		{"ibv_rc_pingpong", "--local", local, "-t"},
		{"ibv_srq_pingpong", "--local", local, "-q", "600"},
		{"ibv_uc_pingpong", "--local", local, "-m", "1000"},
		{"ibv_ud_pingpong", "--local", local, "-m", "1024"}, // ud_pingpong has no -m
		{"ibv_rc_pingpong", "--local", local, "a", "b"},
	} {
		if _, rc := ibvRunTool(t, bad...); rc != 1 {
			t.Errorf("%v: rc %d, want 1", bad, rc)
		}
	}
}

// res lists a connected QP with its numbers as rdma res show qp does.
func TestResLine(t *testing.T) {
	c, err := verbs.OpenLocal(verbs.LocalConfig{Addr: looptest.Get(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cfg, err := parsePingpong(ppRC, []string{"-g", "0", "198.18.0.2"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := newPingpong(cfg, c)
	p.pageSize = 4096
	if err := p.init(); err != nil {
		t.Fatal(err)
	}
	defer p.close()
	rem := ppDest{QPN: 0x1234, PSN: 0x76cb57, GID: netip.MustParseAddr("::ffff:198.18.0.2").As16()}
	if err := p.connect([]ppDest{{QPN: p.qps[0].QPN, PSN: 0xc3b985}}, []ppDest{rem}); err != nil {
		t.Fatal(err)
	}
	qps, err := c.QPs()
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	printRes(&b, c.Name(), qps, true)
	comm, err := os.ReadFile("/proc/self/comm")
	if err != nil {
		t.Fatal(err)
	}
	// Nothing sent yet; the receive queue holds the WRs the pingpong posted.
	want := fmt.Sprintf("link rnic0/1 lqpn %d rqpn %d type RC state RTS rq-psn %d sq-psn %d path-mig-state MIGRATED pid %d comm %s dest 198.18.0.2 mtu 1024 sq-depth 0 rq-depth %d\n",
		p.qps[0].QPN, 0x1234, 0x76cb57, 0xc3b985, os.Getpid(), strings.TrimSpace(string(comm)), p.cfg.rxDepth)
	if b.String() != want {
		t.Errorf("res printed\n%q\nwant\n%q", b.String(), want)
	}
}

// TestHelpExitsZero checks that asking for help is not an error: `rnic
// -h` and `rnic TOOL -h` print their usage and exit 0, for every tool,
// while a bad flag or no command at all is still a usage error.
func TestHelpExitsZero(t *testing.T) {
	var out, errb bytes.Buffer
	for _, args := range [][]string{{"-h"}, {"--help"}, {"help"}} {
		out.Reset()
		if code := run(args, &out, &errb); code != 0 || !strings.Contains(out.String(), "usage: rnic COMMAND") {
			t.Errorf("rnic %v: exit %d, printed %q", args, code, out.String())
		}
	}
	if code := run(nil, &out, &errb); code != 2 {
		t.Errorf("rnic with no command: exit %d, want 2", code)
	}
	for _, c := range commands() {
		for _, h := range []string{"-h", "--help"} {
			out.Reset()
			errb.Reset()
			if code := run([]string{c.name, h}, &out, &errb); code != 0 || out.Len()+errb.Len() == 0 {
				t.Errorf("rnic %s %s: exit %d, printed %d bytes, want 0 and its usage", c.name, h, code, out.Len()+errb.Len())
			}
		}
		if code := run([]string{c.name, "--no-such-flag"}, &out, &errb); code == 0 {
			t.Errorf("rnic %s --no-such-flag: exit 0", c.name)
		}
	}
}

// TestVersion: `rnic version` (and rdma's -V) print the version the
// README states and the toolchain, one line.
func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"-V"}, {"--version"}, {"ib_write_bw", "-V"}, {"ib_send_lat", "--version"}} {
		var out, errb bytes.Buffer
		want := "rnic 0.9.0 ("
		if len(args) > 1 {
			want = "Version: rnic 0.9.0 (" // perftest's -V
		}
		if code := run(args, &out, &errb); code != 0 || !strings.HasPrefix(out.String(), want) || strings.Count(out.String(), "\n") != 1 {
			t.Errorf("rnic %v: exit %d, printed %q %q", args, code, out.String(), errb.String())
		}
	}
}

// show_gids lists the port's GID table in the script's layout: every
// index with its GID, the IPv4 address of a mapped GID, v2, the interface
// that holds the address (lo holds 127/8), and the count.
func TestShowGIDsLocal(t *testing.T) {
	addr := looptest.Get(t)
	v4 := addr.As4()
	out, rc := ibvRunTool(t, "show_gids", "--local", addr.String())
	// The IPv4-mapped GID, written out from the address's bytes.
	gid := fmt.Sprintf("0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x", v4[0], v4[1], v4[2], v4[3])
	want := "DEV\tPORT\tINDEX\tGID\t\t\t\t\tIPv4 \t\tVER\tDEV\n" +
		"---\t----\t-----\t---\t\t\t\t\t------------ \t---\t---\n" +
		"rnic0\t1\t0\t" + gid + "\t" + addr.String() + " \tv2\tlo\n" +
		"rnic0\t1\t1\t" + gid + "\t" + addr.String() + " \tv2\tlo\n" +
		"n_gids_found=2\n"
	if rc != 0 || out != want {
		t.Fatalf("rc %d, output\n%q\nwant\n%q", rc, out, want)
	}
	if _, rc := ibvRunTool(t, "show_gids", "--local", addr.String(), "rnic0", "extra"); rc != 2 {
		t.Errorf("two arguments: rc %d, want 2", rc)
	}
}
