package flowctl

import (
	"strings"
	"testing"
	"time"
)

type fakeClock struct{ t int64 }

func (c *fakeClock) Nanotime() int64 { return c.t }

// newManager returns a Manager with DCQCN (or none) on a 10 Gb/s port,
// default parameters changed by set, on a fake clock.
func newManager(t testing.TB, cc, set string) (*Manager, *fakeClock) {
	t.Helper()
	p := DefaultParams()
	if err := p.SetList(set); err != nil {
		t.Fatal(err)
	}
	alg, err := NewAlgorithm(cc, p, 0)
	if err != nil {
		t.Fatal(err)
	}
	clk := &fakeClock{t: 1e9}
	m, err := New(Config{Algorithm: alg, Params: p, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	return m, clk
}

func counters(m *Manager) map[string]uint64 {
	got := map[string]uint64{}
	m.Counters().Each(func(n string, v uint64) { got[n] = v })
	return got
}

func checkCounters(t *testing.T, m *Manager, want map[string]uint64) {
	t.Helper()
	for n, v := range counters(m) {
		if v != want[n] {
			t.Errorf("%s = %d, want %d", n, v, want[n])
		}
	}
}

// The notification point sends at most one CNP per QP per
// np_min_time_between_cnps, each QP on its own, and counts every marked
// packet.
func TestNotificationPoint(t *testing.T) {
	m, clk := newManager(t, "dcqcn", "np_min_time_between_cnps=50")
	var a, b QP
	start := clk.t
	var sentA, sentB int
	for i := 0; i < 1000; i++ { // a CE-marked packet every 1 us for 1 ms, on each QP
		clk.t = start + int64(i)*us
		if m.CEReceived(&a) {
			sentA++
			if (clk.t-start)%(50*us) != 0 {
				t.Fatalf("CNP at %d us", (clk.t-start)/us)
			}
		}
		if i%2 == 0 && m.CEReceived(&b) {
			sentB++
		}
	}
	if sentA != 20 || sentB != 20 {
		t.Fatalf("CNPs in 1 ms at one per 50 us: QP a %d, QP b %d; want 20 each", sentA, sentB)
	}
	checkCounters(t, m, map[string]uint64{"np_ecn_marked_roce_packets": 1500, "np_cnp_sent": 40})

	// np_min_time_between_cnps 0 (mlx5's default): a CNP for every one.
	m, _ = newManager(t, "dcqcn", "")
	var c QP
	for range 10 {
		if !m.CEReceived(&c) {
			t.Fatal("no CNP with np_min_time_between_cnps 0")
		}
	}
	// -cc none: marked packets are counted, no CNP goes.
	m, _ = newManager(t, "none", "")
	if m.CEReceived(&c) || m.ECT() {
		t.Fatal("CNP or ECT without congestion control")
	}
	checkCounters(t, m, map[string]uint64{"np_ecn_marked_roce_packets": 1})
}

// A CNP makes the QP paced at the reaction point's rate: it never sends
// more than that rate allows (one packet of slack), the rate it reports
// is the reaction point's, and back at the line rate it is unpaced again.
func TestPacedByCNP(t *testing.T) {
	m, clk := newManager(t, "dcqcn", "rp_byte_reset=0") // no byte-counter increases in the 100 us
	var q QP
	if m.Wait(&q) != 0 {
		t.Fatal("an unpaced QP waits")
	}
	m.CNPReceived(&q)
	st := m.State(&q)
	if !st.Paced || st.CurrentRate != cut(10_000_000_000, 1023) || st.TargetRate != 10_000_000_000 || st.Alpha != 1023 {
		t.Fatalf("after a CNP: %+v", st)
	}
	checkCounters(t, m, map[string]uint64{"rp_cnp_handled": 1})
	// Send 1000-byte packets as fast as the pacer allows for 100 us
	// (no timer event falls in it, and the byte counter is off: the rate
	// stays put).
	start := clk.t
	rate := st.CurrentRate
	var sent int
	for clk.t < start+100*us {
		if w := m.Wait(&q); w > 0 {
			clk.t += int64(w)
			continue
		}
		m.Sent(&q, 1000)
		sent++
		if allowed := float64(rate) * float64(clk.t-start+1) / 8e9; float64(sent-1)*1000 > allowed {
			t.Fatalf("%d bytes by %d ns at %d bit/s", sent*1000, clk.t-start, rate)
		}
	}
	// 100 us at 5.0049 Gb/s is 62.56 packets of 1000 bytes.
	if sent != 63 {
		t.Fatalf("%d packets in 100 us at %d bit/s, want 63", sent, rate)
	}
	// A second with nothing to send: of the increase timer's events only
	// the first counts (a period in which the pacer held the QP), one
	// fast recovery; an idle QP's rate does not climb.
	clk.t += int64(time.Second)
	if st := m.State(&q); !st.Paced || st.CurrentRate != (rate+10_000_000_000+1)/2 {
		t.Fatalf("after 1 s idle: %+v, want paced at %d", st, (rate+10_000_000_000+1)/2)
	}
	// Busy again, held by the pacer: each 300 us halves the distance to
	// the target, and the QP is back at the line rate, unpaced, within
	// 33 periods (10 ms).
	end := clk.t + 11*int64(time.Millisecond)
	for clk.t < end && m.State(&q).Paced {
		if w := m.Wait(&q); w > 0 {
			clk.t += int64(w)
			continue
		}
		m.Sent(&q, 1000)
	}
	if m.Wait(&q) != 0 || m.State(&q).Paced {
		t.Fatalf("still paced after 11 ms of sending without a CNP: %+v", m.State(&q))
	}
}

// Without congestion control every CNP is ignored and counted so.
func TestCNPIgnored(t *testing.T) {
	m, _ := newManager(t, "none", "")
	var q QP
	m.CNPReceived(&q)
	m.CNPIgnored()
	if m.Wait(&q) != 0 || m.State(&q).Paced {
		t.Fatal("paced without congestion control")
	}
	checkCounters(t, m, map[string]uint64{"rp_cnp_ignored": 2})
	if m.Name() != "none" {
		t.Fatal(m.Name())
	}
}

// The window of unacknowledged PSNs, across the PSN wrap.
func TestWindow(t *testing.T) {
	m, _ := newManager(t, "none", "")
	if m.Window() != 128 {
		t.Fatal(m.Window())
	}
	for _, c := range []struct {
		psn, una uint32
		open     bool
	}{{127, 0, true}, {128, 0, false}, {0xffffff, 0xffff80, true}, {0x7e, 0xffffff, true}, {0x7f, 0xffffff, false}} {
		if got := m.WindowOpen(&QP{}, c.psn, c.una); got != c.open {
			t.Errorf("PSN %#x with %#x unacknowledged: open %v, want %v", c.psn, c.una, got, c.open)
		}
	}
	if _, err := New(Config{Window: MaxWindow + 1}); err == nil {
		t.Fatal("window beyond half the PSN space")
	}
}

// Every parameter by its mlx5 name, with mlx5's defaults; what is out of
// range or unknown is refused and changes nothing.
func TestParams(t *testing.T) {
	want := "rp_clamp_tgt_rate=0 rp_clamp_tgt_rate_ati=1 rp_time_reset=300 rp_byte_reset=32767 rp_threshold=1 " +
		"rp_ai_rate=5 rp_max_rate=0 rp_hai_rate=50 rp_min_dec_fac=50 rp_min_rate=1 rp_rate_to_set_on_first_cnp=0 " +
		"rp_dce_tcp_g=1019 rp_dce_tcp_rtt=1 rp_rate_reduce_monitor_period=4 rp_initial_alpha_value=1023 rp_gd=11 " +
		"np_min_time_between_cnps=0 np_cnp_dscp=48 np_cnp_prio_mode=1 np_cnp_prio=6"
	p := DefaultParams()
	var got []string
	p.Each(func(n string, v uint32) { got = append(got, n+"="+itoa(v)) })
	if strings.Join(got, " ") != want {
		t.Fatalf("defaults\n%s\nwant\n%s", strings.Join(got, " "), want)
	}
	if err := p.SetList("rp_ai_rate=40, np_min_time_between_cnps=50\nrp_dce_tcp_g = 1020 # the paper's g 1/256 is 1020\n"); err != nil {
		t.Fatal(err)
	}
	if v, _ := p.Get("rp_ai_rate"); v != 40 || p.NPMinTimeBetweenCNPs != 50 || p.RPDCETCPG != 1020 {
		t.Fatalf("%+v", p)
	}
	for _, bad := range []string{"rp_dce_tcp_g=1024", "rp_min_dec_fac=0", "rp_time_reset=0", "np_cnp_dscp=64",
		"no_such=1", "rp_ai_rate", "rp_ai_rate=-1", "rp_ai_rate=x", "rp_ai_rate=99999999999"} {
		q := p
		if err := q.SetList(bad); err == nil || q != p {
			t.Errorf("%q: accepted (%v) or changed the parameters", bad, err)
		}
	}
	if _, err := NewAlgorithm("timely", p, 0); err == nil {
		t.Fatal("an algorithm that is not built")
	}
	if _, err := New(Config{Params: Params{RPTimeReset: 1}}); err == nil {
		t.Fatal("invalid parameters accepted")
	}
}

func itoa(v uint32) string {
	var b [10]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			return string(b[i:])
		}
	}
}

// BenchmarkUnpaced is what the requester pays per packet for a QP that
// has seen no congestion: Wait and Sent.
func BenchmarkUnpaced(b *testing.B) {
	m, _ := newManager(b, "dcqcn", "")
	var q QP
	for b.Loop() {
		if m.Wait(&q) != 0 {
			b.Fatal("paced")
		}
		m.Sent(&q, 1100)
	}
}

// BenchmarkPaced is the same for a QP DCQCN limits, with time passing as
// the pacer asks (the reaction point's timers run on the way) and a CNP
// every 100 packets.
func BenchmarkPaced(b *testing.B) {
	m, clk := newManager(b, "dcqcn", "")
	var q QP
	m.CNPReceived(&q)
	i := 0
	for b.Loop() {
		if w := m.Wait(&q); w > 0 {
			clk.t += int64(w)
		}
		m.Sent(&q, 1100)
		if i++; i%100 == 0 {
			m.CNPReceived(&q)
		}
	}
}

// BenchmarkClock is the runtime clock a paced QP reads once a packet
// (in Wait), on top of BenchmarkPaced.
func BenchmarkClock(b *testing.B) {
	c := monoClock{start: time.Now()}
	var sum int64
	for b.Loop() {
		sum += c.Nanotime()
	}
	if sum == 0 {
		b.Fatal("clock stands still")
	}
}

// SetList takes flags and config files: whatever it accepts is valid.
func FuzzSetList(f *testing.F) {
	f.Add("rp_ai_rate=40, np_min_time_between_cnps=50\n# comment\nrp_dce_tcp_g=1020")
	f.Add("rp_gd=99")
	f.Add("=,==,#=")
	f.Fuzz(func(t *testing.T, s string) {
		p := DefaultParams()
		if err := p.SetList(s); err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("%q accepted, then %v", s, err)
		}
	})
}

// A paced QP woken late catches up on at most PacerBurst of its rate,
// and a QP that has just become paced has no credit at all.
func TestPacerBurst(t *testing.T) {
	m, clk := newManager(t, "dcqcn", "rp_byte_reset=0,rp_time_reset=1000000")
	var q QP
	m.CNPReceived(&q)
	rate := m.State(&q).CurrentRate
	m.Sent(&q, 1000)
	if m.Wait(&q) == 0 {
		t.Fatal("a second packet at once after the first CNP")
	}
	clk.t += 10_000 * us // asleep for 10 ms
	burst := 0
	for m.Wait(&q) == 0 {
		m.Sent(&q, 1000)
		burst++
	}
	// 100 us of 5.0049 Gb/s is 62.56 packets of 1000 bytes, plus the one
	// whose time has come.
	if want := int(float64(rate)*float64(PacerBurst)/8e12) + 1; burst != want {
		t.Fatalf("%d packets at once after 10 ms asleep, want %d", burst, want)
	}
}

// At a low rate the catch-up is PacerBurstBytes, not PacerBurst: a QP
// cut to 12.5 Mb/s (25 Mb/s on its first CNP, halved) that slept 10 ms sends 8 KiB's worth at once (plus
// the packet whose time has come), where 100 us of its rate would be
// less than one packet.
func TestPacerBurstBytes(t *testing.T) {
	m, clk := newManager(t, "dcqcn", "rp_byte_reset=0,rp_time_reset=1000000,rp_rate_to_set_on_first_cnp=25")
	var q QP
	m.CNPReceived(&q)
	// The first cut, alpha 1023/1024: RC - RC*1023>>11.
	if rate, want := m.State(&q).CurrentRate, uint64(25_000_000-25_000_000*1023>>11); rate != want {
		t.Fatalf("rate %d after the first CNP from 25 Mb/s, want %d", rate, want)
	}
	m.Sent(&q, 1000)
	clk.t += 10_000 * us
	burst := 0
	for m.Wait(&q) == 0 {
		m.Sent(&q, 1000)
		burst++
	}
	if want := PacerBurstBytes/1000 + 1; burst != want {
		t.Fatalf("%d packets of 1000 bytes at once after 10 ms asleep at 12.5 Mb/s, want %d", burst, want)
	}
}

// A paced QP asks for an ACK once its packets since the last request
// took PacedAckInterval at its rate; an unpaced one never does here
// (rxe's packet count decides for it).
func TestAckReqDue(t *testing.T) {
	m, _ := newManager(t, "dcqcn", "rp_byte_reset=0,rp_time_reset=1000000,rp_rate_to_set_on_first_cnp=25")
	var q QP
	if m.AckReqDue(&q, 1000, 1024) {
		t.Error("an unpaced QP asked for an ACK after 1000 packets")
	}
	m.CNPReceived(&q) // 12.5 Mb/s: 1 ms is 1562.5 bytes
	if m.AckReqDue(&q, 1, 1024) || !m.AckReqDue(&q, 2, 1024) {
		t.Errorf("at 12.5 Mb/s: due after 1 packet of 1 KiB %v, after 2 %v; want false, true",
			m.AckReqDue(&q, 1, 1024), m.AckReqDue(&q, 2, 1024))
	}
}
