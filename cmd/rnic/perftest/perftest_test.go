package perftest

import (
	"bytes"
	"strings"
	"testing"

	"github.com/rnicd/rnicd/verbs"
)

// A QP message from the write_bw capture decodes to its fields and
// encodes back to the same 108 bytes.
func TestDestRoundTrip(t *testing.T) {
	msg := make([]byte, destLen)
	copy(msg, "0000:0001:000011:2d5cf8:00000244:000055f0ae12f000:00:00:00:00:00:00:00:00:00:00:ff:ff:c6:12:00:03:00000000:")
	d, err := ParseDest(msg)
	if err != nil {
		t.Fatal(err)
	}
	want := Dest{OutReads: 1, QPN: 0x11, PSN: 0x2d5cf8, RKey: 0x244, VAddr: 0x55f0ae12f000,
		GID: verbs.GID{10: 0xff, 11: 0xff, 12: 0xc6, 13: 0x12, 14: 0, 15: 3}}
	if d != want {
		t.Fatalf("decoded %+v, want %+v", d, want)
	}
	if got := d.Marshal(); !bytes.Equal(got, msg) {
		t.Fatalf("encoded %q, want %q", got, msg)
	}
}

func TestParseDestRejects(t *testing.T) {
	for _, s := range []string{
		"",
		"0000:0001:000011",
		"0000:0001:zz0011:2d5cf8:00000244:000055f0ae12f000:00:00:00:00:00:00:00:00:00:00:ff:ff:c6:12:00:03:00000000:",
		"0000:0001:1000011:2d5cf8:00000244:000055f0ae12f000:00:00:00:00:00:00:00:00:00:00:ff:ff:c6:12:00:03:00000000:", // QPN > 24 bits
		"0000:0001:000011:2d5cf8:00000244:000055f0ae12f000:00:00:00:00:00:00:00:00:00:00:ff:ff:c6:12:00:100:00000000:", // GID byte > 255
	} {
		msg := make([]byte, destLen)
		copy(msg, s)
		if _, err := ParseDest(msg); err == nil {
			t.Errorf("ParseDest(%q) accepted", s)
		}
	}
	if _, err := ParseDest(make([]byte, 10)); err == nil {
		t.Error("a short message was accepted")
	}
}

// FuzzParseDest: whatever a peer sends, ParseDest returns an error or a
// Dest that encodes to a message that decodes to the same Dest.
func FuzzParseDest(f *testing.F) {
	f.Add([]byte("0000:0080:000011:a88d2e:00000241:0000557bbecf1000:00:00:00:00:00:00:00:00:00:00:ff:ff:c6:12:00:03:00000000:"))
	f.Add([]byte("::::::::::::::::::::::::"))
	f.Fuzz(func(t *testing.T, b []byte) {
		msg := make([]byte, destLen)
		copy(msg, b)
		d, err := ParseDest(msg)
		if err != nil {
			return
		}
		d2, err := ParseDest(d.Marshal())
		if err != nil || d2 != d {
			t.Fatalf("%+v re-encoded decodes to %+v, %v", d, d2, err)
		}
	})
}

func TestParseFlags(t *testing.T) {
	wb, _ := Find("ib_write_bw")
	p, err := Parse(wb, nil)
	if err != nil {
		t.Fatal(err)
	}
	// perftest 4.5's defaults for ib_write_bw; 64 KiB messages turn CQ
	// moderation off.
	if p.Size != 65536 || p.Iters != 5000 || p.TxDepth != 128 || p.CQMod != 1 || p.Port != 18515 ||
		p.QPTimeout != 14 || p.Conn != verbs.QPTypeRC || p.Device != "" || p.Client() {
		t.Fatalf("defaults %+v", p)
	}
	p, err = Parse(wb, []string{"-s64K", "-n", "8", "--report_gbits", "-aF", "--port=1234", "-x", "1", "host"})
	if err != nil {
		t.Fatal(err)
	}
	if !p.All || p.Size != maxSize || p.Iters != 8 || !p.ReportGbits || p.Port != 1234 || p.GIDIndex != 1 ||
		p.ServerName != "host" || p.TxDepth != 8 || p.CQMod != 8 {
		t.Fatalf("parsed %+v", p)
	}
	for _, args := range [][]string{
		{"--bogus"}, {"-Z"}, {"-n", "4"}, {"-s", "0"}, {"-c", "XRC"}, {"-A", "FETCH_AND_ADD"},
		{"-m", "1000"}, {"-n"}, {"a", "b"}, {"-q", "0"},
	} {
		if _, err := Parse(wb, args); err == nil {
			t.Errorf("Parse(%q) accepted", args)
		}
	}
	// Sizes as perftest reads them (K and M suffixes, hex), and as every
	// size of rnicd and rnic reads them (k, KiB, G, ...).
	for arg, want := range map[string]int{"4K": 4096, "2M": 2 << 20, "1024M": 1 << 30, "0x100": 256, "65536": 65536, "64k": 64 << 10, "1G": 1 << 30} {
		if p, err := Parse(wb, []string{"-s", arg}); err != nil || p.Size != want {
			t.Errorf("-s %s: size %d, %v; want %d", arg, p.Size, err, want)
		}
	}
	for arg, want := range map[string]string{
		"2G":    `message size should be between 1 and 2147483647, not "2G"`,
		"64X":   `message size should be between 1 and 2147483647, not "64X"`,
		"2048M": `message size should be between 1 and 2147483647, not "2048M"`,
	} {
		if _, err := Parse(wb, []string{"-s", arg}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("-s %s: error %v, want one saying %q", arg, err, want)
		}
	}
	at, _ := Find("ib_atomic_bw")
	if _, err := Parse(at, []string{"-s", "16"}); err == nil {
		t.Error("atomic test accepted a size")
	}
	if _, err := Parse(at, []string{"-c", "UC"}); err == nil {
		t.Error("atomic test accepted UC")
	}
	sb, _ := Find("ib_send_bw")
	p, err = Parse(sb, []string{"-c", "UD", "-n", "7"})
	if err != nil {
		t.Fatal(err)
	}
	// rx depth clamps to the iterations, then the odd-depth workaround.
	if p.RxDepth != 8 || !p.NoPeak {
		t.Fatalf("send server %+v", p)
	}
}

// The latency statistics of print_report_lat on known samples: posts
// every 10, 20, ... us; round trips halve them.
func TestLatReport(t *testing.T) {
	var posted []int64
	var t0 int64
	gaps := []int64{40, 10, 30, 20, 50, 1000, 2000} // us; the two largest are the tail left out
	posted = append(posted, 0)
	for _, g := range gaps {
		t0 += g * 1000
		posted = append(posted, t0)
	}
	r, err := latReport(64, posted, 2)
	if err != nil {
		t.Fatal(err)
	}
	// Sorted halves: 5 10 15 20 25 | 500 1000. Five kept: median 15,
	// average 15, max is the first left out (500); 99% and 99.9% are
	// index ceil(5*0.99) = 5, also 500. Stdev over integer deviations
	// 10,5,0,-5,-10: sqrt(250/5).
	if r.Min != 5 || r.Typical != 15 || r.Avg != 15 || r.Max != 500 || r.P99 != 500 || r.P999 != 500 || r.Iters != 8 {
		t.Fatalf("report %+v", r)
	}
	if r.Stdev < 7.07 || r.Stdev > 7.08 {
		t.Fatalf("stdev %v", r.Stdev)
	}
	var b bytes.Buffer
	printLatReport(&b, r)
	want := " 64      8          5.00           500.00       15.00    \t       15.00       \t7.07   \t\t500.00  \t\t500.00 \n"
	if b.String() != want {
		t.Fatalf("line %q\nwant %q", b.String(), want)
	}
	if _, err := latReport(2, posted[:3], 1); err == nil {
		t.Fatal("three samples gave statistics")
	}
}

// Bandwidth figures as print_report_bw computes them: 8 messages of 3000
// bytes, one completion every 4; the average over the whole run and the
// peak over the best stretch.
func TestBWReport(t *testing.T) {
	ns := int64(1000) // 1 us per message, except a slow start
	s := bwSamples{posted: make([]int64, 8), completed: make([]int64, 8)}
	for k := range s.posted {
		s.posted[k] = int64(k) * ns
	}
	s.completed[3] = 10 * ns // first four: 10 us from the first post
	s.completed[7] = 14 * ns // last four: 14 - 4 = 10 us from post 4
	r := bwReport(3000, 8, s, 4, false, false)
	// Average: 8*3000 bytes in 14 us. Peak: the best (completed[j] -
	// posted[i])/(j-i+1) is all eight: 14 us / 8 = 1750 ns a message,
	// better than 4..7 (2500 ns) or 1..3 (3000 ns).
	avg := 8 * 3000 / 14e-6 / (1 << 20)
	peak := 3000 / 1750e-9 / (1 << 20)
	if d := r.BWAvg - avg; d > 1e-9 || d < -1e-9 {
		t.Fatalf("average %v, want %v", r.BWAvg, avg)
	}
	if d := r.BWPeak - peak; d > 1e-9 || d < -1e-9 {
		t.Fatalf("peak %v, want %v", r.BWPeak, peak)
	}
	if r.MsgRate != 8/14e-6/1e6 {
		t.Fatalf("msg rate %v", r.MsgRate)
	}
	var b bytes.Buffer
	printBWReport(&b, BWReport{Size: 3000, Iters: 8, BWPeak: 3.18, BWAvg: 2.34, MsgRate: 0.000817}, false)
	// The line of the write_bw capture's server.
	if want := " 3000       8                3.18               2.34   \t\t   0.000817\n"; b.String() != want {
		t.Fatalf("line %q, want %q", b.String(), want)
	}
}

func TestCHex(t *testing.T) {
	for _, c := range []struct {
		v    uint64
		w    int
		want string
	}{{0, 4, "0000"}, {0x11, 6, "0x0011"}, {0xb6749, 6, "0xb6749"}, {0x2d3, 8, "0x0002d3"}, {0x5622ea7dc000, 16, "0x005622ea7dc000"}} {
		if got := cHex(c.v, c.w); got != c.want {
			t.Errorf("cHex(%#x, %d) = %q, want %q", c.v, c.w, got, c.want)
		}
	}
	if !strings.Contains(Version, ".") || atof(Version) >= 6.28 {
		t.Fatalf("advertised version %q must be below 6.28", Version)
	}
}
