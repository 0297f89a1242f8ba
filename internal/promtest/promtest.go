// Package promtest holds a /metrics text to what Prometheus's own
// promtool accepts, as an operator would check an exporter before
// pointing a server at it.
package promtest

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/rnicd/rnicd/internal/debtest"
)

// Check runs `promtool check metrics` on body, wanting exit status 0 and
// no output at all (promtool prints its lint findings and exits 3 on
// them), and wants every family's HELP text to be its own: a HELP shared
// by two families tells an operator nothing about either.
func Check(t testing.TB, body string) {
	t.Helper()
	// Debian ships promtool only in the prometheus package, whose
	// postinst would start a server: the program alone is unpacked.
	promtool := debtest.EnsureUnpacked(t, "promtool", "prometheus")
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(body)
	out, err := cmd.CombinedOutput()
	if err != nil || len(out) != 0 {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
	byHelp := map[string]string{}
	families := 0
	for _, line := range strings.Split(body, "\n") {
		rest, ok := strings.CutPrefix(line, "# HELP ")
		if !ok {
			continue
		}
		families++
		name, help, _ := strings.Cut(rest, " ")
		if other, dup := byHelp[help]; dup {
			t.Errorf("%s and %s share the HELP %q", name, other, help)
		}
		byHelp[help] = name
	}
	if families == 0 {
		t.Errorf("/metrics has no HELP line:\n%.300s", body)
	}
	t.Logf("promtool check metrics: clean, %d families, each with a HELP of its own", families)
}
