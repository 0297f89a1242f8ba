package netif

import "testing"

// GIDs: never a panic; what parses prints and parses back to itself.
func FuzzParseGID(f *testing.F) {
	for _, s := range []string{"::ffff:198.18.0.2", "fe80:0000:0000:0000:5054:00ff:fe12:3456", "00000000000000000000ffffc6120002", "1.2.3.4", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		g, err := ParseGID(s)
		if err != nil {
			return
		}
		h, err := ParseGID(g.String())
		if err != nil || h != g {
			t.Fatalf("%q -> %v -> %v, %v", s, g, h, err)
		}
	})
}
