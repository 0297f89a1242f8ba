package interop

// What rstream prints, both sides, and the check of an rstream case.

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// rstreamSize is a byte count as rstream prints it (its size_str): in
// the largest unit of g, m, k (powers of 1024) it reaches, with one
// decimal below ten units, none when that decimal is 0.
func rstreamSize(n int64) string {
	base, unit := int64(1), ""
	switch {
	case n >= 1<<30:
		base, unit = 1<<30, "g"
	case n >= 1<<20:
		base, unit = 1<<20, "m"
	case n >= 1<<10:
		base, unit = 1<<10, "k"
	}
	if tenth := n % base * 10 / base; n/base < 10 && tenth != 0 {
		return fmt.Sprintf("%d.%d%s", n/base, tenth, unit)
	}
	return fmt.Sprintf("%d%s", n/base, unit)
}

// rstreamCount is a count as rstream prints it (cnt_str): in thousands
// (k), millions (m) or billions (b), rounded down.
func rstreamCount(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%db", n/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%dm", n/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%dk", n/1e3)
	}
	return strconv.FormatInt(n, 10)
}

// rstreamCheck checks both sides' output of an rstream case, a custom run
// (-S size, -C transfers, -I iterations): each printed the result row of
// the run, named custom, with the size, the transfers, the iterations
// and the bytes moved both ways as rstream formats them, after its
// header; and the host's library printed nothing ("" if so). With -T v a
// side whose data did not verify printed no row and exited non-zero.
func rstreamCheck(c tcase, rxeRole, hostOut, vmOut string) string {
	size, count, iters := int64(1000), int64(1000), int64(1)
	for i := 0; i+1 < len(c.args); i++ {
		v, err := strconv.ParseInt(c.args[i+1], 10, 64)
		if err != nil {
			continue
		}
		switch c.args[i] {
		case "-S":
			size = v
		case "-C":
			count = v
		case "-I":
			iters = v
		}
	}
	row := regexp.MustCompile(fmt.Sprintf(`(?m)^%-10s%-8s%-8s%-8s%-8s +[0-9.]+s +[0-9.]+ +[0-9.]+$`, "custom",
		rstreamSize(size), rstreamCount(count), rstreamCount(iters), rstreamSize(iters*count*size*2)))
	header := regexp.MustCompile(`(?m)^name +bytes +xfers +iters +total +time +Gb/sec +usec/xfer$`)
	hostSide, vmSide := "rnic's server", "rxe's client"
	if rxeRole == "server" {
		hostSide, vmSide = "rnic's client", "rxe's server"
	}
	for _, s := range []struct{ side, out string }{{hostSide, hostOut}, {vmSide, vmOut}} {
		if !header.MatchString(s.out) || !row.MatchString(s.out) {
			return fmt.Sprintf("%s printed no header and row %q", s.side, row.String())
		}
	}
	if strings.Contains(hostOut, "librdmacm-rnicd") || strings.Contains(hostOut, "libibverbs-rnicd") {
		return "rnic's side: the C library printed to a run that works"
	}
	return ""
}

// The check against what rstream printed between two rnicd (-T b -T v
// -S 100000 -C 50), and what it finds wrong.
func TestRstreamCheck(t *testing.T) {
	const out = "name      bytes   xfers   iters   total       time     Gb/sec    usec/xfer\n" +
		"custom    97k     50      1       9.5m        0.06s      1.35     594.96\n"
	c := tcase{tool: "rstream", args: []string{"-T", "b", "-T", "v", "-S", "100000", "-C", "50"}, clib: true}
	for _, tc := range []struct {
		name, role, host, vm, want string
	}{
		{"rxe client", "client", out, out, ""},
		{"rxe server", "server", out, out, ""},
		{"no row", "server", out, "name      bytes   xfers   iters   total       time     Gb/sec    usec/xfer\ndata verification failed byte 7\n",
			`rxe's server printed no header and row "(?m)^custom    97k     50      1       9.5m     +[0-9.]+s +[0-9.]+ +[0-9.]+$"`},
		{"fewer transfers", "client", strings.Replace(out, " 50 ", " 40 ", 1), out,
			`rnic's server printed no header and row "(?m)^custom    97k     50      1       9.5m     +[0-9.]+s +[0-9.]+ +[0-9.]+$"`},
		{"library said something", "client", "librdmacm-rnicd: rsetsockopt SO_KEEPALIVE: ...\n" + out, out,
			"rnic's side: the C library printed to a run that works"},
	} {
		if got := rstreamCheck(c, tc.role, tc.host, tc.vm); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	for n, want := range map[int64]string{64: "64", 1000: "1000", 1024: "1k", 1536: "1.5k", 100000: "97k", 10000000: "9.5m", 1 << 20: "1m", 209715200: "200m"} {
		if got := rstreamSize(n); got != want {
			t.Errorf("rstreamSize(%d) = %q, want %q", n, got, want)
		}
	}
}
