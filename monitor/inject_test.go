package monitor_test

import (
	"testing"

	"github.com/rnicd/rnicd/monitor"
	"github.com/rnicd/rnicd/wire/fault"
)

// The bottleneck link's words: a new link takes the DCQCN paper's
// marking and a 256KB queue, each word changes only its part, and what
// String writes reads back the same.
func TestApplySpecLink(t *testing.T) {
	paper := fault.Link{Rate: 2e9, Queue: 256 << 10, KMin: 5 << 10, KMax: 200 << 10, PMax: 0.01}
	withRate := func(l fault.Link, r uint64) fault.Link { l.Rate = r; return l }
	cases := []struct {
		from fault.Link
		spec string
		want fault.Link
	}{
		{spec: "link 2gbit", want: paper},
		{spec: "link 2gbit queue 256KB ecn 20KB 200KB 1%", want: fault.Link{Rate: 2e9, Queue: 256 << 10, KMin: 20 << 10, KMax: 200 << 10, PMax: 0.01}},
		{spec: "queue 1MB link 500mbit ecn off", want: fault.Link{Rate: 500e6, Queue: 1 << 20}},
		{spec: "link 1.5Gbps queue 65536", want: fault.Link{Rate: 1.5e9, Queue: 65536, KMin: 5 << 10, KMax: 200 << 10, PMax: 0.01}},
		{from: paper, spec: "link 100mbit", want: withRate(paper, 100e6)},
		{from: paper, spec: "ecn 10k 10k 100%", want: fault.Link{Rate: 2e9, Queue: 256 << 10, KMin: 10 << 10, KMax: 10 << 10, PMax: 1}},
		{from: paper, spec: "link off", want: fault.Link{}},
		{from: paper, spec: "drop 1%", want: paper},
		{spec: "link 150mbit ecn 5KB 50KB 20% mark dequeue", want: fault.Link{Rate: 150e6, Queue: 256 << 10, KMin: 5 << 10, KMax: 50 << 10, PMax: 0.2, Dequeue: true}},
		{from: fault.Link{Rate: 150e6, Queue: 256 << 10, Dequeue: true}, spec: "mark enqueue", want: fault.Link{Rate: 150e6, Queue: 256 << 10}},
	}
	for _, c := range cases {
		got, err := monitor.ApplySpec(fault.Faults{Link: c.from}, c.spec)
		if err != nil || got.Link != c.want {
			t.Errorf("%q on %+v: %+v, %v; want %+v", c.spec, c.from, got.Link, err, c.want)
			continue
		}
		if c.want.Rate == 0 {
			continue
		}
		back, err := monitor.ApplySpec(fault.Faults{}, got.Link.String())
		if err != nil || back.Link != got.Link {
			t.Errorf("%q reads back as %+v, %v", got.Link.String(), back.Link, err)
		}
	}
	if s := paper.String(); s != "link 2gbit queue 256KB ecn 5KB 200KB 1%" {
		t.Errorf("String: %q", s)
	}
	for _, bad := range []string{"link", "link fast", "link 10bit", "link 2tbit", "queue 256KB", "ecn 5KB 200KB 1%",
		"link 1gbit queue 1KB", "link 1gbit queue 2GB", "link 1gbit ecn 200KB 5KB 1%", "link 1gbit ecn 5KB 200KB",
		"link 1gbit ecn 5KB 200KB 101%", "link 1gbit ecn 0 0 1%", "link 1gbit queue -5KB", "link NaNgbit",
		"mark dequeue", "link 1gbit mark", "link 1gbit mark later"} {
		f := fault.Faults{Drop: 0.5}
		if got, err := monitor.ApplySpec(f, bad); err == nil || got != f {
			t.Errorf("%q: accepted (%+v) or changed the faults", bad, got)
		}
	}
}

// ApplySpec reads what a client sends: never a panic, and what it
// accepts is a spec of its own making again.
func FuzzApplySpec(f *testing.F) {
	for _, s := range []string{"drop 2% dup 1%", "link 2gbit queue 256KB ecn 20KB 200KB 1%", "ecn off", "link 1kbit ecn 1 1 0%", "off", "delay 1ms", "link 1gbit ecn off mark dequeue"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		got, err := monitor.ApplySpec(fault.Faults{}, spec)
		if err != nil || got.Link.Rate == 0 {
			return
		}
		back, err := monitor.ApplySpec(fault.Faults{}, got.Link.String())
		if err != nil || back.Link != got.Link {
			t.Fatalf("%q: link %+v writes as %q, which reads as %+v, %v", spec, got.Link, got.Link.String(), back.Link, err)
		}
	})
}

// dropnth N loses the Nth packet matched from then on, once; with --qp 1
// on TX that is the CM's next MAD (tests/cm_loss_test.go).
func TestApplySpecDropNth(t *testing.T) {
	got, err := monitor.ApplySpec(fault.Faults{Drop: 0.5}, "dropnth 2")
	if err != nil || got.DropNth != 2 || got.Drop != 0.5 {
		t.Fatalf("dropnth 2: %+v, %v", got, err)
	}
	for _, bad := range []string{"dropnth 0", "dropnth -1", "dropnth x", "dropnth 2000000", "dropnth"} {
		if _, err := monitor.ApplySpec(fault.Faults{}, bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
