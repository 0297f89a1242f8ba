package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rnicd/rnicd/internal/rotate"
	"github.com/rnicd/rnicd/monitor"
	"github.com/rnicd/rnicd/rnic"
	"github.com/rnicd/rnicd/rnic/trace"
	"github.com/rnicd/rnicd/wire/fault"
	"github.com/rnicd/rnicd/wire/pcap"
)

// observers are what lets a person see inside the running device: the
// trace file (--trace), the capture (--pcap) and the monitor, served on
// a unix socket next to the control socket (for rnic stat, trace and
// inject) and, with --http, on a TCP port (web view, /metrics).
type observers struct {
	log *slog.Logger
	dev *rnic.Device

	traceFile *rotate.Files
	traceSub  *trace.Sub
	traceStop context.CancelFunc
	traceDone chan error
	traceLost uint64 // events lost, as last logged

	capture       *pcap.Writer
	captureFailed bool // a write failed, said once

	mon      *monitor.Monitor
	servers  []*http.Server
	httpAddr net.Addr // the TCP port's address, nil without --http
	serving  sync.WaitGroup
	// stopped gets why a server stopped serving on its own (the
	// monitor's, or the control socket's, which run sends here too); the
	// daemon then exits with it.
	stopped chan error
}

// startObservers starts what c asks for, and always the monitor on
// socketPath. On error it undoes what it started.
func startObservers(c config, dev *rnic.Device, faulty *fault.Injector, cmCounters func() map[string]uint64,
	tr *trace.Tracer, socketPath string, log *slog.Logger, authorize func(what string, cred *unix.Ucred) error) (_ *observers, err error) {
	o := &observers{log: log, dev: dev, stopped: make(chan error, 4)}
	defer func() {
		if err != nil {
			o.stopServing()
			o.close()
		}
	}()
	if c.trace != "" {
		if err := o.startTrace(c.trace, c.traceLim, c.traceSel, tr); err != nil {
			return nil, err
		}
		log.Info("trace file", "path", c.trace, "keeps", c.traceLim, "at_most_bytes", c.traceLim.bound(), "selects", describeFilter(c.traceSel))
	}
	if c.pcap != "" {
		w, err := pcap.Create(pcap.Config{Path: c.pcap, MaxBytes: int64(c.pcapLim.size), MaxFiles: c.pcapLim.files,
			Format: c.pcapFmt, Interface: c.name, SnapLen: c.pcapSnap})
		if err != nil {
			return nil, err
		}
		o.capture = w
		o.setCapture(w)
		snap := "whole frames"
		if c.pcapSnap > 0 {
			snap = fmt.Sprintf("%d bytes a frame", c.pcapSnap)
		}
		log.Info("capture", "path", c.pcap, "format", c.pcapFmt, "keeps", c.pcapLim, "at_most_bytes", c.pcapLim.bound(), "snap", snap)
	}
	// Fault injection changes the device for every client: only root
	// and the daemon's own uid may, by the credentials of the unix
	// socket the request came on (none over TCP).
	auth := func(r *http.Request, what string) error {
		if cred, ok := monitor.PeerCred(r.Context()); ok {
			return authorize(what, &cred)
		}
		return authorize(what, nil)
	}
	if o.mon, err = monitor.New(monitor.Config{Devices: []monitor.Device{{Dev: dev, Faulty: faulty, Counters: cmCounters}},
		Tracer: tr, Authorize: auth, QPMetrics: c.qpMetrics}); err != nil {
		return nil, err
	}
	// The daemon owns the device's control socket, so a monitor socket
	// left there is a dead daemon's.
	if err := os.Remove(socketPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("remove stale monitor socket: %w", err)
	}
	// Created as the control socket is, it gets the same mode: who may
	// use the device may also watch it; only root and the daemon's own
	// uid may impair it (auth).
	l, err := listenUnix("unix", socketPath, socketMode(c.sockGID), c.sockGID)
	if err != nil {
		return nil, fmt.Errorf("monitor socket: %w", err)
	}
	o.serve(l)
	if c.http != "" {
		l, err := net.Listen("tcp", c.http)
		if err != nil {
			return nil, fmt.Errorf("-http: %w", err)
		}
		o.httpAddr = l.Addr()
		o.serve(l)
	}
	return o, nil
}

// startTrace writes the events of tr that sel selects to path as JSON
// lines, in files rotated within lim, from a reader subscribed now,
// before any client can post work.
func (o *observers) startTrace(path string, lim fileLimit, sel trace.Filter, tr *trace.Tracer) error {
	// The buffer is what WriteJSON flushes after each batch it reads.
	f, err := rotate.Create(rotate.Config{Path: path, MaxBytes: int64(lim.size), MaxFiles: lim.files, BufSize: 64 << 10})
	if err != nil {
		return fmt.Errorf("-trace: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	o.traceFile, o.traceSub, o.traceStop, o.traceDone = f, tr.Subscribe(sel), cancel, make(chan error, 1)
	go func() { o.traceDone <- trace.WriteJSON(ctx, o.traceSub, f) }()
	return nil
}

// describeFilter says what a trace file selects, for its log line.
func describeFilter(f trace.Filter) string {
	what := "every event"
	if f.Packets {
		what = "packets"
	}
	if f.QPN != 0 {
		what += fmt.Sprintf(" of QP %#x", f.QPN)
	}
	return what
}

// setCapture hands the device's packets to c, nil to stop.
func (o *observers) setCapture(c *pcap.Writer) {
	if c == nil {
		o.dev.Observer().SetCapture(nil)
		return
	}
	o.dev.Observer().SetCapture(c)
}

func (o *observers) serve(l net.Listener) {
	// The monitor's streams (/api/trace) last as long as their client, so
	// there is no write timeout; a slow header is a hostile one.
	s := &http.Server{Handler: o.mon.Handler(), ReadHeaderTimeout: 10 * time.Second, ConnContext: monitor.ConnContext}
	o.servers = append(o.servers, s)
	o.serving.Add(1)
	go func() {
		defer o.serving.Done()
		// net/http's Serve retries what accept says is temporary
		// (EMFILE, ENFILE) with a back-off; any other end but Close is
		// the daemon's.
		if err := s.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			select {
			case o.stopped <- fmt.Errorf("monitor on %v stopped serving: %w", l.Addr(), err):
			default:
			}
		}
	}()
}

// tick runs every second: it makes what was captured so far readable,
// for a tshark that reads the capture while the daemon runs, and says
// when the trace file lost events (its writer cannot keep up with a NIC
// at full speed; the ring holds trace.DefaultRing events).
//
// A capture or trace file that cannot be written (a full disk) is said
// once and let go: the daemon serves on without it, rather than logging
// the same error every second for as long as it runs.
func (o *observers) tick() {
	if o.capture != nil && !o.captureFailed {
		if err := o.capture.Flush(); err != nil {
			o.log.Error("capture stopped: cannot write it; the daemon runs on without", "err", err)
			o.captureFailed = true
			o.setCapture(nil)
		}
	}
	if o.traceSub != nil {
		select {
		case err := <-o.traceDone:
			o.log.Error("trace file stopped: cannot write it; the daemon runs on without", "err", err)
			o.traceStop()
			o.traceSub.Close() // the tracer stops recording for it
			o.traceFile.Close()
			o.traceSub, o.traceFile = nil, nil
		default:
			o.reportLost()
		}
	}
}

func (o *observers) reportLost() {
	if lost := o.traceSub.Lost(); lost > o.traceLost {
		o.log.Warn("trace file: events lost, the writer fell behind", "lost", lost-o.traceLost, "total", lost)
		o.traceLost = lost
	}
}

// stopServing closes the monitor's ports and their open streams; the
// unix listener removes its socket as it closes.
func (o *observers) stopServing() {
	for _, s := range o.servers {
		s.Close()
	}
	o.serving.Wait()
	if o.mon != nil {
		o.mon.Close()
	}
}

// close ends the capture and the trace file once the device has
// stopped, so that they hold its last packets and events.
func (o *observers) close() {
	if o.capture != nil {
		o.setCapture(nil)
		st := o.capture.Stats()
		if err := o.capture.Close(); err != nil && !o.captureFailed {
			o.log.Error("capture", "err", err)
		}
		o.log.Info("capture closed", "packets", st.Packets, "files", st.Files, "errors", st.Errors)
	}
	if o.traceFile != nil {
		o.traceStop()
		if err := <-o.traceDone; err != nil {
			o.log.Error("trace", "err", err)
		}
		o.reportLost()
		o.traceSub.Close()
		if err := o.traceFile.Close(); err != nil {
			o.log.Error("trace", "err", err)
		}
	}
}
