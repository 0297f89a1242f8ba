package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"

	"github.com/rnicd/rnicd/rnic/monitor"
	"github.com/rnicd/rnicd/rnic/qpmgr"
	"github.com/rnicd/rnicd/rnic/trace"
	"github.com/rnicd/rnicd/wire/ibudp"
)

// observeCommands look inside a running rnicd: stat, trace, inject. They
// reach it through its management port (rnicd --http ADDR).
func observeCommands() []command {
	return []command{
		{name: "stat", short: "counters and QPs of a running rnicd, like rdma statistic", run: runStat},
		{name: "trace", short: "follow a running rnicd's trace as a timeline", run: runTrace},
		{name: "inject", short: "impair a running rnicd's port: drop 2% | dup 1% | reorder 5% | delay 200us | corrupt 1% | off", run: runInject},
	}
}

// defaultHTTP is where the tools look for rnicd's management port when
// neither -http nor RNIC_HTTP says.
const defaultHTTP = "127.0.0.1:4792"

// observeFlags are the flags every observe tool takes.
func observeFlags(name string, stderr io.Writer) (*flag.FlagSet, *string, *string) {
	fs := flag.NewFlagSet("rnic "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	def := os.Getenv("RNIC_HTTP")
	if def == "" {
		def = defaultHTTP
	}
	addr := fs.String("http", def, "rnicd's management port (rnicd --http), or $RNIC_HTTP")
	dev := fs.String("d", "", "device name (all devices if empty)")
	return fs, addr, dev
}

func baseURL(addr string) string {
	if strings.Contains(addr, "://") {
		return strings.TrimSuffix(addr, "/")
	}
	return "http://" + addr
}

// getJSON fetches url into v.
func getJSON(ctx context.Context, u string, v any) error {
	req, err := http.NewRequestWithContext(ctx, "GET", u, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return fmt.Errorf("%s: %s: %s", u, resp.Status, strings.TrimSpace(string(b)))
	}
	return json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(v)
}

// runStat prints each device's counters on one line, as `rdma statistic
// show` does for a link, then its QPs, as `rdma res show qp` does.
func runStat(args []string, stdout, stderr io.Writer) int {
	fs, addr, dev := observeFlags("stat", stderr)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var st monitor.State
	if err := getJSON(context.Background(), baseURL(*addr)+"/api/state", &st); err != nil {
		fmt.Fprintln(stderr, "rnic stat:", err)
		return 1
	}
	found := false
	for _, d := range st.Devices {
		if *dev != "" && d.Name != *dev {
			continue
		}
		found = true
		fmt.Fprintf(stdout, "link %s/1", d.Name)
		for k := qpmgr.Counter(0); k < qpmgr.NumCounters; k++ {
			fmt.Fprintf(stdout, " %s %d", k, d.Counters[k.String()])
		}
		fmt.Fprintln(stdout)
		for _, q := range d.QPs {
			fmt.Fprintf(stdout, "qp %s %#x %s %s sq_psn %#06x una_psn %#06x rq_psn %#06x dest %s dest_qpn %#x mtu %d sq %d/%d rq %d\n",
				d.Name, q.QPN, q.Type, q.State, q.SQPSN, q.UnaPSN, q.RQPSN, orDash(q.Dest), q.DestQPN, q.PathMTU, q.SQUsed, q.SQCap, q.RQUsed)
		}
	}
	if !found {
		fmt.Fprintf(stderr, "rnic stat: no device %q\n", *dev)
		return 1
	}
	return 0
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
	fs, addr, dev := observeFlags("trace", stderr)
	qp := fs.String("qp", "", "only this QP's events (QPN, decimal or 0x...)")
	count := fs.Int("n", 0, "stop after this many events (0: until interrupted)")
	asJSON := fs.Bool("json", false, "print JSON lines instead of the timeline")
	if err := fs.Parse(args); err != nil {
		return 2
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
	if *dev != "" {
		q.Set("nic", *dev)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	req, err := http.NewRequestWithContext(ctx, "GET", baseURL(*addr)+"/api/trace?"+q.Encode(), nil)
	if err != nil {
		fmt.Fprintln(stderr, "rnic trace:", err)
		return 1
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintln(stderr, "rnic trace:", err)
		return 1
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		fmt.Fprintf(stderr, "rnic trace: %s: %s\n", resp.Status, strings.TrimSpace(string(b)))
		return 1
	}
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

// runInject sets impairments on a device's port:
//
//	rnic inject -d rnic0 [--tx|--rx] [--qp N] drop 2%
func runInject(args []string, stdout, stderr io.Writer) int {
	fs, addr, dev := observeFlags("inject", stderr)
	tx := fs.Bool("tx", false, "impair sent packets only")
	rx := fs.Bool("rx", false, "impair received packets only")
	qp := fs.String("qp", "", "impair only packets for this QP (the BTH destination QP)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *dev == "" || fs.NArg() == 0 {
		fmt.Fprintln(stderr, "usage: rnic inject -d NAME [--tx|--rx] [--qp N] drop P% | dup P% | reorder P% | corrupt P% | delay D | jitter D | off")
		return 2
	}
	req := monitor.InjectRequest{Device: *dev, TX: *tx, RX: *rx, Spec: strings.Join(fs.Args(), " ")}
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
	body, _ := json.Marshal(req)
	resp, err := http.Post(baseURL(*addr)+"/api/inject", "application/json", bytes.NewReader(body))
	if err != nil {
		fmt.Fprintln(stderr, "rnic inject:", err)
		return 1
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "rnic inject: %s: %s\n", resp.Status, strings.TrimSpace(string(b)))
		return 1
	}
	var now map[string]string
	if json.Unmarshal(b, &now) == nil {
		fmt.Fprintf(stdout, "%s tx: %s\n%s rx: %s\n", *dev, now["tx"], *dev, now["rx"])
	}
	return 0
}
