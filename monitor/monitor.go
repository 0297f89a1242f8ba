// Package monitor is the NIC's management port: it serves, over HTTP,
// the devices' counters in Prometheus text format (/metrics), a live web
// view of the NIC (/: its blocks with queue depths and packet rates, the
// QP table, a sequence diagram of recent packets between the two ends),
// the JSON those are drawn from (/api/state, /api/packets, and
// /api/boot.js for the page's first frame), the trace as
// a stream of JSON lines (/api/trace) and run-time fault injection
// (/api/inject). It owns nothing of the devices: it reads their counters
// and tables, subscribes to their tracer, and sets their fault injectors.
//
// The sequence diagram needs the trace, which costs while it records: the
// monitor subscribes when a page asks for packets and lets go when no
// page has asked for packetIdle.
//
// Where it lives. The monitor reads the device from outside, as a
// management agent on the host reads an RNIC's counters, so it sits at
// the top of the tree beside hostif and not under rnic/: nothing of the
// NIC may depend on it (ib/imports_test.go holds that), and the device
// works the same without one.
package monitor

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/rnicd/rnicd/rnic"
	"github.com/rnicd/rnicd/rnic/trace"
	"github.com/rnicd/rnicd/wire/fault"
)

//go:embed web
var webFS embed.FS

// Device is one device the monitor shows.
type Device struct {
	Dev *rnic.Device
	// Faulty is the fault injector in front of the device's port, nil
	// if it has none (then /api/inject refuses the device).
	Faulty *fault.Injector
	// Counters, if set, gives the counters of the device's blocks that
	// live outside it (the daemon's CM agent: cm_tx_msgs_req, ...); they
	// join the device's own in /metrics and /api/state.
	Counters func() map[string]uint64
}

// view is what the monitor shows of one device at one moment.
type view struct {
	Device
}

func (d Device) view() view { return view{Device: d} }

// counters are d's device counters and those of its other blocks.
func (d view) counters() map[string]uint64 {
	m := d.Dev.Observer().Counters()
	if d.Counters != nil {
		for k, v := range d.Counters() {
			m[k] = v
		}
	}
	return m
}

// faultStats are what the device's injector did.
func (d view) faultStats() fault.Stats { return d.Faulty.FaultStats() }

// qps is the device's QP table: every QP of every client.
func (d view) qps() []rnic.QPInfo { return d.Dev.Observer().QPInfo() }

// Config says what to show.
type Config struct {
	Devices []Device
	// Tracer is the devices' tracer; nil: no sequence diagram, no
	// /api/trace.
	Tracer *trace.Tracer
	// Authorize, if set, is asked before a request that changes the
	// devices for every client (/api/inject) and refuses it with an
	// error (403); nil allows every request (an in-process monitor).
	Authorize func(r *http.Request, what string) error
	// QPMetrics adds series per QP to /metrics (rnicd_qp_*): off by
	// default, as their number grows with the QPs.
	QPMetrics bool
}

// packetIdle is how long the monitor keeps recording packets for the
// sequence diagram after the last page asked for them.
const packetIdle = 10 * time.Second

// Monitor serves the management port.
type Monitor struct {
	cfg   Config
	reg   *prometheus.Registry
	start time.Time

	mu       sync.Mutex
	diagram  diagram    // the sequence diagram's rows
	peers    []farEnd   // far ends seen, the diagram's lanes after the devices
	rates    []RateStep // ring of the newest keepRates
	rateSeq  uint64     // Seq of the newest RateStep
	follow   context.CancelFunc
	lastAsk  time.Time
	followWG sync.WaitGroup
	closed   bool
}

// New returns a monitor of cfg's devices.
func New(cfg Config) (*Monitor, error) {
	seen := map[string]bool{}
	for _, d := range cfg.Devices {
		if d.Dev == nil {
			return nil, errors.New("monitor: device is nil")
		}
		if seen[d.Dev.Name()] {
			return nil, fmt.Errorf("monitor: two devices named %q", d.Dev.Name())
		}
		seen[d.Dev.Name()] = true
	}
	m := &Monitor{cfg: cfg, reg: prometheus.NewRegistry(), start: time.Now()}
	// The Go runtime's and the process's own series (go_*, process_*),
	// as every Go exporter has them, beside the devices'.
	m.reg.MustRegister(collector{m}, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m, nil
}

// Close stops recording packets.
func (m *Monitor) Close() {
	m.mu.Lock()
	m.closed = true
	if m.follow != nil {
		m.follow()
		m.follow = nil
	}
	m.mu.Unlock()
	m.followWG.Wait()
}

// Handler returns the HTTP handler of the management port.
func (m *Monitor) Handler() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(webFS, "web")
	mux.Handle("GET /", http.FileServerFS(static))
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /api/state", m.serveState)
	mux.HandleFunc("GET /api/packets", m.servePackets)
	mux.HandleFunc("GET /api/boot.js", m.serveBoot)
	mux.HandleFunc("GET /api/trace", m.serveTrace)
	mux.HandleFunc("POST /api/inject", m.serveInject)
	return mux
}

// DeviceState is one device in /api/state.
type DeviceState struct {
	Name     string            `json:"name"`
	Addr     string            `json:"addr"`
	GID      string            `json:"gid"`
	MTU      int               `json:"active_mtu"`
	Counters map[string]uint64 `json:"counters"`
	Port     map[string]uint64 `json:"port"`
	// Fault is the injector's counters per direction, nil without one.
	Fault    *fault.Stats      `json:"fault,omitempty"`
	FaultCfg map[string]string `json:"fault_cfg,omitempty"`
	// Links are the injector's bottleneck links (congestion points) by
	// direction ("tx", "rx"), for the queue chart's scale and its Kmin
	// and Kmax lines; none without a link set.
	Links    map[string]LinkState `json:"links,omitempty"`
	Doorbell int                  `json:"doorbell_depth"`
	// CC is the congestion control, "dcqcn" or "none" (rnicd -cc).
	CC  string    `json:"cc"`
	QPs []QPState `json:"qps"`
}

// LinkState is a congestion point as the queue chart draws it: the
// queue's size, RED's marking thresholds in bytes, and the drain rate in
// bits per second.
type LinkState struct {
	Rate  uint64 `json:"rate_bps"`
	Queue int    `json:"queue_bytes"`
	KMin  int    `json:"kmin_bytes"`
	KMax  int    `json:"kmax_bytes"`
}

// QPState is one row of the QP table in /api/state.
type QPState struct {
	QPN        uint32 `json:"qpn"`
	Type       string `json:"type"`
	State      string `json:"state"`
	SQPSN      uint32 `json:"sq_psn"`
	UnaPSN     uint32 `json:"una_psn"`
	RQPSN      uint32 `json:"rq_psn"`
	DestQPN    uint32 `json:"dest_qpn"`
	Dest       string `json:"dest"`
	PathMTU    int    `json:"path_mtu"`
	SQUsed     int    `json:"sq_used"`
	SQCap      int    `json:"sq_cap"`
	SQInFlight int    `json:"sq_inflight"`
	RQUsed     int    `json:"rq_used"`
	RQCap      int    `json:"rq_cap"`
	// SQPosted counts the send WQEs posted since the QP was created.
	SQPosted uint64 `json:"sq_posted"`
	// Congestion control (rnic/flowctl), once the QP has had a CNP:
	// current and target rate in bits per second, alpha in 1024ths, and
	// whether the pacer limits it now.
	CCRate   uint64 `json:"cc_rate,omitempty"`
	CCTarget uint64 `json:"cc_target,omitempty"`
	CCAlpha  uint32 `json:"cc_alpha,omitempty"`
	CCPaced  bool   `json:"cc_paced,omitempty"`
}

// State is /api/state.
type State struct {
	TimeNS  int64         `json:"time_ns"`
	Devices []DeviceState `json:"devices"`
}

// State reads every device's counters and QP table.
func (m *Monitor) State() State {
	st := State{TimeNS: time.Now().UnixNano()}
	for _, dev := range m.cfg.Devices {
		d := dev.view()
		pa := d.Dev.QueryPort()
		ds := DeviceState{Name: d.Dev.Name(), Addr: pa.Addr.String(), GID: pa.GID.String(), MTU: pa.ActiveMTU,
			Counters: d.counters(), Port: map[string]uint64{}, Doorbell: d.Dev.Observer().DoorbellDepth(), QPs: []QPState{},
			CC: d.Dev.Observer().CongestionControl()}
		d.Dev.Observer().PortStats().Each(func(name string, v uint64) { ds.Port[name] = v })
		if d.Faulty != nil {
			fs := d.faultStats()
			ds.Fault = &fs
			ds.FaultCfg = map[string]string{"tx": describeFaults(d.Faulty.TX()), "rx": describeFaults(d.Faulty.RX())}
			for dir, f := range map[string]fault.Faults{"tx": d.Faulty.TX(), "rx": d.Faulty.RX()} {
				if l := f.Link; l.Rate > 0 {
					if ds.Links == nil {
						ds.Links = map[string]LinkState{}
					}
					ds.Links[dir] = LinkState{Rate: l.Rate, Queue: l.Queue, KMin: l.KMin, KMax: l.KMax}
				}
			}
		}
		for _, q := range d.qps() {
			qs := QPState{QPN: q.QPN, Type: q.Type, State: q.State, SQPSN: q.SQPSN, UnaPSN: q.UnaPSN, RQPSN: q.RQPSN,
				DestQPN: q.DestQPN, PathMTU: q.PathMTU, SQUsed: q.SQUsed, SQCap: q.SQCap, SQInFlight: q.SQInFlight,
				RQUsed: q.RQUsed, RQCap: q.RQCap, SQPosted: q.SQPosted}
			if q.CC.HasCongestion {
				qs.CCRate, qs.CCTarget, qs.CCAlpha, qs.CCPaced = q.CC.CurrentRate, q.CC.TargetRate, q.CC.Alpha, q.CC.Paced
			}
			if q.Dest.IsValid() {
				qs.Dest = q.Dest.String()
			}
			ds.QPs = append(ds.QPs, qs)
		}
		st.Devices = append(st.Devices, ds)
	}
	return st
}

// describeFaults renders impairments as an inject spec would say them.
func describeFaults(f fault.Faults) string {
	s := ""
	add := func(what string, p float64) {
		if p > 0 {
			s += fmt.Sprintf("%s %g%% ", what, p*100)
		}
	}
	add("drop", f.Drop)
	add("dup", f.Duplicate)
	add("reorder", f.Reorder)
	add("corrupt", f.Corrupt)
	if f.DropNth > 0 {
		s += fmt.Sprintf("dropnth %d ", f.DropNth)
	}
	if f.Delay > 0 {
		s += fmt.Sprintf("delay %v ", f.Delay)
	}
	if f.Jitter > 0 {
		s += fmt.Sprintf("jitter %v ", f.Jitter)
	}
	if f.Link.Rate > 0 {
		s += f.Link.String() + " "
	}
	if s == "" {
		return "off"
	}
	if f.FilterQPN {
		s += fmt.Sprintf("(qp %#x)", f.QPN)
	}
	return s
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(v)
}

func (m *Monitor) serveState(w http.ResponseWriter, _ *http.Request) { writeJSON(w, m.State()) }

func (m *Monitor) serveInject(w http.ResponseWriter, r *http.Request) {
	if a := m.cfg.Authorize; a != nil {
		if err := a(r, "inject"); err != nil {
			http.Error(w, "inject: "+err.Error(), http.StatusForbidden)
			return
		}
	}
	var req InjectRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&req); err != nil {
		http.Error(w, "inject: bad request: "+err.Error(), http.StatusBadRequest)
		return
	}
	for _, d := range m.cfg.Devices {
		if d.Dev.Name() != req.Device {
			continue
		}
		if d.Faulty == nil {
			http.Error(w, fmt.Sprintf("inject: device %q has no fault injector", req.Device), http.StatusConflict)
			return
		}
		if err := Inject(d.Faulty, req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		writeJSON(w, map[string]string{"tx": describeFaults(d.Faulty.TX()), "rx": describeFaults(d.Faulty.RX())})
		return
	}
	http.Error(w, fmt.Sprintf("inject: no device %q", req.Device), http.StatusNotFound)
}

// serveTrace streams the trace as JSON lines until the client goes away;
// ?qp=N, ?nic=NAME and ?packets=1 (the packets only) filter it.
func (m *Monitor) serveTrace(w http.ResponseWriter, r *http.Request) {
	if m.cfg.Tracer == nil {
		http.Error(w, "trace: the daemon has no tracer", http.StatusNotFound)
		return
	}
	var f trace.Filter
	if s := r.URL.Query().Get("qp"); s != "" {
		q, err := strconv.ParseUint(s, 0, 24)
		if err != nil {
			http.Error(w, "trace: bad qp "+strconv.Quote(s), http.StatusBadRequest)
			return
		}
		f.QPN = uint32(q)
	}
	f.NIC = r.URL.Query().Get("nic")
	if s := r.URL.Query().Get("packets"); s != "" {
		p, err := strconv.ParseBool(s)
		if err != nil {
			http.Error(w, "trace: bad packets "+strconv.Quote(s), http.StatusBadRequest)
			return
		}
		f.Packets = p
	}
	sub := m.cfg.Tracer.Subscribe(f)
	defer sub.Close()
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	if fl, ok := w.(http.Flusher); ok {
		fl.Flush()
	}
	_ = trace.WriteJSON(r.Context(), sub, flushWriter{w})
}

// flushWriter flushes the response after every write, so that the
// client sees each batch of events as it comes.
type flushWriter struct{ w http.ResponseWriter }

func (f flushWriter) Write(p []byte) (int, error) {
	n, err := f.w.Write(p)
	if fl, ok := f.w.(http.Flusher); ok {
		fl.Flush()
	}
	return n, err
}
