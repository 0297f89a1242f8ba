package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestFlags(t *testing.T) {
	t.Setenv("RNICD_DIR", t.TempDir())
	for _, tc := range []struct {
		args []string
		err  string
	}{
		{[]string{"-addr", "127.0.0.1", "-d", "../etc"}, "plain device name"},
		{[]string{"-addr", "127.0.0.1", "-d", ""}, "plain device name"},
		{[]string{"-addr", "nonsense"}, "-addr"},
		{[]string{"-addr", "127.0.0.1", "-mode", "raw"}, "-mode"},
		{[]string{"-addr", "127.0.0.1", "extra"}, "unexpected arguments"},
		{[]string{"-addr", "127.0.0.1", "-mtu", "1000"}, "MTU 1000"},
		{[]string{"-addr", "127.0.0.1", "-window", "-1"}, "-window -1"},
		{[]string{"-addr", "127.0.0.1", "-ack-hold", "-1us"}, "-ack-hold -1"},
		{[]string{"-addr", "127.0.0.1", "-ack-hold", "2s"}, "-ack-hold 2s"},
		{[]string{"-addr", "127.0.0.1", "-pcap-size", "1000"}, "with -pcap"},
		{[]string{"-addr", "127.0.0.1", "-pcap", "x.pcap", "-pcap-size", "-5"}, "-pcap-size -5"},
	} {
		var out, errw bytes.Buffer
		err := run(tc.args, &out, &errw)
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("run %q: error %v, want one mentioning %q", tc.args, err, tc.err)
		}
	}
}
