package rnic_test

import (
	"context"
	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/rnic/trace"
	"io"
	"testing"
)

// BenchmarkObserveWriteBW is BenchmarkRCWriteBW at MTU 1024 with the
// observation machinery in its states: none; a fault injector with no
// faults in front of each port; a tracer nobody reads (what rnicd has for
// `rnic trace` to attach to); both, which is rnicd nobody watches; and a
// tracer a reader drains, which is tracing on (rnicd --trace).
func BenchmarkObserveWriteBW(b *testing.B) {
	b.Run("bare", func(b *testing.B) { runBW(b, ib.WRRDMAWrite, pairOpts{mtu: 1024}) })
	b.Run("faulty-off", func(b *testing.B) { runBW(b, ib.WRRDMAWrite, pairOpts{mtu: 1024, faulty: true}) })
	b.Run("tracer-idle", func(b *testing.B) { runBW(b, ib.WRRDMAWrite, pairOpts{mtu: 1024, trace: trace.New(0)}) })
	b.Run("rnicd-idle", func(b *testing.B) {
		runBW(b, ib.WRRDMAWrite, pairOpts{mtu: 1024, faulty: true, trace: trace.New(0)})
	})
	b.Run("tracer-on", func(b *testing.B) {
		tr := trace.New(0)
		sub := tr.Subscribe(trace.Filter{})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { // drain, as a reader would
			defer close(done)
			buf := make([]trace.Event, 1024)
			for {
				if _, err := sub.Read(ctx, buf); err != nil {
					return
				}
			}
		}()
		runBW(b, ib.WRRDMAWrite, pairOpts{mtu: 1024, trace: tr})
		cancel()
		<-done
		sub.Close()
	})
	// rnicd --trace: the events encoded as JSON lines, as to its file.
	b.Run("rnicd-trace", func(b *testing.B) {
		tr := trace.New(0)
		sub := tr.Subscribe(trace.Filter{})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- trace.WriteJSON(ctx, sub, io.Discard) }()
		runBW(b, ib.WRRDMAWrite, pairOpts{mtu: 1024, faulty: true, trace: tr})
		cancel()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(sub.Lost())/float64(b.N), "lost/op")
		sub.Close()
	})
}

// BenchmarkObserveWriteLat is BenchmarkRCWriteLat at MTU 1024 bare and as
// rnicd runs it when nobody watches: fault injector and tracer idle.
func BenchmarkObserveWriteLat(b *testing.B) {
	b.Run("bare", func(b *testing.B) { runLat(b, pairOpts{mtu: 1024}) })
	b.Run("faulty-off", func(b *testing.B) { runLat(b, pairOpts{mtu: 1024, faulty: true}) })
	b.Run("tracer-idle", func(b *testing.B) { runLat(b, pairOpts{mtu: 1024, trace: trace.New(0)}) })
	b.Run("rnicd-idle", func(b *testing.B) { runLat(b, pairOpts{mtu: 1024, faulty: true, trace: trace.New(0)}) })
}
