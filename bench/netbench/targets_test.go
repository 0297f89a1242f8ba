package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestTargets checks the verdicts against figures whose ratios are known:
// an anchor-relative bound, a same-build bound, a two-sided one, a figure
// not measured and the idle CPU's absolute bound.
func TestTargets(t *testing.T) {
	sb := &scoreboard{by: map[string]*figure{}}
	put := func(what, col string, v float64) { sb.fig(what, "", true, "").put(col, v) }
	put(ppBusy, anchorCol, 2)
	put(udp108, anchorCol, 0.3)
	put(tcp1, anchorCol, 10)
	put("rnic ib_send_lat -s 2, median", "a", 3.9)        // 1.95x: met
	put("Debian ib_send_lat -s 2 (clib), median", "a", 5) // 2.5x: not
	put("rnic ib_write_bw -s 64, 1 QP, message rate", "a", 0.6)
	put("rnic ib_write_bw -s 64, 16 QPs, message rate", "a", 0.5)        // 0.83x of 1 QP: not
	put("Debian ib_write_bw -s 64 (clib), 1 QP, message rate", "a", 0.7) // 1.17x: not
	put("rnic ib_write_lat -s 2, median", "a", 4)
	put("Debian ib_write_lat -s 2 (clib), median", "a", 3.5) // 0.875x: met
	put("rnic ib_write_bw -s 65536, 1 QP", "a", 10)          // 1.00x: met
	put(idleFig, "a", 0)

	var out bytes.Buffer
	printTargets(&out, cmpConfig{builds: []buildDir{{name: "a"}}}, sb)
	want := map[string]string{
		"rnic ib_send_lat -s 2 median":     "1.95x (<= 2.0x): met",
		"Debian ib_send_lat -s 2 through":  "2.50x (<= 2.0x): NOT met",
		"64 B WRITE message rate, 1 QP":    "2.00x (>= 2x): met",
		"16 QPs at least as much as 1":     "0.83x (>= 1x): NOT met",
		"64 KiB WRITE, 1 QP":               "1.00x (>= 1.0x): met",
		"8 parallel pairs":                 "not measured",
		"Debian ib_write_bw -s 64 through": "1.17x (0.85x-1.15x): NOT met",
		"Debian ib_write_lat -s 2 through": "0.88x (0.85x-1.15x): met",
		"the idle daemon's CPU under 1%":   "0%: met",
	}
	lines := strings.Split(out.String(), "\n")
	for key, cell := range want {
		found := false
		for _, l := range lines {
			if strings.Contains(l, key) {
				found = true
				if !strings.HasSuffix(l, "| "+cell+" |") {
					t.Errorf("%s: row %q, want cell %q", key, l, cell)
				}
			}
		}
		if !found {
			t.Errorf("no row for %s in\n%s", key, out.String())
		}
	}
}

// TestParseBuild checks the build arguments: a folder alone, a folder with
// rnicd flags, and the malformed ones refused. The folders do not exist,
// so each is named by its path (commitOf).
func TestParseBuild(t *testing.T) {
	for _, c := range []struct {
		arg, want string
		flags     int
	}{
		{"this=/nonexistent/this", "this = /nonexistent/this", 0},
		{"ack0=/nonexistent/this -ack-hold 0", "ack0 = /nonexistent/this with rnicd -ack-hold 0", 2},
		{"x= /nonexistent/x   -engines 2 ", "x = /nonexistent/x with rnicd -engines 2", 2},
	} {
		b, err := parseBuild(c.arg)
		if err != nil {
			t.Errorf("parseBuild(%q): %v", c.arg, err)
			continue
		}
		if b.String() != c.want || len(b.flags) != c.flags {
			t.Errorf("parseBuild(%q) = %q with %d flags, want %q with %d", c.arg, b, len(b.flags), c.want, c.flags)
		}
	}
	for _, bad := range []string{"/nonexistent/this", "=/nonexistent/this", "x=", "x=  ", anchorCol + "=/tmp/b"} {
		if b, err := parseBuild(bad); err == nil {
			t.Errorf("parseBuild(%q) = %v, want an error", bad, b)
		}
	}
}
