package rnic

import (
	"cmp"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/rnic/dma"
	"github.com/rnicd/rnicd/rnic/flowctl"
	"github.com/rnicd/rnicd/rnic/qpmgr"
	"github.com/rnicd/rnicd/rnic/trace"
	"github.com/rnicd/rnicd/wire/bth"
	"github.com/rnicd/rnicd/wire/ibudp"
	"github.com/rnicd/rnicd/wire/steer"
)

// Config says how to build a device.
type Config struct {
	// Port is the device's Ethernet/UDP port. The device owns it from
	// now on and closes it on Close.
	Port ibudp.Port
	// Batch is the most packets the pipelines hand the port at once; 0
	// takes ibudp.DefaultBatch.
	Batch int
	// Name is the device's name (ibv_get_device_name), "rnic0" if empty;
	// the trace and the metrics carry it.
	Name string
	// Trace, if set, is told of every step of every message (see package
	// trace); several devices may share one. Nil costs nothing.
	Trace *trace.Tracer
	// Window is the most unacknowledged PSNs per RC QP (flowctl's
	// window); 0 takes rxe's 128. Above 2^22 it is capped there, half
	// the PSN space.
	Window int
	// CC is the congestion control (flowctl.NewAlgorithm; rnicd -cc), nil
	// for none; CCParams its notification point's parameters, the zero
	// value for mlx5's defaults.
	CC       flowctl.Algorithm
	CCParams flowctl.Params
	// AckHold is the longest a ping-pong QP's ACK waits for the QP's next
	// request to go out with it (rx.Acker.Flush); 0 takes DefaultAckHold,
	// a negative value sends every ACK at once, as rxe does.
	AckHold time.Duration
	// QPNFirst and QPNLast bound the QPNs the device hands out, as a
	// NIC's are bounded by its QP context memory (a steered port's queues
	// take one block each: steer.Group).
	// Zero values: every QPN from qpmgr.FirstQPN.
	QPNFirst, QPNLast uint32
	// Retry7Forever makes an RC QP with retry_cnt 7 retry forever, as rxe
	// does; false (the default) gives IBTA's and ConnectX's seven retries,
	// then RETRY_EXC_ERR, so that a dead peer is noticed.
	Retry7Forever bool
	// CopyPayload makes the requester copy each payload out of registered
	// memory into the packet (a gather of about 4 us per 64 KiB) instead
	// of the port sending it from the region (wqe.Engine.CopyPayload): to
	// measure one against the other.
	CopyPayload bool
	// CoalescePosts lets a post of small WQEs on an RC QP that awaits an
	// ACK leave them queued, for the ACK or the application's next busy
	// poll (PollRx) to send together (coalesce.go). For a NIC in the
	// application's process, whose posts would otherwise each run the
	// requester and send one packet; false (the zero value) sends at
	// every post, as a daemon, whose doorbells come in batches already,
	// does.
	CoalescePosts bool
	// EnginePorts, with PollIdle, run more engines (queue.go): each is a
	// socket of Port's steered group (steer.Group.Queue), wrapped as
	// Port is, and its engine owns the QPs whose packets the group steers
	// to it (steer.QueueOf over 1+len(EnginePorts) queues, Port being
	// queue 0). The device owns them as it owns Port.
	EnginePorts []ibudp.Port
	// PollIdle, if positive, runs the polling engine (engine.go) in
	// place of the two pipelines on a port that can be polled: it polls
	// the host queues it is given (AttachQPRings, AttachSRQRing) and the
	// port while there is work, and sleeps after PollIdle without any
	// (rnicd -poll-idle).
	PollIdle time.Duration
}

// DefaultAckHold is the delayed-ACK hold time: longer than an application
// takes to answer a completion through a daemon on a busy host (about 100
// us measured on 2 shared cores), far below any ACK timeout (4 us * 2^14
// = 67 ms is perftest's).
const DefaultAckHold = 200 * time.Microsecond

// Device is one RDMA device with one port, as a program sees it: the
// verbs (objects.go, post.go, mcast.go), the host rings a daemon hands it
// (hostrings.go) and the calls that order or wake the engines (Fence,
// Wake, PollRx). The work behind them is its pipelines' (pipeline.go);
// what it counts and shows is its Observer's (observer.go).
type Device struct {
	name  string
	probe *trace.Probe // nil: no tracing
	port  ibudp.Port   // queue 0's: the port's address and MTU
	dma   *dma.Table
	qps   *qpmgr.Table
	gsi   *GSI // QP1 (gsi.go)
	// mcast is the multicast groups QPs are attached to (mcast.go).
	mcast mcastTable
	// xrcds are the XRC domains shared through files (xrc.go).
	xrcds xrcdFiles

	mu     sync.Mutex
	nextPD dma.PD

	// pipes are the engines that fetch, validate, queue and run the
	// WQEs and handle the packets (pipeline.go).
	pipes pipelines
	// obs is the statistics and capture block (observer.go).
	obs Observer

	closeOnce sync.Once
}

// Open starts a device on cfg.Port.
func Open(cfg Config) (*Device, error) {
	if cfg.Port == nil {
		return nil, errors.New("rnic: config has no port")
	}
	if ib.MTUFromBytes(cfg.Port.MTU()) == 0 {
		return nil, fmt.Errorf("rnic: port MTU %d is not an IB MTU", cfg.Port.MTU())
	}
	if cfg.Batch <= 0 {
		cfg.Batch = ibudp.DefaultBatch
	}
	if cfg.Name == "" {
		cfg.Name = "rnic0"
	}
	ports := append([]ibudp.Port{cfg.Port}, cfg.EnginePorts...)
	if len(ports) > 1 {
		if cfg.PollIdle <= 0 {
			return nil, fmt.Errorf("rnic: %d engines need the polling engine (PollIdle)", len(ports))
		}
		if cfg.CoalescePosts {
			return nil, errors.New("rnic: post coalescing is for a NIC in one process, with one engine")
		}
		if len(ports) > steer.MaxQueues {
			return nil, fmt.Errorf("rnic: %d engines, at most %d", len(ports), steer.MaxQueues)
		}
		for i, p := range ports {
			if _, ok := p.(ibudp.Poller); !ok {
				return nil, fmt.Errorf("rnic: engine %d's port cannot be polled", i)
			}
			if p.MTU() != cfg.Port.MTU() || p.Addr() != cfg.Port.Addr() {
				return nil, fmt.Errorf("rnic: engine %d's port is %v MTU %d, not the port's %v MTU %d",
					i, p.Addr(), p.MTU(), cfg.Port.Addr(), cfg.Port.MTU())
			}
		}
	}
	d := &Device{
		name:   cfg.Name,
		probe:  cfg.Trace.Probe(cfg.Name),
		port:   cfg.Port,
		dma:    dma.NewTable(),
		qps:    qpmgr.NewTableRange(cfg.QPNFirst, cmp.Or(cfg.QPNLast, bth.QPNMask)),
		nextPD: 1,
	}
	if err := d.pipes.init(cfg, ports, d.probe, d.dma, d.qps); err != nil {
		return nil, err
	}
	d.obs = Observer{qps: d.qps, pipes: &d.pipes, mcast: &d.mcast}
	var err error
	if d.gsi, err = newGSI(d); err != nil {
		return nil, err
	}
	d.obs.tap.probe = d.probe
	d.obs.updateTap()
	d.pipes.start(cfg.PollIdle)
	return d, nil
}

// The engines as a program drives them: the calls below are what the
// host interface and an in-process application need of the pipelines
// besides the verbs.

// Fence orders the caller's memory accesses with the device's: whatever
// the pipelines wrote into registered memory before the call is visible
// after it, and whatever the caller wrote before it is what they read
// after. A real NIC's DMA is ordered by the PCIe fabric and the CPU's
// barriers; here both sides are goroutines, and Go's memory model (and
// its race detector) needs a synchronizing operation between them. A CQE
// polled from a CQ of this device is one already; Fence is for memory a
// peer wrote or will read, whose only signal arrived over the network.
func (d *Device) Fence() { d.pipes.fence() }

// PollRx runs the receive pipeline once in the caller's goroutine: it
// takes the packets waiting on the port, without blocking, and handles
// them. An application that spins on a CQ calls it (through verbs) so
// that a message's packets are handled on the thread that waits for it,
// with no wake-up of the pipeline's goroutine on the way: busy polling,
// as Linux runs a driver's NAPI poll in a busy-polling socket reader. It
// returns how many packets it handled: 0 if none was there, if the port
// cannot be polled, or if the pipeline is at work already. First it sends
// what the application posted since its last poll and left waiting (post
// coalescing, coalesce.go).
func (d *Device) PollRx() int { return d.pipes.pollRx() }

// Wake wakes the engines that sleep: a doorbell message arrived. A client
// rings only when its rings' engine said it sleeps, so this is rare.
func (d *Device) Wake() { d.pipes.wake() }

// EnterError moves qp to ERR, its WQEs flushed, once any ACK it holds is
// sent: the application may have seen that message complete, and the
// peer would retry it against a QP that answers no more.
func (d *Device) EnterError(qp *QP) { d.pipes.queueOf(qp).enterError(qp) }

// Close stops the pipelines, destroys every QP and closes the port.
func (d *Device) Close() error {
	var err error
	d.closeOnce.Do(func() {
		err = d.pipes.stop()
		for _, qp := range d.qps.All() {
			qp.Destroy()
		}
	})
	return err
}

// Probe is the device's handle on its trace, for the CM agent that runs
// on QP1 beside it; nil when the device traces nothing.
func (d *Device) Probe() *trace.Probe { return d.probe }

// Name is the device's name.
func (d *Device) Name() string { return d.name }

// Port returns the device's port.
func (d *Device) Port() ibudp.Port { return d.port }

// Observer returns the device's statistics and capture block: its
// counters, its QPs' status, its engines' and port's counters, and the
// packet capture (observer.go).
func (d *Device) Observer() *Observer { return &d.obs }
