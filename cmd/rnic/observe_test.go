package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/rnicd/rnicd/internal/rnictest"
	"github.com/rnicd/rnicd/monitor"
	"github.com/rnicd/rnicd/rnic/trace"
	"github.com/rnicd/rnicd/verbs"
	"github.com/rnicd/rnicd/wire/fault"
)

// observed is two in-process devices behind a management port.
func observed(t *testing.T) (a, b *rnictest.End, addr string) {
	t.Helper()
	a, b, m := monitored(t)
	srv := httptest.NewServer(m.Handler())
	t.Cleanup(srv.Close)
	return a, b, srv.URL
}

func monitored(t *testing.T) (a, b *rnictest.End, m *monitor.Monitor) {
	t.Helper()
	tr := trace.New(0)
	a, b = rnictest.NewEnds(t, tr)
	m, err := monitor.New(monitor.Config{Devices: []monitor.Device{{Dev: a.Dev, Faulty: a.Faulty}, {Dev: b.Dev, Faulty: b.Faulty}}, Tracer: tr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return a, b, m
}

// listenUnix listens on a unix socket at path until the test ends.
func listenUnix(t *testing.T, path string) net.Listener {
	t.Helper()
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// Without -http, the tools find the monitor by device name on the socket
// next to the control socket, as rnicd serves it, and without -d the only
// device running.
func TestObserveBySocket(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("RNICD_DIR", dir)
	t.Setenv("RNIC_HTTP", "")
	var out, errb bytes.Buffer
	if code := run([]string{"stat"}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "no rnicd running") {
		t.Fatalf("no daemon: exit %d, %q", code, errb.String())
	}
	a, b, m := monitored(t)
	srv := &http.Server{Handler: m.Handler()}
	go srv.Serve(listenUnix(t, verbs.MonitorSocketPath("rnic0")))
	t.Cleanup(func() { srv.Close() })
	listenUnix(t, verbs.SocketPath("rnic0")) // what verbs.Devices lists
	rnictest.Write(t, a, b, 1, 2048)

	for _, args := range [][]string{{"stat"}, {"stat", "-d", "rnic0"}} {
		out.Reset()
		errb.Reset()
		if code := run(args, &out, &errb); code != 0 {
			t.Fatalf("rnic %v: exit %d %s", args, code, errb.String())
		}
		if want := fmt.Sprintf("link rnic0/1 sent_pkts %d ", a.Dev.Observer().Counters()["sent_pkts"]); !strings.HasPrefix(out.String(), want) {
			t.Errorf("rnic %v printed %q, want %q...", args, out.String(), want)
		}
	}
	out.Reset()
	if code := run([]string{"inject", "--tx", "drop", "2%"}, &out, &errb); code != 0 || a.Faulty.TX().Drop != 0.02 {
		t.Fatalf("rnic inject: exit %d %s; TX %+v", code, errb.String(), a.Faulty.TX())
	}
	if out.String() != "rnic0 tx: drop 2% \nrnic0 rx: off\n" {
		t.Errorf("rnic inject printed %q", out.String())
	}

	errb.Reset()
	if code := run([]string{"stat", "-d", "rnic9"}, &out, &errb); code != 1 || errb.String() != "rnic stat: IB device 'rnic9' wasn't found; the devices are rnic0\n" {
		t.Errorf("absent device: exit %d, %q", code, errb.String())
	}
	// Two daemons: stat shows both, as rdma statistic shows every link,
	// with the options anywhere; inject wants one named.
	srv1 := &http.Server{Handler: m.Handler()}
	go srv1.Serve(listenUnix(t, verbs.MonitorSocketPath("rnic1")))
	t.Cleanup(func() { srv1.Close() })
	listenUnix(t, verbs.SocketPath("rnic1"))
	out.Reset()
	errb.Reset()
	if code := run([]string{"stat"}, &out, &errb); code != 0 || !strings.HasPrefix(out.String(), "link rnic0/1 ") || !strings.Contains(out.String(), "\nlink rnic1/1 ") {
		t.Errorf("two daemons, no -d: exit %d, %q %q", code, out.String(), errb.String())
	}
	out.Reset()
	if code := run([]string{"stat", "-j"}, &out, &errb); code != 0 {
		t.Fatalf("stat -j: exit %d, %q", code, errb.String())
	}
	var rows []map[string]any
	if err := json.Unmarshal(out.Bytes(), &rows); err != nil || len(rows) != 2 || rows[0]["ifname"] != "rnic0" || rows[1]["ifname"] != "rnic1" ||
		rows[0]["sent_pkts"] != float64(a.Dev.Observer().Counters()["sent_pkts"]) || rows[0]["port"] != float64(1) {
		t.Errorf("stat -j: %v, %s", err, out.String())
	}
	errb.Reset()
	if code := run([]string{"inject", "drop", "2%"}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "rnicd runs for rnic0, rnic1: say which with -d") {
		t.Errorf("two daemons, inject without -d: exit %d, %q", code, errb.String())
	}
	out.Reset()
	if code := run([]string{"inject", "drop", "3%", "--tx", "-d", "rnic0"}, &out, &errb); code != 0 || a.Faulty.TX().Drop != 0.03 {
		t.Errorf("inject with the options after the spec: exit %d, %q; TX %+v", code, errb.String(), a.Faulty.TX())
	}
}

func TestStat(t *testing.T) {
	a, b, addr := observed(t)
	rnictest.Write(t, a, b, 1, 2048)
	var out, errb bytes.Buffer
	if code := run([]string{"stat", "-http", addr, "-d", "rnic0"}, &out, &errb); code != 0 {
		t.Fatalf("rnic stat: %d %s", code, errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	// The link, QP1 (the GSI every device owns), the RC QP and the
	// congestion control with mlx5's counters.
	if len(lines) != 4 || !strings.HasPrefix(lines[1], "qp rnic0 0x1 UD ") ||
		lines[3] != "cc rnic0 none np_ecn_marked_roce_packets 0 np_cnp_sent 0 rp_cnp_handled 0 rp_cnp_ignored 0" {
		t.Fatalf("rnic stat printed %d lines:\n%s", len(lines), out.String())
	}
	lines = append(lines[:1], lines[2:]...)
	c := a.Dev.Observer().Counters()
	for _, name := range []string{"sent_pkts", "rcvd_pkts", "rdma_sends", "retransmitted_pkts"} {
		want := fmt.Sprintf(" %s %d", name, c[name])
		if !strings.Contains(lines[0]+" ", want+" ") {
			t.Errorf("link line lacks %q: %s", want, lines[0])
		}
	}
	if !strings.HasPrefix(lines[0], "link rnic0/1 sent_pkts 2 ") {
		t.Errorf("link line: %s", lines[0])
	}
	q := a.Dev.Observer().QPInfo()[1]
	want := fmt.Sprintf("qp rnic0 %#x RC RTS sq_psn %#06x una_psn %#06x rq_psn %#06x dest %v", q.QPN, q.SQPSN, q.UnaPSN, q.RQPSN, b.Dev.QueryPort().Addr)
	if !strings.HasPrefix(lines[1], want) {
		t.Errorf("qp line\n got %s\nwant %s...", lines[1], want)
	}
	if code := run([]string{"stat", "-http", addr, "-d", "nope"}, &out, &errb); code != 1 {
		t.Errorf("unknown device: exit %d", code)
	}
}

func TestInjectCommand(t *testing.T) {
	a, _, addr := observed(t)
	var out, errb bytes.Buffer
	if code := run([]string{"inject", "-http", addr, "-d", "rnic0", "--rx", "--qp", "0x11", "reorder", "5%"}, &out, &errb); code != 0 {
		t.Fatalf("rnic inject: %d %s", code, errb.String())
	}
	if rx, tx := a.Faulty.RX(), a.Faulty.TX(); rx.Reorder != 0.05 || !rx.FilterQPN || rx.QPN != 0x11 || tx != (fault.Faults{}) {
		t.Fatalf("after inject: RX %+v TX %+v", rx, tx)
	}
	if !strings.Contains(out.String(), "rnic0 rx: reorder 5% (qp 0x11)") {
		t.Errorf("inject printed %q", out.String())
	}
	// No action: the faults in force, per device and direction.
	for _, args := range [][]string{{"-d", "rnic0"}, {}} {
		out.Reset()
		if code := run(append([]string{"inject", "-http", addr}, args...), &out, &errb); code != 0 {
			t.Fatalf("rnic inject %v: exit %d %s", args, code, errb.String())
		}
		want := "rnic0 tx: off\nrnic0 rx: reorder 5% (qp 0x11)\n"
		if len(args) == 0 { // every device of the monitor
			want += "rnic1 tx: off\nrnic1 rx: off\n"
		}
		if out.String() != want {
			t.Errorf("rnic inject %v printed %q, want %q", args, out.String(), want)
		}
	}
	if code := run([]string{"inject", "-http", addr, "-d", "nosuch"}, &out, &errb); code != 1 {
		t.Errorf("rnic inject -d nosuch: exit %d", code)
	}
	for _, args := range [][]string{{"drop"}, {"drop", "lots"}, {"explode", "1%"}} {
		errb.Reset()
		if code := run(append([]string{"inject", "-http", addr, "-d", "rnic0"}, args...), &out, &errb); code != 2 {
			t.Errorf("rnic inject %v: exit %d", args, code)
		}
	}
	if code := run([]string{"inject", "-http", addr, "-d", "rnic0", "off"}, &out, &errb); code != 0 {
		t.Fatalf("rnic inject off: %d %s", code, errb.String())
	}
	if rx := a.Faulty.RX(); rx.Reorder != 0 || rx.FilterQPN {
		t.Fatalf("after off: RX %+v", rx)
	}
}

func TestTraceCommand(t *testing.T) {
	a, b, addr := observed(t)
	var out, errb bytes.Buffer
	done := make(chan int)
	go func() {
		done <- run([]string{"trace", "-http", addr, "-d", "rnic0", "-qp", fmt.Sprint(a.QP.QPN), "-n", "3"}, &out, &errb)
	}()
	// Writes until the tool has its three events: the tool subscribes
	// at some point after it starts.
	for i := uint64(1); ; i++ {
		rnictest.Write(t, a, b, i, 64)
		select {
		case code := <-done:
			if code != 0 {
				t.Fatalf("rnic trace: %d %s", code, errb.String())
			}
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			if len(lines) != 3 {
				t.Fatalf("rnic trace -n 3 printed %d lines:\n%s", len(lines), out.String())
			}
			for _, l := range lines {
				if !strings.Contains(l, " rnic0 ") || !strings.Contains(l, fmt.Sprintf("qp %#x", a.QP.QPN)) {
					t.Errorf("line %q is not rnic0's QP %#x", l, a.QP.QPN)
				}
			}
			return
		default:
		}
	}
}
