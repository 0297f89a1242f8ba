package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/monitor"
	"github.com/rnicd/rnicd/rnic/trace"
	"github.com/rnicd/rnicd/verbs"
	"github.com/rnicd/rnicd/wire/fault"
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
	fs.StringVar(&o.dev, "d", "", "device name (default: stat and trace every rnicd running, inject the only one; with -http, every device it serves)")
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
	ms, err := o.connectAll()
	if err != nil {
		return nil, err
	}
	if len(ms) > 1 {
		names := make([]string, len(ms))
		for i, m := range ms {
			names[i] = m.dev
		}
		return nil, fmt.Errorf("rnicd runs for %s: say which with -d", strings.Join(names, ", "))
	}
	return ms[0], nil
}

// connectAll finds the monitors to read: -http's, -d's, or every running
// device's, as `rdma statistic` and `rdma res` show every device.
func (o *observeOpts) connectAll() ([]*monitorClient, error) {
	if o.http != "" {
		base := o.http
		if !strings.Contains(base, "://") {
			base = "http://" + base
		}
		return []*monitorClient{{base: strings.TrimSuffix(base, "/"), client: http.DefaultClient, dev: o.dev}}, nil
	}
	names := []string{o.dev}
	if o.dev == "" {
		var err error
		if names, err = daemonNames(); err != nil {
			return nil, err
		}
	} else if err := deviceExists(o.dev); err != nil {
		return nil, err
	}
	var ms []*monitorClient
	for _, dev := range names {
		path := verbs.MonitorSocketPath(dev)
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("device %s: its rnicd serves no monitor: %w", dev, err)
		}
		tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}}
		// The host part names nothing: every request goes to path.
		ms = append(ms, &monitorClient{base: "http://rnicd", client: &http.Client{Transport: tr}, dev: dev})
	}
	return ms, nil
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
	asJSON := fs.Bool("j", false, "print JSON, as rdma -j statistic show does: one object per device with every counter")
	if pos, err := parseAnywhere(fs, args); err != nil || len(pos) != 0 {
		if err == nil {
			fmt.Fprintf(stderr, "rnic stat: unexpected arguments %q\n", pos)
		}
		return parseExit(err)
	}
	ms, err := o.connectAll()
	if err != nil {
		fmt.Fprintln(stderr, "rnic stat:", err)
		return 1
	}
	var devs []monitor.DeviceState
	for _, m := range ms {
		var st monitor.State
		if err := m.getJSON(context.Background(), "/api/state", &st); err != nil {
			fmt.Fprintf(stderr, "rnic stat: %s: %v\n", m.dev, err)
			return 1
		}
		for _, d := range st.Devices {
			if m.dev == "" || d.Name == m.dev {
				devs = append(devs, d)
			}
		}
	}
	if len(devs) == 0 {
		fmt.Fprintf(stderr, "rnic stat: IB device '%s' wasn't found\n", o.dev)
		return 1
	}
	if *asJSON {
		rows := make([]map[string]any, 0, len(devs))
		for i, d := range devs {
			r := map[string]any{"ifindex": i, "ifname": d.Name, "port": 1}
			for k, v := range d.Counters {
				r[k] = v
			}
			rows = append(rows, r)
		}
		return printJSON(stdout, stderr, rows)
	}
	for _, d := range devs {
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
	packets := fs.Bool("packets", false, "only the packets: sent, received, dropped by the fault injector")
	count := fs.Int("n", 0, "stop after this many events (0: until interrupted)")
	asJSON := fs.Bool("json", false, "print JSON lines instead of the timeline")
	if pos, err := parseAnywhere(fs, args); err != nil || len(pos) != 0 {
		if err == nil {
			fmt.Fprintf(stderr, "rnic trace: unexpected arguments %q\n", pos)
		}
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
	if *packets {
		q.Set("packets", "1")
	}
	ms, err := o.connectAll()
	if err != nil {
		fmt.Fprintln(stderr, "rnic trace:", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	// One stream per device, their events printed as they come, under
	// one lock, with times from the first event of any.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu   sync.Mutex
		t0   int64
		seen int
	)
	errEnough := errors.New("enough")
	errs := make(chan error, len(ms))
	for _, m := range ms {
		go func() {
			errs <- m.follow(ctx, q, func(e *trace.Event) error {
				mu.Lock()
				defer mu.Unlock()
				if *count > 0 && seen >= *count {
					return errEnough
				}
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
					cancel()
					return errEnough
				}
				return nil
			})
		}()
	}
	status := 0
	for range ms {
		if err := <-errs; err != nil && !errors.Is(err, errEnough) && ctx.Err() == nil {
			fmt.Fprintln(stderr, "rnic trace:", err)
			status = 1
			cancel()
		}
	}
	return status
}

// follow reads m's trace stream with query q into f until f, the stream
// or ctx ends it.
func (m *monitorClient) follow(ctx context.Context, q url.Values, f func(*trace.Event) error) error {
	if m.dev != "" {
		q = maps.Clone(q)
		q.Set("nic", m.dev)
	}
	req, err := http.NewRequestWithContext(ctx, "GET", m.base+"/api/trace?"+q.Encode(), nil)
	if err != nil {
		return err
	}
	resp, err := m.do(req)
	if err != nil {
		if m.dev != "" {
			return fmt.Errorf("%s: %w", m.dev, err)
		}
		return err
	}
	defer resp.Body.Close()
	return trace.ReadJSON(resp.Body, f)
}

// showFaults prints the impairments in force on each device o reaches,
// in the words `rnic inject` takes.
func showFaults(o *observeOpts, stdout, stderr io.Writer) int {
	// Showing changes nothing, so without -d it shows every device, as
	// stat does; setting a fault wants the device named.
	ms, err := o.connectAll()
	var devs []monitor.DeviceState
	for i := 0; err == nil && i < len(ms); i++ {
		var st monitor.State
		if err = ms[i].getJSON(context.Background(), "/api/state", &st); err != nil {
			break
		}
		for _, d := range st.Devices {
			if ms[i].dev == "" || d.Name == ms[i].dev {
				devs = append(devs, d)
			}
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "rnic inject:", err)
		fmt.Fprintln(stderr, "usage: rnic inject [-d NAME] [--tx|--rx] [--qp N] drop P% | dropnth N | dup P% | reorder P% | corrupt P% | delay D | jitter D | link RATE [queue SIZE] [ecn KMIN KMAX P%|off] [mark enqueue|dequeue] | off")
		return 1
	}
	if len(devs) == 0 {
		fmt.Fprintf(stderr, "rnic inject: IB device '%s' wasn't found\n", o.dev)
		return 1
	}
	for _, d := range devs {
		if d.FaultCfg == nil {
			fmt.Fprintf(stdout, "%s: no fault injector\n", d.Name)
			continue
		}
		fmt.Fprintf(stdout, "%s tx: %s\n%s rx: %s\n", d.Name, d.FaultCfg["tx"], d.Name, d.FaultCfg["rx"])
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
	spec, err := parseAnywhere(fs, args)
	if err != nil {
		return parseExit(err)
	}
	if len(spec) == 0 {
		// No action: say what is in force, as `tc qdisc show` does.
		return showFaults(o, stdout, stderr)
	}
	req := monitor.InjectRequest{TX: *tx, RX: *rx, Spec: strings.Join(spec, " ")}
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
	if _, err := monitor.ApplySpec(fault.Faults{}, req.Spec); err != nil {
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
