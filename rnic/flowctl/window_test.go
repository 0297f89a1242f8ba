package flowctl

import (
	"testing"
	"time"
)

// The loss window: full until a loss, halved once per loss episode,
// grown back by one PSN per PSN acknowledged once the episode is over,
// never below MinWindow, and full again once it reaches the device's
// window.
func TestLossWindow(t *testing.T) {
	m, _ := newManager(t, "none", "")
	var q QP
	want := func(n int) {
		t.Helper()
		if got := m.QPWindow(&q); got != n {
			t.Fatalf("window %d, want %d", got, n)
		}
		if !m.WindowOpen(&q, uint32(1000+n-1), 1000) || m.WindowOpen(&q, uint32(1000+n), 1000) {
			t.Fatalf("WindowOpen disagrees with a window of %d", n)
		}
	}
	want(128)
	m.Lost(&q, 100, 228) // a NAK for 100 with 128 PSNs out
	want(64)
	m.Lost(&q, 120, 228) // another NAK of the same go-back: no second cut
	want(64)
	m.Acked(&q, 200, 80) // still short of 228: no growth either
	want(64)
	m.Acked(&q, 230, 30) // the episode is over: +30
	want(94)
	m.Lost(&q, 240, 300)
	want(47)
	for i := 0; i < 6; i++ {
		m.Lost(&q, uint32(400+100*i), uint32(450+100*i))
	}
	want(MinWindow)
	m.Acked(&q, 1100, 500)
	want(128) // grown back past the device's window: the full window again
	m.Acked(&q, 1200, 100)
	want(128)

	// Across the PSN wrap.
	m.Lost(&q, 0xfffff0, 0x10)
	m.Lost(&q, 0x5, 0x20)
	want(64)
}

// The round trip is timed on one new PSN at a time, and a go-back drops
// the PSN being timed (Karn's rule).
func TestLossWindowRTT(t *testing.T) {
	m, clk := newManager(t, "none", "")
	var q QP
	if s, _ := m.RTT(&q); s != 0 {
		t.Fatalf("srtt %d before any sample", s)
	}
	m.SentNew(&q, 10)
	clk.t += 100_000
	m.SentNew(&q, 20) // one timed at a time: ignored
	clk.t += 100_000
	m.Acked(&q, 11, 11) // acknowledges 10: 200 us
	if s, v := m.RTT(&q); s != 200_000 || v != 100_000 {
		t.Fatalf("srtt %d rttvar %d, want 200000 100000", s, v)
	}
	m.SentNew(&q, 30)
	clk.t += 1_000_000
	m.Lost(&q, 25, 40) // a go-back: the ACK for 30 may answer the resend
	m.Acked(&q, 41, 16)
	if s, _ := m.RTT(&q); s != 200_000 {
		t.Fatalf("srtt %d: sampled a PSN sent twice", s)
	}
	m.SentNew(&q, 50)
	clk.t += 100_000
	m.Acked(&q, 51, 10)
	// srtt += (100 - 200) / 8; rttvar += (|200 - 100| - 100) / 4
	if s, v := m.RTT(&q); s != 187_500 || v != 100_000 {
		t.Fatalf("srtt %d rttvar %d, want 187500 100000", s, v)
	}
}

// A QP is lossy while its window is cut and for a second after its last
// loss; one that never lost a packet never is.
func TestLossy(t *testing.T) {
	m, clk := newManager(t, "none", "")
	var q QP
	if m.Lossy(&q) {
		t.Fatal("lossy before any loss")
	}
	m.Lost(&q, 100, 200)
	m.Acked(&q, 300, 200) // grown back to the full window at once
	if m.QPWindow(&q) != 128 || !m.Lossy(&q) {
		t.Fatalf("window %d, lossy %v right after a loss", m.QPWindow(&q), m.Lossy(&q))
	}
	clk.t += int64(time.Second)
	if m.Lossy(&q) {
		t.Fatal("still lossy a second after the last loss, window full")
	}
	m.Lost(&q, 400, 500)
	clk.t += 2 * int64(time.Second)
	if !m.Lossy(&q) {
		t.Fatal("not lossy with the window cut")
	}
}
