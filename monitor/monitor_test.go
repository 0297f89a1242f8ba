package monitor_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rnicd/rnicd/internal/rnictest"
	"github.com/rnicd/rnicd/monitor"
	"github.com/rnicd/rnicd/rnic/trace"
	"github.com/rnicd/rnicd/wire/bth"
	"github.com/rnicd/rnicd/wire/fault"
)

// scrape returns /metrics as metric line -> value.
// matches reports whether every metric of want has its value in got.
func matches(got, want map[string]float64) bool {
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			return false
		}
	}
	return true
}

func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("/metrics: %s, %s", resp.Status, resp.Header.Get("Content-Type"))
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("/metrics line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

// TestMetrics runs one RDMA WRITE of three packets whose second packet is
// lost and scrapes /metrics: the counters of both devices, the port's, the
// fault injector's and the QP table must have the values the exchange
// implies, by name. What the loss costs beyond the one go-back depends on
// timers (the responder NAKs the gap again if the retransmission is late,
// the requester probes if an ACK is: once on a busy host, naks_sent_total
// 2), so those counters are checked against each other and against what
// the protocol guarantees, not against one run's figures.
func TestMetrics(t *testing.T) {
	a, b := rnictest.NewEnds(t, nil)
	m, err := monitor.New(monitor.Config{Devices: []monitor.Device{{Dev: a.Dev, Faulty: a.Faulty}, {Dev: b.Dev, Faulty: b.Faulty}}, QPMetrics: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()

	a.Faulty.SetTX(fault.Faults{FilterQPN: true, QPN: b.QP.QPN, DropNth: 2})
	rnictest.Write(t, a, b, 1, 3*1024)
	want := map[string]float64{
		`rnicd_rdma_sends_total{device="rnic0"}`:                                               1,
		`rnicd_drop_unknown_qp_total{device="rnic1"}`:                                          0,
		`rnicd_icrc_errors_total{device="rnic1"}`:                                              0,
		`rnicd_fault_dropped_total{device="rnic0",dir="tx"}`:                                   1,
		`rnicd_fault_dropped_total{device="rnic0",dir="rx"}`:                                   0,
		`rnicd_doorbell_depth{device="rnic0"}`:                                                 0,
		fmt.Sprintf(`rnicd_qp_sq_used{device="rnic0",qpn="%#x",type="RC"}`, a.QP.QPN):          0,
		fmt.Sprintf(`rnicd_qp_info{device="rnic0",qpn="%#x",state="RTS",type="RC"}`, a.QP.QPN): 1,
		`rnicd_qps{device="rnic0",state="RTS",type="RC"}`:                                      1,
	}
	// What the go-back guarantees, whatever the timers did: the lost
	// packet and the last one went again (more if a repeated NAK or a
	// probe sent the requester back again), every packet sent went
	// through the fault injector and all but the dropped one arrived;
	// the responder saw the gap and NAKed it, and each NAK it sent
	// arrived (only rnic0's packets are dropped) and counted as a
	// sequence error, unless the WRITE was complete by then; every
	// packet of rnic1's is a NAK or an ACK, and at least one ACK.
	rel := func(got map[string]float64) []string {
		g := func(dev, name string) float64 { return got[`rnicd_`+name+`_total{device="`+dev+`"}`] }
		sent, retx := g("rnic0", "sent_pkts"), g("rnic0", "retransmitted_pkts")
		naks, seq := g("rnic1", "naks_sent"), g("rnic0", "rcvd_seq_err")
		var bad []string
		for _, c := range []struct {
			ok   bool
			what string
		}{
			{retx >= 2 && sent == 3+retx, "rnic0 sent 3 packets and retransmitted at least 2: sent_pkts = 3 + retransmitted_pkts"},
			{got[`rnicd_fault_matched_total{device="rnic0",dir="tx"}`] == sent, "rnic0's fault injector saw every packet sent"},
			{g("rnic0", "port_sent_pkts") == sent-1, "rnic0's port sent all but the dropped packet"},
			{g("rnic1", "port_rcvd_pkts") == sent-1 && g("rnic1", "rcvd_pkts") == sent-1, "rnic1 received all but the dropped packet"},
			{g("rnic1", "out_of_seq_request") >= 1 && naks >= 1, "rnic1 saw the gap and NAKed it"},
			{seq >= 1 && seq <= naks, "rnic0 counted a sequence error for each NAK that came before the WRITE completed"},
			{g("rnic0", "completer_retry_err") >= 1, "rnic0 went back"},
			{g("rnic1", "sent_pkts") == g("rnic0", "rcvd_pkts") && g("rnic0", "rcvd_pkts") >= naks+1, "rnic0 received every NAK and ACK rnic1 sent, at least one ACK"},
		} {
			if !c.ok {
				bad = append(bad, c.what)
			}
		}
		return bad
	}
	// The port adds a batch to its counters when the send system call
	// returns, which may be after the peer's ACK completed the WRITE: the
	// counters settle a moment after the completion.
	got := scrape(t, srv.URL)
	for deadline := time.Now().Add(5 * time.Second); (!matches(got, want) || len(rel(got)) > 0) && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		got = scrape(t, srv.URL)
	}
	for k, v := range want {
		g, ok := got[k]
		if !ok {
			t.Errorf("/metrics has no %s", k)
			continue
		}
		if g != v {
			t.Errorf("%s = %v, want %v", k, g, v)
		}
	}
	for _, what := range rel(got) {
		t.Errorf("not so: %s", what)
	}
	if t.Failed() {
		for k, v := range got {
			if strings.HasSuffix(strings.SplitN(k, "{", 2)[0], "_total") && v != 0 {
				t.Logf("%s %v", k, v)
			}
		}
	}
	// Every device counter is exported under its name.
	for name, v := range a.Dev.Observer().Counters() {
		if g := got[`rnicd_`+name+`_total{device="rnic0"}`]; g != float64(v) {
			t.Errorf("counter %s: /metrics %v, device %d", name, g, v)
		}
	}
}

func TestApplySpec(t *testing.T) {
	base := fault.Faults{Drop: 0.5, FilterQPN: true, QPN: 3}
	cases := []struct {
		spec string
		want fault.Faults
		err  bool
	}{
		{spec: "drop 2%", want: fault.Faults{Drop: 0.02, FilterQPN: true, QPN: 3}},
		{spec: "dup 1% reorder 5%", want: fault.Faults{Drop: 0.5, Duplicate: 0.01, Reorder: 0.05, FilterQPN: true, QPN: 3}},
		{spec: "delay 200us jitter 1ms", want: fault.Faults{Drop: 0.5, Delay: 200 * time.Microsecond, Jitter: time.Millisecond, FilterQPN: true, QPN: 3}},
		{spec: "corrupt 100%", want: fault.Faults{Drop: 0.5, Corrupt: 1, FilterQPN: true, QPN: 3}},
		{spec: "off", want: fault.Faults{}},
		{spec: "", err: true},
		{spec: "drop", err: true},
		{spec: "drop 2", err: true},
		{spec: "drop 101%", err: true},
		{spec: "drop -1%", err: true},
		{spec: "drop NaN%", err: true},
		{spec: "delay 2h", err: true},
		{spec: "delay -1ms", err: true},
		{spec: "explode 5%", err: true},
	}
	for _, c := range cases {
		got, err := monitor.ApplySpec(base, c.spec)
		if c.err {
			if err == nil {
				t.Errorf("%q: no error, got %+v", c.spec, got)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%q: %+v, %v; want %+v", c.spec, got, err, c.want)
		}
	}
}

func post(t *testing.T, url string, body any) (int, string) {
	t.Helper()
	j, _ := json.Marshal(body)
	resp, err := http.Post(url+"/api/inject", "application/json", bytes.NewReader(j))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestInject sets impairments through /api/inject and checks the
// injector's settings, per direction and QP.
func TestInject(t *testing.T) {
	a, b := rnictest.NewEnds(t, nil)
	m, err := monitor.New(monitor.Config{Devices: []monitor.Device{{Dev: a.Dev, Faulty: a.Faulty}, {Dev: b.Dev}}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	qpn := uint32(0x12)
	if code, body := post(t, srv.URL, monitor.InjectRequest{Device: "rnic0", TX: true, QPN: &qpn, Spec: "drop 2% dup 1%"}); code != 200 {
		t.Fatalf("inject: %d %s", code, body)
	}
	if got, want := a.Faulty.TX(), (fault.Faults{Drop: 0.02, Duplicate: 0.01, FilterQPN: true, QPN: 0x12}); got.Drop != want.Drop ||
		got.Duplicate != want.Duplicate || !got.FilterQPN || got.QPN != want.QPN {
		t.Fatalf("TX faults %+v, want %+v", got, want)
	}
	if rx := a.Faulty.RX(); rx.Drop != 0 || rx.Duplicate != 0 {
		t.Fatalf("RX faults %+v changed by a TX inject", rx)
	}
	if code, body := post(t, srv.URL, monitor.InjectRequest{Device: "rnic0", Spec: "delay 200us"}); code != 200 {
		t.Fatalf("inject: %d %s", code, body)
	}
	if tx, rx := a.Faulty.TX(), a.Faulty.RX(); tx.Delay != 200*time.Microsecond || rx.Delay != 200*time.Microsecond || tx.Drop != 0.02 {
		t.Fatalf("after delay on both: TX %+v RX %+v", tx, rx)
	}
	if code, body := post(t, srv.URL, monitor.InjectRequest{Device: "rnic0", Spec: "off"}); code != 200 {
		t.Fatalf("inject off: %d %s", code, body)
	}
	if tx, rx := a.Faulty.TX(), a.Faulty.RX(); tx.Drop != 0 || tx.Delay != 0 || tx.FilterQPN || rx.Delay != 0 {
		t.Fatalf("after off: TX %+v RX %+v", tx, rx)
	}
	for _, c := range []struct {
		req  monitor.InjectRequest
		code int
	}{
		{monitor.InjectRequest{Device: "rnic9", Spec: "drop 1%"}, 404},
		{monitor.InjectRequest{Device: "rnic1", Spec: "drop 1%"}, 409},
		{monitor.InjectRequest{Device: "rnic0", Spec: "drop lots"}, 400},
	} {
		if code, body := post(t, srv.URL, c.req); code != c.code {
			t.Errorf("%+v: %d %s, want %d", c.req, code, body, c.code)
		}
	}
	resp, err := http.Post(srv.URL+"/api/inject", "application/json", strings.NewReader("{not json"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Errorf("bad JSON: %d", resp.StatusCode)
	}
}

// traceStream starts two ends, a monitor of both and a follower of
// its /api/trace with the query that query makes for them; the
// subscription exists once it returns.
func traceStream(t *testing.T, query func(a *rnictest.End) string) (a, b *rnictest.End, body io.Reader) {
	t.Helper()
	tr := trace.New(0)
	a, b = rnictest.NewEnds(t, tr)
	m, err := monitor.New(monitor.Config{Devices: []monitor.Device{{Dev: a.Dev}, {Dev: b.Dev}}, Tracer: tr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	srv := httptest.NewServer(m.Handler())
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/api/trace?"+query(a), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != 200 {
		t.Fatalf("/api/trace?%s: %s", query(a), resp.Status)
	}
	return a, b, resp.Body
}

// TestTraceStream follows /api/trace?qp=N while a WRITE runs and reads
// the events back from the JSON lines.
func TestTraceStream(t *testing.T) {
	a, b, body := traceStream(t, func(a *rnictest.End) string { return fmt.Sprintf("qp=%d&nic=rnic0", a.QP.QPN) })
	// The subscription exists once the headers are in: traffic now.
	werr := make(chan error, 1)
	go func() { werr <- rnictest.TryWrite(a, b, 7, 2048) }()
	var steps []trace.Step
	err := trace.ReadJSON(body, func(e *trace.Event) error {
		if e.NIC != "rnic0" || (e.QPN != a.QP.QPN && e.DestQPN != a.QP.QPN) {
			return fmt.Errorf("filter let through %+v", e)
		}
		steps = append(steps, e.Step)
		if e.Step == trace.StepComplete {
			if e.WRID != 7 || e.Len != 2048 {
				return fmt.Errorf("completion %+v", e)
			}
			return io.EOF
		}
		return nil
	})
	if err != io.EOF {
		t.Fatalf("trace stream: %v after %v", err, steps)
	}
	if err := <-werr; err != nil {
		t.Fatal(err)
	}
	for _, s := range []trace.Step{trace.StepPost, trace.StepDoorbell, trace.StepFetch, trace.StepHeaders, trace.StepAckRecv, trace.StepComplete} {
		found := false
		for _, g := range steps {
			found = found || g == s
		}
		if !found {
			t.Errorf("stream lacks %v: %v", s, steps)
		}
	}
}

// TestTracePacketsStream follows /api/trace?packets=1 (rnic trace
// -packets) while a three-packet WRITE runs: the WRITE's packets leave
// in order and its ACK comes back, and no other step is in the stream.
func TestTracePacketsStream(t *testing.T) {
	a, b, body := traceStream(t, func(*rnictest.End) string { return "packets=1&nic=rnic0" })
	werr := make(chan error, 1)
	go func() { werr <- rnictest.TryWrite(a, b, 8, 3000) }()
	var sent []string
	err := trace.ReadJSON(body, func(e *trace.Event) error {
		if !e.IsPacket() || e.NIC != "rnic0" {
			return fmt.Errorf("packets=1&nic=rnic0 let through %+v", e)
		}
		switch {
		case e.Step == trace.StepTransmit && e.DestQPN == b.QP.QPN: // the port knows the BTH's QP only
			sent = append(sent, fmt.Sprintf("%s %#x", e.OpName(), e.PSN))
		case e.Step == trace.StepReceive && e.Opcode == bth.RCAcknowledge && e.DestQPN == a.QP.QPN:
			return io.EOF
		default:
			return fmt.Errorf("unexpected packet %+v", e)
		}
		return nil
	})
	if err != io.EOF {
		t.Fatalf("trace stream: %v after %v", err, sent)
	}
	if err := <-werr; err != nil {
		t.Fatal(err)
	}
	psn := 0x1000 + a.QP.QPN // rnictest's SQ PSN
	want := []string{fmt.Sprintf("RDMA_WRITE_FIRST %#x", psn), fmt.Sprintf("RDMA_WRITE_MIDDLE %#x", psn+1), fmt.Sprintf("RDMA_WRITE_LAST %#x", psn+2)}
	if strings.Join(sent, ", ") != strings.Join(want, ", ") {
		t.Errorf("sent %v before the ACK, want %v", sent, want)
	}
}

// TestTraceBadQuery: a filter /api/trace cannot read is refused, not
// taken for no filter.
func TestTraceBadQuery(t *testing.T) {
	m, err := monitor.New(monitor.Config{Tracer: trace.New(0)})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	for _, q := range []string{"packets=maybe", "qp=x", "qp=0x1000000"} {
		resp, err := http.Get(srv.URL + "/api/trace?" + q)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("/api/trace?%s: %s, want 400", q, resp.Status)
		}
	}
}

// serveOne serves a monitor of e's device alone, as rnicd serves its
// own, until the test ends.
func serveOne(t *testing.T, e *rnictest.End, tr *trace.Tracer) *httptest.Server {
	t.Helper()
	m, err := monitor.New(monitor.Config{Devices: []monitor.Device{{Dev: e.Dev, Faulty: e.Faulty}}, Tracer: tr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	srv := httptest.NewServer(m.Handler())
	t.Cleanup(srv.Close)
	return srv
}

// TestPacketsNameTheirQP: a device with two QPs, each connected to a
// peer that numbers its QPs from 0x11 as rxe does, so that both send to
// a QP 0x11. Each packet's row names the QP it left from and the peer it
// went to, where, told apart by the destination alone, one QP's
// packets were drawn as the other's.
func TestPacketsNameTheirQP(t *testing.T) {
	tr := trace.New(0)
	a, b := rnictest.NewEnds(t, tr)
	c := rnictest.Open(t, tr, "rnic2", "none")
	a2 := a.AnotherQP(t)
	rnictest.Connect(t, a2, c)
	rnictest.Connect(t, c, a2)
	if b.QP.QPN != c.QP.QPN || a.QP.QPN == a2.QP.QPN {
		t.Fatalf("QPNs: a %#x and %#x, peers %#x and %#x; want two of a's to two peers' alike", a.QP.QPN, a2.QP.QPN, b.QP.QPN, c.QP.QPN)
	}
	srv := serveOne(t, a, tr)
	get := func() []monitor.Packet {
		t.Helper()
		resp, err := http.Get(srv.URL + "/api/packets?after=0")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var r struct {
			Packets []monitor.Packet `json:"packets"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
			t.Fatal(err)
		}
		return r.Packets
	}
	get() // starts the trace
	farB, farC := b.Dev.QueryPort().Addr.String(), c.Dev.QueryPort().Addr.String()
	want := map[string]int{
		fmt.Sprintf("%#x to %s %#x", a.QP.QPN, farB, b.QP.QPN):  3,
		fmt.Sprintf("%#x to %s %#x", a2.QP.QPN, farC, c.QP.QPN): 3,
	}
	// Both WRITEs, then until their rows are in: three packets each.
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; ; i++ {
		if i == 0 {
			rnictest.Write(t, a, b, 1, 3000)
			rnictest.Write(t, a2, c, 2, 3000)
		}
		got := map[string]int{}
		for _, p := range get() {
			if p.From == a.Dev.Name() && p.Class == "RDMA_WRITE" {
				got[fmt.Sprintf("%#x to %s %#x", p.FromQPN, p.To, p.ToQPN)] += p.Count
			}
		}
		if fmt.Sprint(got) == fmt.Sprint(want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("WRITE rows from %s: %v, want %v", a.Dev.Name(), got, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestLanesGoWithQPs: a monitor of one device, as rnicd serves it, draws
// the far end its QP is connected to as a lane, with the far QP, and the
// packets between them; once the QP is destroyed the lane and its rows
// go, where they used to stay until the daemon restarted.
func TestLanesGoWithQPs(t *testing.T) {
	tr := trace.New(0)
	a, b := rnictest.NewEnds(t, tr)
	srv := serveOne(t, a, tr)
	type reply struct {
		Lanes []struct {
			Name   string `json:"name"`
			Detail string `json:"detail"`
		} `json:"lanes"`
		Packets []monitor.Packet `json:"packets"`
	}
	get := func() reply {
		t.Helper()
		resp, err := http.Get(srv.URL + "/api/packets?after=0")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var r reply
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	far := b.Dev.QueryPort().Addr.String()
	r := get() // starts the trace
	if len(r.Lanes) != 2 || r.Lanes[1].Name != far || r.Lanes[1].Detail != fmt.Sprintf("qp %#x", b.QP.QPN) {
		t.Fatalf("lanes %+v, want %s and %s with qp %#x", r.Lanes, a.Dev.Name(), far, b.QP.QPN)
	}
	// A WRITE of 3 packets and its ACK: rows between the two lanes (the
	// trace is read in batches: wait for them, a hang guard).
	rnictest.Write(t, a, b, 1, 3*1024)
	for deadline := time.Now().Add(30 * time.Second); ; {
		r = get()
		n := 0
		for _, p := range r.Packets {
			if (p.From == a.Dev.Name() && p.To == far) || (p.From == far && p.To == a.Dev.Name()) {
				n += p.Count
			}
		}
		if n >= 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("rows %+v: want the WRITE's 3 packets and its ACK", r.Packets)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := a.Dev.DestroyQP(a.QP); err != nil {
		t.Fatal(err)
	}
	r = get()
	if len(r.Lanes) != 2 || r.Lanes[1].Name == far || len(r.Packets) != 0 {
		t.Errorf("after the QP went: lanes %+v, %d rows; want no lane %s and no row", r.Lanes, len(r.Packets), far)
	}
}
