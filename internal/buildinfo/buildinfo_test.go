package buildinfo

import (
	"strings"
	"testing"
)

func TestString(t *testing.T) {
	for _, c := range []struct {
		in   Info
		want string
	}{
		{Info{Version: "0.9.0", GoVersion: "go1.26.0"}, "0.9.0 (revision unknown) go1.26.0"},
		{Info{Version: "0.9.0", Revision: "5045f1a0c2d1ffff", Time: "2026-11-26T12:53:00Z", GoVersion: "go1.26.0"},
			"0.9.0 (revision 5045f1a0c2d1, 2026-11-26T12:53:00Z) go1.26.0"},
		{Info{Version: "0.9.0", Revision: "abc", Modified: true, GoVersion: "go1.26.0"}, "0.9.0 (revision abc, modified) go1.26.0"},
	} {
		if got := c.in.String(); got != c.want {
			t.Errorf("%+v: got %q, want %q", c.in, got, c.want)
		}
	}
}

func TestRead(t *testing.T) {
	i := Read()
	if i.Version != Version || !strings.HasPrefix(i.GoVersion, "go") {
		t.Fatalf("Read() = %+v", i)
	}
}
