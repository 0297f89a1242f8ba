package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"

	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/rnic/monitor"
	"github.com/rnicd/rnicd/rnic/trace"
	"github.com/rnicd/rnicd/verbs"
	"github.com/rnicd/rnicd/wire/ibudp"
)

// observeCommands look inside a running rnicd: stat, trace, inject. They
// reach its monitor on the unix socket it serves next to its control
// socket (verbs.MonitorSocketPath), by device name, or on the TCP port
// of rnicd --http when -http or $RNIC_HTTP says.
func observeCommands() []command {
	return []command{
		{name: "stat", short: "counters and QPs of a running rnicd, like rdma statistic", run: runStat},
		{name: "trace", short: "follow a running rnicd's trace as a timeline", run: runTrace},
		{name: "inject", short: "impair a running rnicd's port: drop 2% | dropnth 1 | dup 1% | reorder 5% | delay 200us | corrupt 1% | link 2gbit [queue 256KB] [ecn 5KB 200KB 1%] [mark dequeue] | off", run: runInject},
	}
}

// observeOpts are the flags every observe tool takes.
type observeOpts struct {
	http string
	dev  string
}

func observeFlags(name string, stderr io.Writer) (*flag.FlagSet, *observeOpts) {
	fs := flag.NewFlagSet("rnic "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := &observeOpts{}
	fs.StringVar(&o.http, "http", os.Getenv("RNIC_HTTP"), "a monitor's TCP port (rnicd --http ADDR) instead of the device's socket; or $RNIC_HTTP")
	fs.StringVar(&o.dev, "d", "", "device name (default: the only rnicd running; with -http, every device it serves)")
	return fs, o
}

// monitorClient reaches one monitor.
type monitorClient struct {
	base   string // URL the API paths follow
	client *http.Client
	dev    string // the device asked for; "" for every device of a TCP monitor
}

// connect finds the monitor: at -http if given, else on the socket of
// the device -d names, or of the only device running.
func (o *observeOpts) connect() (*monitorClient, error) {
	if o.http != "" {
		base := o.http
		if !strings.Contains(base, "://") {
			base = "http://" + base
		}
		return &monitorClient{base: strings.TrimSuffix(base, "/"), client: http.DefaultClient, dev: o.dev}, nil
	}
	dev := o.dev
	if dev == "" {
		names, err := verbs.Devices()
		if err != nil {
			return nil, err
		}
		switch len(names) {
		case 0:
			return nil, fmt.Errorf("no rnicd runs (no socket in %s); start one, or give -http ADDR", verbs.SocketDir())
		case 1:
			dev = names[0]
		default:
			return nil, fmt.Errorf("rnicd runs for %s: say which with -d", strings.Join(names, ", "))
		}
	}
	path := verbs.MonitorSocketPath(dev)
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("device %s: no rnicd serves it: %w", dev, err)
	}
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}}
	// The host part names nothing: every request goes to path.
	return &monitorClient{base: "http://rnicd", client: &http.Client{Transport: tr}, dev: dev}, nil
}

// do sends req and returns the response if it is 200 OK, else an error
// with what the monitor said.
func (m *monitorClient) do(req *http.Request) (*http.Response, error) {
	resp, err := m.client.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		resp.Body.Close()
		return nil, fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(b)))
	}
	return resp, nil
}

// getJSON fetches path into v.
func (m *monitorClient) getJSON(ctx context.Context, path string, v any) error {
	req, err := http.NewRequestWithContext(ctx, "GET", m.base+path, nil)
	if err != nil {
		return err
	}
	resp, err := m.do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(v)
}

// runStat prints each device's counters on one line, as `rdma statistic
// show` does for a link, then its QPs, as `rdma res show qp` does.
func runStat(args []string, stdout, stderr io.Writer) int {
	fs, o := observeFlags("stat", stderr)
	if err := fs.Parse(args); err != nil {
		return parseExit(err)
	}
	m, err := o.connect()
	if err != nil {
		fmt.Fprintln(stderr, "rnic stat:", err)
		return 1
	}
	var st monitor.State
	if err := m.getJSON(context.Background(), "/api/state", &st); err != nil {
		fmt.Fprintln(stderr, "rnic stat:", err)
		return 1
	}
	found := false
	for _, d := range st.Devices {
		if m.dev != "" && d.Name != m.dev {
			continue
		}
		found = true
		fmt.Fprintf(stdout, "link %s/1", d.Name)
		for k := ib.Counter(0); k < ib.NumCounters; k++ {
			fmt.Fprintf(stdout, " %s %d", k, d.Counters[k.String()])
		}
		fmt.Fprintln(stdout)
		for _, q := range d.QPs {
			fmt.Fprintf(stdout, "qp %s %#x %s %s sq_psn %#06x una_psn %#06x rq_psn %#06x dest %s dest_qpn %#x mtu %d sq %d/%d rq %d",
				d.Name, q.QPN, q.Type, q.State, q.SQPSN, q.UnaPSN, q.RQPSN, orDash(q.Dest), q.DestQPN, q.PathMTU, q.SQUsed, q.SQCap, q.RQUsed)
			if q.CCRate != 0 {
				paced := ""
				if q.CCPaced {
					paced = " paced"
				}
				fmt.Fprintf(stdout, " cc_rate %dmbit cc_target %dmbit cc_alpha %d%s", q.CCRate/1e6, q.CCTarget/1e6, q.CCAlpha, paced)
			}
			fmt.Fprintln(stdout)
		}
		// Congestion control, with mlx5's counter names.
		fmt.Fprintf(stdout, "cc %s %s", d.Name, orDash(d.CC))
		for _, name := range []string{"np_ecn_marked_roce_packets", "np_cnp_sent", "rp_cnp_handled", "rp_cnp_ignored"} {
			fmt.Fprintf(stdout, " %s %d", name, d.Counters[name])
		}
		fmt.Fprintln(stdout)
		// The CM agent's messages, with Linux's per-port CM counter
		// names; a device without an agent has none.
		if names := cmCounterNames(d.Counters); len(names) > 0 {
			fmt.Fprintf(stdout, "cm %s", d.Name)
			for _, name := range names {
				fmt.Fprintf(stdout, " %s %d", name, d.Counters[name])
			}
			fmt.Fprintln(stdout)
		}
	}
	if !found {
		fmt.Fprintf(stderr, "rnic stat: no device %q\n", m.dev)
		return 1
	}
	return 0
}

// cmCounterNames are the cm_ counters of m, sorted.
func cmCounterNames(m map[string]uint64) []string {
	var names []string
	for k := range m {
		if strings.HasPrefix(k, "cm_") {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	return names
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// runTrace follows the daemon's trace and prints one line per event
// until interrupted, or -n events.
func runTrace(args []string, stdout, stderr io.Writer) int {
	fs, o := observeFlags("trace", stderr)
	qp := fs.String("qp", "", "only this QP's events (QPN, decimal or 0x...)")
	count := fs.Int("n", 0, "stop after this many events (0: until interrupted)")
	asJSON := fs.Bool("json", false, "print JSON lines instead of the timeline")
	if err := fs.Parse(args); err != nil {
		return parseExit(err)
	}
	q := url.Values{}
	if *qp != "" {
		n, err := strconv.ParseUint(*qp, 0, 24)
		if err != nil {
			fmt.Fprintf(stderr, "rnic trace: -qp %q: want a QPN\n", *qp)
			return 2
		}
		q.Set("qp", strconv.FormatUint(n, 10))
	}
	m, err := o.connect()
	if err != nil {
		fmt.Fprintln(stderr, "rnic trace:", err)
		return 1
	}
	if m.dev != "" {
		q.Set("nic", m.dev)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	req, err := http.NewRequestWithContext(ctx, "GET", m.base+"/api/trace?"+q.Encode(), nil)
	if err != nil {
		fmt.Fprintln(stderr, "rnic trace:", err)
		return 1
	}
	resp, err := m.do(req)
	if err != nil {
		fmt.Fprintln(stderr, "rnic trace:", err)
		return 1
	}
	defer resp.Body.Close()
	var t0 int64
	seen := 0
	errEnough := errors.New("enough")
	err = trace.ReadJSON(resp.Body, func(e *trace.Event) error {
		if t0 == 0 {
			t0 = e.Time
		}
		if *asJSON {
			b, _ := json.Marshal(e)
			fmt.Fprintf(stdout, "%s\n", b)
		} else {
			fmt.Fprintln(stdout, trace.Format(e, t0))
		}
		if seen++; *count > 0 && seen >= *count {
			return errEnough
		}
		return nil
	})
	if err != nil && !errors.Is(err, errEnough) && ctx.Err() == nil {
		fmt.Fprintln(stderr, "rnic trace:", err)
		return 1
	}
	return 0
}

// showFaults prints the impairments in force on each device o reaches,
// in the words `rnic inject` takes.
func showFaults(o *observeOpts, stdout, stderr io.Writer) int {
	m, err := o.connect()
	var st monitor.State
	if err == nil {
		err = m.getJSON(context.Background(), "/api/state", &st)
	}
	if err != nil {
		fmt.Fprintln(stderr, "rnic inject:", err)
		fmt.Fprintln(stderr, "usage: rnic inject [-d NAME] [--tx|--rx] [--qp N] drop P% | dropnth N | dup P% | reorder P% | corrupt P% | delay D | jitter D | link RATE [queue SIZE] [ecn KMIN KMAX P%|off] [mark enqueue|dequeue] | off")
		return 1
	}
	found := false
	for _, d := range st.Devices {
		if m.dev != "" && d.Name != m.dev {
			continue
		}
		found = true
		if d.FaultCfg == nil {
			fmt.Fprintf(stdout, "%s: no fault injector\n", d.Name)
			continue
		}
		fmt.Fprintf(stdout, "%s tx: %s\n%s rx: %s\n", d.Name, d.FaultCfg["tx"], d.Name, d.FaultCfg["rx"])
	}
	if !found {
		fmt.Fprintf(stderr, "rnic inject: no device %q\n", m.dev)
		return 1
	}
	return 0
}

// runInject sets impairments on a device's port, or with no action
// prints those in force:
//
//	rnic inject -d rnic0 [--tx|--rx] [--qp N] drop 2%
//	rnic inject -d rnic0 --rx link 2gbit queue 256KB ecn 20KB 200KB 1%
func runInject(args []string, stdout, stderr io.Writer) int {
	fs, o := observeFlags("inject", stderr)
	tx := fs.Bool("tx", false, "impair sent packets only")
	rx := fs.Bool("rx", false, "impair received packets only")
	qp := fs.String("qp", "", "impair only packets for this QP (the BTH destination QP)")
	if err := fs.Parse(args); err != nil {
		return parseExit(err)
	}
	if fs.NArg() == 0 {
		// No action: say what is in force, as `tc qdisc show` does.
		return showFaults(o, stdout, stderr)
	}
	req := monitor.InjectRequest{TX: *tx, RX: *rx, Spec: strings.Join(fs.Args(), " ")}
	if *qp != "" {
		n, err := strconv.ParseUint(*qp, 0, 24)
		if err != nil {
			fmt.Fprintf(stderr, "rnic inject: -qp %q: want a QPN\n", *qp)
			return 2
		}
		q := uint32(n)
		req.QPN = &q
	}
	// Check the spec here first, for a clear message before any request.
	if _, err := monitor.ApplySpec(ibudp.Faults{}, req.Spec); err != nil {
		fmt.Fprintln(stderr, "rnic", err)
		return 2
	}
	m, err := o.connect()
	if err == nil && m.dev == "" {
		err = errors.New("-d NAME: which device to impair")
	}
	if err != nil {
		fmt.Fprintln(stderr, "rnic inject:", err)
		return 1
	}
	req.Device = m.dev
	body, _ := json.Marshal(req)
	hreq, err := http.NewRequest("POST", m.base+"/api/inject", bytes.NewReader(body))
	if err != nil {
		fmt.Fprintln(stderr, "rnic inject:", err)
		return 1
	}
	hreq.Header.Set("Content-Type", "application/json")
	resp, err := m.do(hreq)
	if err != nil {
		fmt.Fprintln(stderr, "rnic inject:", err)
		return 1
	}
	defer resp.Body.Close()
	var now map[string]string
	if err := json.NewDecoder(io.LimitReader(resp.Body, 4096)).Decode(&now); err != nil {
		fmt.Fprintln(stderr, "rnic inject:", err)
		return 1
	}
	fmt.Fprintf(stdout, "%s tx: %s\n%s rx: %s\n", m.dev, now["tx"], m.dev, now["rx"])
	return 0
}
