package main

import (
	"bytes"
	"testing"

	"github.com/rnicd/rnicd/wire/fault"
)

// The command puts a bottleneck in front of a device's receive
// side, `rnic inject` with no action shows it, and `link off` takes it
// away.
func TestInjectLink(t *testing.T) {
	a, _, addr := observed(t)
	var out, errb bytes.Buffer
	args := []string{"inject", "-http", addr, "-d", "rnic0", "--rx", "link", "2gbit", "queue", "256KB", "ecn", "20KB", "200KB", "1%"}
	if code := run(args, &out, &errb); code != 0 {
		t.Fatalf("rnic %v: exit %d %s", args, code, errb.String())
	}
	want := fault.Link{Rate: 2e9, Queue: 256 << 10, KMin: 20 << 10, KMax: 200 << 10, PMax: 0.01}
	if got := a.Faulty.RX().Link; got != want || a.Faulty.TX().Link.Rate != 0 {
		t.Fatalf("RX link %+v, TX %+v; want RX %+v", got, a.Faulty.TX().Link, want)
	}
	const shown = "rnic0 tx: off\nrnic0 rx: link 2gbit queue 256KB ecn 20KB 200KB 1% \n"
	if out.String() != shown {
		t.Errorf("rnic inject printed %q, want %q", out.String(), shown)
	}
	out.Reset()
	if code := run([]string{"inject", "-http", addr, "-d", "rnic0"}, &out, &errb); code != 0 || out.String() != shown {
		t.Errorf("rnic inject (show): exit %d, %q", code, out.String())
	}
	out.Reset()
	if code := run([]string{"inject", "-http", addr, "-d", "rnic0", "--rx", "link", "off"}, &out, &errb); code != 0 || a.Faulty.RX().Link.Rate != 0 {
		t.Errorf("link off: exit %d %s, RX %+v", code, errb.String(), a.Faulty.RX())
	}
	errb.Reset()
	if code := run([]string{"inject", "-http", addr, "-d", "rnic0", "ecn", "5KB", "200KB", "1%"}, &out, &errb); code != 2 || errb.Len() == 0 {
		t.Errorf("ecn without a link: exit %d, %q", code, errb.String())
	}
}
