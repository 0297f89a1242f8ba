package ibudp

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/rnicd/rnicd/wire/bth"
	"github.com/rnicd/rnicd/wire/netif"
	"github.com/rnicd/rnicd/wire/steer"
)

// Port is the Ethernet/UDP block of the NIC: it moves batches of RoCEv2
// packets between the engine and the wire. Send and Recv may run at the same
// time from different goroutines; concurrent calls of the same method are
// serialized.
type Port interface {
	// Send seals the ICRC of every buffer (the port knows the real IP/UDP
	// envelope) and transmits the batch. It does not keep the buffers,
	// though it writes into them (headers in the headroom, the ICRC). A
	// packet the kernel refuses (too big, unreachable, ...) or a Buf that is
	// not sendable is counted in Stats and skipped, as a wire would lose
	// it; Send returns an error only when the port itself fails (closed).
	Send(bufs []*Buf) error
	// Recv blocks until at least one packet arrives and fills bufs[0:n].
	// It may reorder the pointers within bufs. Packets whose ICRC fails,
	// and any other datagram that is not a well-formed RoCEv2 packet, are
	// dropped and counted, never returned. After Close it returns an error
	// wrapping net.ErrClosed promptly.
	Recv(bufs []*Buf) (n int, err error)
	// Addr is the local IP address.
	Addr() netip.Addr
	// MTU is the active IB MTU: 256, 512, 1024, 2048 or 4096.
	MTU() int
	// Stats returns the port's counters.
	Stats() Stats
	// Close releases the sockets and unblocks Recv and Send.
	Close() error
}

// Poller is a Port whose receive side can be polled, so that the NIC's
// receive pipeline can run in whichever goroutine finds packets waiting:
// its own, which sleeps in WaitRecv, or an application's that busy-polls
// (rnic.Device.PollRx), as Linux's busy polling runs a driver's NAPI poll
// in the thread of a socket's reader. ModeUDP ports are Pollers.
type Poller interface {
	Port
	// TryRecv is Recv that does not wait: it returns 0 at once when no
	// packet is there.
	TryRecv(bufs []*Buf) (n int, err error)
	// WaitRecv blocks until a packet may be there, without taking it and
	// without keeping a TryRecv of another goroutine waiting. After Close
	// it returns an error wrapping net.ErrClosed.
	WaitRecv() error
	// Pending reports whether packets already taken off the socket (the
	// rest of a GRO datagram that did not fit) wait for the next TryRecv:
	// WaitRecv does not see them, so whoever polls takes them first.
	Pending() bool
}

// Mode says how a port reaches the wire.
type Mode int

const (
	// ModeUDP uses an ordinary UDP socket; no privilege is needed.
	ModeUDP Mode = iota
	// ModePacket receives on an AF_PACKET socket and sends on a raw IP
	// socket; it needs CAP_NET_RAW.
	ModePacket
)

func (m Mode) String() string {
	switch m {
	case ModeUDP:
		return "udp"
	case ModePacket:
		return "packet"
	}
	return fmt.Sprintf("mode(%d)", int(m))
}

// Defaults.
const (
	DefaultBatch     = 64
	MaxBatch         = 1024
	DefaultRcvBuf    = 16 << 20
	DefaultSndBuf    = 4 << 20
	defaultTTL       = 64
	defaultLocalPort = bth.UDPPort
)

// Config says which port to open.
type Config struct {
	Addr netip.Addr // local IP to bind, e.g. 127.0.0.2 (IPv4-mapped is unmapped)
	Port uint16     // local UDP port; 0 means 4791
	// RemotePort is the UDP destination port of sent packets; 0 means
	// 4791. Tests use it to run two ports on one address.
	RemotePort uint16
	Mode       Mode
	// MTU caps the active IB MTU: 0 takes ActiveMTU of the interface that
	// holds Addr, otherwise the port uses the lower of the two.
	MTU   int
	Batch int // max packets per syscall; 0 = DefaultBatch
	// NoGSO makes a ModeUDP port hand the kernel one packet per message
	// and take one per message. By default runs of equal-sized packets to
	// one peer go as one UDP_SEGMENT message each, and runs arriving are
	// taken whole (UDP_GRO), where the kernel supports it; sending runs
	// costs a UDP checksum (computed by the offload) where rxe sends 0.
	NoGSO bool
	// FullMTURunsOnly makes a ModeUDP port send as runs only packets that
	// carry a full IB MTU (the middle of one large message), as it did
	// before a ModePacket receiver could cut other runs. By default runs
	// of equal-sized smaller packets to one peer go as one UDP_SEGMENT
	// message too: 64-byte WRITEs, 48 of them a doorbell through rnicd.
	// Two rnicd over veth, ib_write_bw -s 64, back to back: 0.105 -> 0.351
	// Mpps, the requesting rnicd's CPU 5.7 -> 1.2 us a WQE, ACKs 95,000 ->
	// 10,000 for 500,000 WRITEs (BENCHMARKS.md). A receiver that sees such
	// a run uncut (ModePacket on this host or across a veth) finds its
	// packets' size itself (runs_linux.go); rxe gets them cut by the
	// kernel.
	FullMTURunsOnly bool
	// RcvBuf and SndBuf are socket buffer sizes in bytes; 0 takes the
	// defaults. Above net.core.[rw]mem_max they need CAP_NET_ADMIN.
	RcvBuf, SndBuf int
	// WaitInKernel makes the port's calls wait for their socket in
	// poll(2), on the calling thread, instead of in the Go runtime's
	// poller: one thread wake-up per arriving packet instead of two or
	// three (package kwait), for a process with one port, as rnicd is. A
	// waiting thread keeps its P, so with several such ports in one
	// process (two devices in a test) they would starve the goroutines
	// that feed them; the zero value uses the runtime's poller.
	WaitInKernel bool
	// Queues, above 1, opens a ModeUDP port's socket in a SO_REUSEPORT
	// group whose datagrams the kernel steers by destination QPN
	// (a steer.Group, which SteeringOf returns; steer.QueueOf says which
	// QPN goes where), as a multi-queue NIC steers by RSS: the port is
	// queue 0, and the Group's Queue opens the sockets of the others, each
	// for an engine of the same process. At most steer.MaxQueues; it
	// needs CAP_BPF.
	Queues int
	// SocketFD, if above 0, is a socket of a steered port's group
	// (steer.Group.Queue, in this process): a ModeUDP port takes it over
	// instead of opening one, and Open closes it if it fails. Addr and
	// Port must be those it is bound to.
	SocketFD int
}

// withDefaults checks cfg and fills in the zero values.
func (cfg Config) withDefaults() (Config, error) {
	if !cfg.Addr.IsValid() || cfg.Addr.IsUnspecified() {
		return cfg, fmt.Errorf("ibudp: config: need a local address, have %v", cfg.Addr)
	}
	cfg.Addr = cfg.Addr.Unmap()
	if cfg.Port == 0 {
		cfg.Port = defaultLocalPort
	}
	if cfg.RemotePort == 0 {
		cfg.RemotePort = bth.UDPPort
	}
	if cfg.Mode != ModeUDP && cfg.Mode != ModePacket {
		return cfg, fmt.Errorf("ibudp: config: unknown %v", cfg.Mode)
	}
	if cfg.Queues < 0 || cfg.Queues > steer.MaxQueues {
		return cfg, fmt.Errorf("ibudp: config: %d queues, want 0..%d", cfg.Queues, steer.MaxQueues)
	}
	if (cfg.Queues > 1 || cfg.SocketFD > 0) && cfg.Mode != ModeUDP {
		return cfg, fmt.Errorf("ibudp: config: steering needs ModeUDP, have %v", cfg.Mode)
	}
	if cfg.Queues > 1 && cfg.SocketFD > 0 {
		return cfg, errors.New("ibudp: config: a queue's socket cannot open queues")
	}
	if cfg.MTU != 0 && !netif.ValidIBMTU(cfg.MTU) {
		return cfg, fmt.Errorf("ibudp: config: MTU %d is not 256, 512, 1024, 2048 or 4096", cfg.MTU)
	}
	switch {
	case cfg.Batch == 0:
		cfg.Batch = DefaultBatch
	case cfg.Batch < 0 || cfg.Batch > MaxBatch:
		return cfg, fmt.Errorf("ibudp: config: batch %d is outside 1..%d", cfg.Batch, MaxBatch)
	}
	if cfg.RcvBuf <= 0 {
		cfg.RcvBuf = DefaultRcvBuf
	}
	if cfg.SndBuf <= 0 {
		cfg.SndBuf = DefaultSndBuf
	}
	return cfg, nil
}

// Open opens a port as cfg says. A cfg.SocketFD is the port's from the
// call on: closed with the port, or by Open if it fails.
func Open(cfg Config) (Port, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		if cfg.SocketFD > 0 {
			syscall.Close(cfg.SocketFD)
		}
		return nil, err
	}
	return open(cfg)
}

// ErrUnsupported is returned by Open where the platform has no such port.
var ErrUnsupported = errors.New("ibudp: not supported on this platform")

// Stats are a port's counters. Names in the comments are those Each gives
// (rxe's where rxe has a counter of the kind).
type Stats struct {
	TxPackets uint64 // sent_pkts: packets the kernel took
	TxBytes   uint64 // sent_bytes: their RoCE bytes (BTH..ICRC)
	TxBatches uint64 // tx_batches: sendmmsg calls that sent something
	TxErrors  uint64 // send_err: packets the kernel refused
	TxInvalid uint64 // tx_invalid: Bufs Send refused (bad N, peer of the wrong family)
	// TxLastErrno is the errno of the last packet the kernel refused.
	TxLastErrno syscall.Errno

	RxPackets uint64 // rcvd_pkts: packets returned by Recv
	RxBytes   uint64 // rcvd_bytes: their RoCE bytes
	RxBatches uint64 // rx_batches: recvmmsg calls that returned something

	// Drops, by reason.
	RxICRCErrors uint64 // icrc_err: ICRC does not match
	RxShort      uint64 // rx_short: shorter than BTH+ICRC
	RxMalformed  uint64 // rx_malformed: transport headers fail bth.Parse
	RxTooLong    uint64 // rx_too_long: longer than MaxRoCELen
	RxBadHeader  uint64 // rx_bad_header: IP/UDP header unusable (ModePacket), unreadable source address
	RxOutgoing   uint64 // rx_outgoing: own outgoing copy (ModePacket, should be filtered in the kernel)
	// RxUDPChecksum counts IPv6 datagrams with a wrong, nonzero UDP
	// checksum (ModePacket; in ModeUDP the kernel drops them and counts
	// them in UDP's InCsumErrors).
	RxUDPChecksum uint64 // rx_udp_csum_err

	// RxICRCAnyID counts packets accepted (not dropped) only by the
	// 16-bit check for an unknown IPv4 ID (ModeUDP).
	RxICRCAnyID uint64 // icrc_any_id
	// RxKernelDrops is the number of datagrams the kernel dropped for want
	// of socket buffer, as last reported (SO_RXQ_OVFL).
	// With GRO a dropped datagram can be a whole run of packets.
	RxKernelDrops uint64 // rx_kernel_drops
}

// Add adds o's counters to s's (the ports of a steered port's queues
// together); the last errno is o's where o has one.
func (s *Stats) Add(o Stats) {
	s.TxPackets += o.TxPackets
	s.TxBytes += o.TxBytes
	s.TxBatches += o.TxBatches
	s.TxErrors += o.TxErrors
	s.TxInvalid += o.TxInvalid
	if o.TxLastErrno != 0 {
		s.TxLastErrno = o.TxLastErrno
	}
	s.RxPackets += o.RxPackets
	s.RxBytes += o.RxBytes
	s.RxBatches += o.RxBatches
	s.RxICRCErrors += o.RxICRCErrors
	s.RxShort += o.RxShort
	s.RxMalformed += o.RxMalformed
	s.RxTooLong += o.RxTooLong
	s.RxBadHeader += o.RxBadHeader
	s.RxOutgoing += o.RxOutgoing
	s.RxUDPChecksum += o.RxUDPChecksum
	s.RxICRCAnyID += o.RxICRCAnyID
	s.RxKernelDrops += o.RxKernelDrops
}

// RxDropped is the number of datagrams Recv dropped, all reasons together
// (kernel drops not included).
func (s Stats) RxDropped() uint64 {
	return s.RxICRCErrors + s.RxShort + s.RxMalformed + s.RxTooLong + s.RxBadHeader + s.RxOutgoing + s.RxUDPChecksum
}

// Each calls f with the name and value of every counter, in a fixed order.
func (s Stats) Each(f func(name string, v uint64)) {
	f("sent_pkts", s.TxPackets)
	f("sent_bytes", s.TxBytes)
	f("tx_batches", s.TxBatches)
	f("send_err", s.TxErrors)
	f("tx_invalid", s.TxInvalid)
	f("rcvd_pkts", s.RxPackets)
	f("rcvd_bytes", s.RxBytes)
	f("rx_batches", s.RxBatches)
	f("icrc_err", s.RxICRCErrors)
	f("rx_short", s.RxShort)
	f("rx_malformed", s.RxMalformed)
	f("rx_too_long", s.RxTooLong)
	f("rx_bad_header", s.RxBadHeader)
	f("rx_outgoing", s.RxOutgoing)
	f("rx_udp_csum_err", s.RxUDPChecksum)
	f("icrc_any_id", s.RxICRCAnyID)
	f("rx_kernel_drops", s.RxKernelDrops)
}

// String lists the nonzero counters as name=value.
func (s Stats) String() string {
	var b strings.Builder
	s.Each(func(name string, v uint64) {
		if v != 0 {
			if b.Len() > 0 {
				b.WriteByte(' ')
			}
			fmt.Fprintf(&b, "%s=%d", name, v)
		}
	})
	if s.TxLastErrno != 0 {
		fmt.Fprintf(&b, " last_send_errno=%q", s.TxLastErrno.Error())
	}
	return b.String()
}

// counter names one of a port's counters.
type counter int

const (
	cTxPackets counter = iota
	cTxBytes
	cTxBatches
	cTxErrors
	cTxInvalid
	cRxPackets
	cRxBytes
	cRxBatches
	cRxICRCErrors
	cRxShort
	cRxMalformed
	cRxTooLong
	cRxBadHeader
	cRxOutgoing
	cRxUDPChecksum
	cRxICRCAnyID
	numCounters
)

// tally is a batch's worth of counts, kept in plain integers and added to
// the port's counters once per batch.
type tally [numCounters]uint64

// counters are a port's live counters.
type counters struct {
	c           [numCounters]atomic.Uint64
	kernelDrops atomic.Uint64
	lastErrno   atomic.Uintptr
}

func (c *counters) add(t *tally) {
	for i, v := range t {
		if v != 0 {
			c.c[i].Add(v)
		}
	}
}

func (c *counters) snapshot() Stats {
	g := func(i counter) uint64 { return c.c[i].Load() }
	return Stats{
		TxPackets:     g(cTxPackets),
		TxBytes:       g(cTxBytes),
		TxBatches:     g(cTxBatches),
		TxErrors:      g(cTxErrors),
		TxInvalid:     g(cTxInvalid),
		TxLastErrno:   syscall.Errno(c.lastErrno.Load()),
		RxPackets:     g(cRxPackets),
		RxBytes:       g(cRxBytes),
		RxBatches:     g(cRxBatches),
		RxICRCErrors:  g(cRxICRCErrors),
		RxShort:       g(cRxShort),
		RxMalformed:   g(cRxMalformed),
		RxTooLong:     g(cRxTooLong),
		RxBadHeader:   g(cRxBadHeader),
		RxOutgoing:    g(cRxOutgoing),
		RxUDPChecksum: g(cRxUDPChecksum),
		RxICRCAnyID:   g(cRxICRCAnyID),
		RxKernelDrops: c.kernelDrops.Load(),
	}
}
