package units

import (
	"strings"
	"testing"
)

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]int64{
		"0": 0, "65536": 65536, "4K": 4096, "4k": 4096, "4KB": 4096, "4KiB": 4096, "2M": 2 << 20, "100MiB": 100 << 20,
		"1024M": 1 << 30, "2G": 2 << 30, "2gb": 2 << 30, "512B": 512, "0x100": 256, "0xab": 0xab, "0x10K": 16 << 10, " 8K ": 8192,
	} {
		if got, err := ParseBytes(in); err != nil || got != want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "K", "-5", "2X", "1.5M", "0x", "4 K", "99999999999999999999", "4611686018427387904K", "KB4"} {
		if got, err := ParseBytes(in); err == nil || !strings.Contains(err.Error(), "want bytes") {
			t.Errorf("ParseBytes(%q) = %d, %v; want an error", in, got, err)
		}
	}
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 1000: "1000", 256 << 10: "256K", 100 << 20: "100M", 2 << 30: "2G"} {
		if got := FormatBytes(n); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", n, got, want)
		}
		if back, err := ParseBytes(want); err != nil || back != n {
			t.Errorf("ParseBytes(FormatBytes(%d)) = %d, %v", n, back, err)
		}
	}
}

func TestParseRate(t *testing.T) {
	for in, want := range map[string]uint64{"2gbit": 2e9, "500mbit": 500e6, "300Mbit": 300e6, "1.5gbps": 1.5e9, "1kbit": 1e3, "1000gbit": 1e12, "50000": 50000} {
		if got, err := ParseRate(in); err != nil || got != want {
			t.Errorf("ParseRate(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "gbit", "999bit", "1001gbit", "NaNgbit", "-1mbit", "fast"} {
		if got, err := ParseRate(in); err == nil {
			t.Errorf("ParseRate(%q) = %d, want an error", in, got)
		}
	}
}

// FuzzParse: any input is a value in range or an error, never a panic,
// and a size read back from its formatting is the same size.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"4K", "0x10K", "2gbit", "100MiB", "-1", "1e400gbit"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if n, err := ParseBytes(s); err == nil {
			if n < 0 || n > maxBytes {
				t.Fatalf("ParseBytes(%q) = %d", s, n)
			}
			if back, err := ParseBytes(FormatBytes(n)); err != nil || back != n {
				t.Fatalf("ParseBytes(FormatBytes(%d)) = %d, %v", n, back, err)
			}
		}
		if r, err := ParseRate(s); err == nil && (r < 1e3 || r > 1e12) {
			t.Fatalf("ParseRate(%q) = %d", s, r)
		}
	})
}
