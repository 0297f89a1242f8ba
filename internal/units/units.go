// Package units reads the sizes and rates typed on rnicd's and rnic's
// command lines, one syntax for all of them: rnicd's -pcap-size and
// limits, perftest's -s, rnic inject's queue and ecn thresholds and link
// rates. Ranges are the caller's to check.
package units

import (
	"fmt"
	"strconv"
	"strings"
)

// maxBytes is the most ParseBytes returns: far past any size rnicd takes,
// and with room to multiply by a suffix without overflow.
const maxBytes = 1 << 62

// ParseBytes reads a size in bytes: a number (decimal, or 0x hex as
// perftest's C reads it) with an optional suffix, binary multiples as
// perftest, tcpdump -C and tc read them: K, KB, KiB (1024), M, MB, MiB,
// G, GB, GiB, or B; upper or lower case.
func ParseBytes(s string) (int64, error) {
	l := strings.ToLower(strings.TrimSpace(s))
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		m      int64
	}{{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"kb", 1 << 10}, {"mb", 1 << 20}, {"gb", 1 << 30},
		{"k", 1 << 10}, {"m", 1 << 20}, {"g", 1 << 30}, {"b", 1}} {
		if num, ok := strings.CutSuffix(l, u.suffix); ok && (u.suffix != "b" || !strings.HasPrefix(l, "0x")) { // 0xab: a hex digit, not bytes
			l, mult = num, u.m
			break
		}
	}
	base := 10
	if h, ok := strings.CutPrefix(l, "0x"); ok {
		l, base = h, 16
	}
	v, err := strconv.ParseInt(l, base, 64)
	if err != nil || v < 0 || v > maxBytes/mult {
		return 0, fmt.Errorf("%q: want bytes, a number with an optional K, M or G suffix (KiB, MiB, GiB), like 256K", s)
	}
	return v * mult, nil
}

// FormatBytes writes n as ParseBytes reads it, with the largest suffix
// that divides it: 100M, 256K, 1000.
func FormatBytes(n int64) string {
	switch {
	case n != 0 && n%(1<<30) == 0:
		return fmt.Sprintf("%dG", n>>30)
	case n != 0 && n%(1<<20) == 0:
		return fmt.Sprintf("%dM", n>>20)
	case n != 0 && n%(1<<10) == 0:
		return fmt.Sprintf("%dK", n>>10)
	}
	return strconv.FormatInt(n, 10)
}

// ParseRate reads a rate in bits per second as tc writes it: a number
// with an optional bit, kbit, mbit, gbit, tbit (decimal multiples; bps,
// kbps, ... taken as the same, as people write them for bits), from 1kbit
// to 1000gbit.
func ParseRate(s string) (uint64, error) {
	l := strings.ToLower(strings.TrimSpace(s))
	mult := 1.0
	for _, u := range []struct {
		suffix string
		m      float64
	}{{"tbit", 1e12}, {"gbit", 1e9}, {"gbps", 1e9}, {"mbit", 1e6}, {"mbps", 1e6}, {"kbit", 1e3}, {"kbps", 1e3}, {"bit", 1}, {"bps", 1}} {
		if num, ok := strings.CutSuffix(l, u.suffix); ok {
			l, mult = num, u.m
			break
		}
	}
	v, err := strconv.ParseFloat(l, 64)
	if err != nil || v != v || v*mult < 1e3 || v*mult > 1e12 {
		return 0, fmt.Errorf("%q: want a rate from 1kbit to 1000gbit, like 2gbit", s)
	}
	return uint64(v * mult), nil
}
