package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/rnicd/rnicd/hostif"
)

// The defaults follow the machine's limits as quota.go derives them.
func TestDefaultLimits(t *testing.T) {
	for _, tc := range []struct {
		m            machine
		maps, qp, fd uint64
		conns, pd    uint64
	}{
		// The kernel's default vm.max_map_count, a raised RLIMIT_NOFILE.
		{machine{65530, 20000, 24 << 30}, 57339, 57339, 17500, 4375, 1 << 16},
		// Many mappings: objects stop at the device's 65,536.
		{machine{1 << 20, 1 << 20, 1 << 30}, 917504, 1 << 16, 917504, 229376, 1 << 16},
		// Tiny limits: the reserves take what there is.
		{machine{4000, 200, 1 << 20}, 1, 1, 1, 1, 1 << 16},
	} {
		l := defaultLimits(tc.m)
		d := l.Daemon
		if d[hostif.ResMaps] != tc.maps || d[hostif.ResQPs] != tc.qp || d[hostif.ResCQs] != tc.qp ||
			d[hostif.ResSRQs] != tc.qp || d[hostif.ResMRs] != tc.qp || d[hostif.ResFDs] != tc.fd ||
			d[hostif.ResConns] != tc.conns || d[hostif.ResPDs] != tc.pd || d[hostif.ResMRBytes] != tc.m.memBytes ||
			d[hostif.ResRingBytes] != tc.m.memBytes/4 {
			t.Errorf("%+v: daemon limits %v", tc.m, d)
		}
		if d[hostif.ResMcast] != 64*56 || l.Client[hostif.ResMcast] != 16 || l.User[hostif.ResMcast] != 32 {
			t.Errorf("%+v: multicast attachments: daemon %d, client %d, user %d; want 3584 (64 groups of 56 QPs), and a quarter and a half of the 64 groups",
				tc.m, d[hostif.ResMcast], l.Client[hostif.ResMcast], l.User[hostif.ResMcast])
		}
		for r := range hostif.NumResources {
			if r == hostif.ResMcast {
				continue
			}
			if want := max(1, d[r]/4); l.Client[r] != want {
				t.Errorf("%+v: client %s %d, want %d", tc.m, r.Name(), l.Client[r], want)
			}
			if want := max(1, d[r]/2); l.User[r] != want {
				t.Errorf("%+v: user %s %d, want %d", tc.m, r.Name(), l.User[r], want)
			}
		}
	}
}

func TestLimitFlags(t *testing.T) {
	t.Setenv("RNICD_DIR", t.TempDir())
	var errw bytes.Buffer
	c, err := parseFlags([]string{"-addr", "127.0.0.1", "-client-max-qp", "5", "-max-mr-bytes", "2G", "-max-fds", "0"}, &errw, &errw)
	if err != nil {
		t.Fatal(err)
	}
	def := defaultLimits(readMachine())
	if c.limits.Client[hostif.ResQPs] != 5 || c.limits.Daemon[hostif.ResMRBytes] != 2<<30 || c.limits.Daemon[hostif.ResFDs] != 0 ||
		c.limits.Daemon[hostif.ResQPs] != def.Daemon[hostif.ResQPs] {
		t.Fatalf("limits %+v", c.limits)
	}
	c, err = parseFlags([]string{"-addr", "127.0.0.1", "-user-max-conns", "5", "-group", "0"}, &errw, &errw)
	if err != nil || c.limits.User[hostif.ResConns] != 5 || c.sockGID != 0 || socketMode(c.sockGID) != 0o660 {
		t.Fatalf("-user-max-conns 5 -group 0: user limits %v, gid %d, %v", c.limits.User, c.sockGID, err)
	}
	if _, err := parseFlags([]string{"-addr", "127.0.0.1", "-group", "no-such-group-here"}, &errw, &errw); err == nil || !strings.Contains(err.Error(), "-group") {
		t.Fatalf("-group of no group: %v", err)
	}
	_, err = parseFlags([]string{"-addr", "127.0.0.1", "-max-qp", "-1"}, &errw, &errw)
	if err == nil || !strings.Contains(err.Error(), "want a count") {
		t.Fatalf("-max-qp -1: %v", err)
	}
}
