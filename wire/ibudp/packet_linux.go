package ibudp

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/rnicd/rnicd/wire/bth"
	"github.com/rnicd/rnicd/wire/netif"
)

// packetPort is a ModePacket port. It receives whole IP datagrams on an
// AF_PACKET socket, so it sees the IP header (the IPv4 ID above all) the
// ICRC covers, and sends on a raw IP socket with a header it writes itself,
// so it chooses the UDP source port and IPv4 ID of every packet while the
// kernel still routes and resolves neighbours. An ordinary UDP socket holds
// the UDP port, so that the kernel does not answer with ICMP port
// unreachable; a filter drops everything queued on it.
type packetPort struct {
	sockPort
	local  netip.Addr // cfg.Addr without zone
	v6     bool
	hl     int // length of the IP and UDP headers the port writes
	scope  uint32
	ipid   atomic.Uint32
	holder *net.UDPConn
	rxSock io.Closer // AF_PACKET, SOCK_DGRAM
	txSock io.Closer // AF_INET(6), SOCK_RAW, IPPROTO_RAW
	runs   *runs     // UDP_SEGMENT runs seen before the kernel cut them (runs_linux.go)
}

func openPacket(cfg Config, ifc netif.Interface, mtu int) (_ *packetPort, err error) {
	p := &packetPort{
		sockPort: sockPort{cfg: cfg, mtu: mtu},
		local:    cfg.Addr.WithZone(""),
		v6:       cfg.Addr.Is6(),
		hl:       bth.IPv4HeaderLen + bth.UDPHeaderLen,
	}
	if p.v6 {
		p.hl = bth.IPv6HeaderLen + bth.UDPHeaderLen
		if cfg.Addr.IsLinkLocalUnicast() {
			p.scope = uint32(ifc.Index)
		}
	}
	defer func() {
		if err != nil {
			p.closeAll()
		}
	}()
	if p.holder, err = openHolder(cfg); err != nil {
		return nil, err
	}
	ifindexes := []int{ifc.Index}
	if !ifc.Loopback {
		// Packets from this host to Addr come in on the loopback device.
		lo, err := netif.LoopbackIndex()
		if err != nil {
			return nil, err
		}
		ifindexes = append(ifindexes, lo)
	}
	var rrc, trc rawIO
	if rrc, p.rxSock, err = openPacketRx(cfg, ifindexes); err != nil {
		return nil, err
	}
	if trc, p.txSock, err = openRawTx(cfg, p.scope); err != nil {
		return nil, err
	}
	// Two iovecs per received message: its Buf, then room for the rest of
	// a frame that holds a whole run.
	rxm := newMmsgs(cfg.Batch, ctrlLen)
	rxm.iovs = make([]unix.Iovec, 2*cfg.Batch)
	p.rx = newBatchIO(rrc, rxm)
	p.runs = newRuns(cfg.Batch)
	p.tx = newBatchIO(trc, newMmsgs(cfg.Batch, 0))
	return p, nil
}

// openHolder binds the UDP port with a socket that drops all it receives.
func openHolder(cfg Config) (*net.UDPConn, error) {
	network := "udp4"
	if cfg.Addr.Is6() {
		network = "udp6"
	}
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = attachFilter(int(fd), dropAllFilter()) })
		if err != nil {
			return err
		}
		return serr
	}}
	bind := netip.AddrPortFrom(cfg.Addr, cfg.Port).String()
	pc, err := lc.ListenPacket(context.Background(), network, bind)
	if err != nil {
		return nil, fmt.Errorf("ibudp: binding UDP %s: %w", bind, err)
	}
	return pc.(*net.UDPConn), nil
}

// openPacketRx opens the AF_PACKET socket: all interfaces, cooked
// (SOCK_DGRAM: from the network header on), with the port's filter attached
// before it is bound so that nothing else is ever queued.
func openPacketRx(cfg Config, ifindexes []int) (rawIO, io.Closer, error) {
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("ibudp: AF_PACKET socket (needs CAP_NET_RAW): %w", err)
	}
	prog, err := packetFilter(cfg.Addr, cfg.Port, ifindexes)
	if err == nil {
		err = attachFilter(fd, prog)
	}
	if err == nil {
		// Best effort (Linux 4.20+): the filter drops outgoing copies too.
		_ = unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1)
		err = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RXQ_OVFL, 1)
	}
	if err == nil && cfg.Addr.Is6() {
		// Whether a packet's UDP checksum can be checked (csum.go).
		err = unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_AUXDATA, 1)
	}
	if err == nil {
		err = setBuffers(fd, cfg.RcvBuf, 0)
	}
	if err == nil {
		err = unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL)})
	}
	if err != nil {
		unix.Close(fd)
		return nil, nil, fmt.Errorf("ibudp: AF_PACKET socket: %w", err)
	}
	rc, c, err := socketIO(fd, cfg.WaitInKernel, "ibudp-packet-rx")
	if err != nil {
		return nil, nil, fmt.Errorf("ibudp: AF_PACKET socket: %w", err)
	}
	return rc, c, nil
}

// openRawTx opens the raw IP socket Send writes whole IP datagrams to. It
// is bound to Addr so that the kernel routes from there.
func openRawTx(cfg Config, scope uint32) (rawIO, io.Closer, error) {
	family, level, opt := unix.AF_INET6, unix.IPPROTO_IPV6, unix.IPV6_HDRINCL
	var sa unix.Sockaddr = &unix.SockaddrInet6{Addr: cfg.Addr.As16(), ZoneId: scope}
	if cfg.Addr.Is4() {
		family, level, opt = unix.AF_INET, unix.IPPROTO_IP, unix.IP_HDRINCL
		sa = &unix.SockaddrInet4{Addr: cfg.Addr.As4()}
	}
	fd, err := unix.Socket(family, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW)
	if err != nil {
		return nil, nil, fmt.Errorf("ibudp: raw IP socket (needs CAP_NET_RAW): %w", err)
	}
	err = unix.SetsockoptInt(fd, level, opt, 1)
	if err == nil {
		// It is never read; an IPv6 IPPROTO_RAW socket could receive.
		err = attachFilter(fd, dropAllFilter())
	}
	if err == nil {
		err = setBuffers(fd, 0, cfg.SndBuf)
	}
	if err == nil {
		err = unix.Bind(fd, sa)
	}
	if err != nil {
		unix.Close(fd)
		return nil, nil, fmt.Errorf("ibudp: raw IP socket: %w", err)
	}
	rc, c, err := socketIO(fd, cfg.WaitInKernel, "ibudp-packet-tx")
	if err != nil {
		return nil, nil, fmt.Errorf("ibudp: raw IP socket: %w", err)
	}
	return rc, c, nil
}

func htons(v uint16) uint16 {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], v)
	return binary.NativeEndian.Uint16(b[:])
}

func (p *packetPort) Close() error { return p.close(p.closeAll) }

func (p *packetPort) closeAll() error {
	var errs []error
	if p.rxSock != nil {
		errs = append(errs, p.rxSock.Close())
	}
	if p.txSock != nil {
		errs = append(errs, p.txSock.Close())
	}
	if p.holder != nil {
		errs = append(errs, p.holder.Close())
	}
	return errors.Join(errs...)
}

// nextIPID returns the IPv4 ID of the next packet. It skips 0, which a raw
// socket would replace with an ID of the kernel's choosing.
func (p *packetPort) nextIPID() uint16 {
	for {
		if id := uint16(p.ipid.Add(1)); id != 0 {
			return id
		}
	}
}

func (p *packetPort) Send(bufs []*Buf) error { return p.send(bufs, p.hl, p.prepare) }

// prepare writes the IP and UDP headers into b's headroom, seals the ICRC
// over exactly them and points message k at the whole datagram.
func (p *packetPort) prepare(b *Buf, k int) bool {
	peer, ok := peerOK(b.Peer, p.v6)
	if !ok {
		return false
	}
	// IPv6 flow label 0: rxe writes 0 too (prepare_ipv6_hdr in rxe_net.c
	// ignores the address vector's flow label) and spreads flows by UDP
	// source port instead, as SrcPort does here. The ICRC masks both the
	// label and the TTL / hop limit, which rxe takes from the address
	// vector (1 for rdma-core's pingpongs) and the port sets to 64.
	env := bth.Envelope{
		Src: p.local, Dst: peer.WithZone(""),
		SrcPort: b.SrcPort, DstPort: p.cfg.RemotePort,
		TOS: b.TOS, TTL: defaultTTL,
	}
	if env.SrcPort == 0 {
		env.SrcPort = p.cfg.Port
	}
	if !p.v6 {
		env.ID = p.nextIPID()
	}
	if b.ext != nil {
		b.Flatten() // the frame is built in place around the RoCE part
	}
	frame := b.Data[Headroom-p.hl : Headroom+b.N]
	env.Put(frame[:p.hl], b.N)
	p.txSum.seal(frame[:p.hl], frame[p.hl:])
	b.ApplyFlip() // before the checksum: a corrupted packet reaches the peer's ICRC check
	if p.v6 {
		putUDP6Checksum(frame[:p.hl], frame[p.hl:]) // mandatory over IPv6 (csum.go)
	}
	if t := p.tap.Load(); t != nil {
		t.Packet(TapSent, frame[:p.hl], frame[p.hl:], ICRCUnchecked, b.QPN)
	}
	m := p.tx.m
	m.set(k, frame, putSockaddr(m.name(k), peer, 0, p.scope), 0)
	return true
}

// Recv receives whole IP datagrams: the IP and UDP headers land in the
// headroom, the RoCE part at Headroom (unless the IPv4 header has options).
// Packets cut from a run come first, from the previous call.
func (p *packetPort) Recv(bufs []*Buf) (int, error) {
	if len(bufs) == 0 {
		return 0, nil
	}
	if err := CheckRecvBufs(bufs); err != nil {
		return 0, err
	}
	p.rxMu.Lock()
	defer p.rxMu.Unlock()
	if p.runs.waiting() {
		return p.deliverRuns(bufs), nil
	}
	m := p.rx.m
	vlen := min(len(bufs), p.cfg.Batch)
	for {
		for i, b := range bufs[:vlen] {
			front := b.Data[Headroom-p.hl:]
			m.iovs[2*i].Base, m.iovs[2*i+1].Base = &front[0], &p.runs.over[i][0]
			m.iovs[2*i].SetLen(len(front))
			m.iovs[2*i+1].SetLen(len(p.runs.over[i]))
			m.setv(i, 2*i, 2, nameLen, ctrlLen)
		}
		n, err := p.rx.recv(vlen, true)
		m.release(2 * vlen)
		if err != nil {
			return 0, closedError("recv", p.closed.Load(), err)
		}
		good := p.accept(bufs[:n], p.check)
		good += p.deliverRuns(bufs[good:])
		if good > 0 {
			return good, nil
		}
	}
}

// onePacket reports whether roce is one well-formed packet with a good ICRC
// under hdr.
func (p *packetPort) onePacket(hdr, roce []byte) bool {
	if len(roce) > MaxRoCELen {
		return false
	}
	_, err := bth.Parse(roce)
	return err == nil && p.rxSum.check(hdr, roce)
}

func (p *packetPort) deliverRuns(bufs []*Buf) int {
	n := p.runs.deliver(bufs, nil)
	if n > 0 {
		var t tally
		for _, b := range bufs[:n] {
			t[cRxPackets]++
			t[cRxBytes] += uint64(b.N)
		}
		p.stats.add(&t)
	}
	return n
}

// check verifies one received IP datagram, the ICRC over its real headers
// included, and moves its RoCE part to Headroom. A datagram that is a
// whole run is cut into packets that Recv delivers after the batch.
func (p *packetPort) check(b *Buf, d rxInfo, t *tally) bool {
	if pt, ok := parsePktType(d.name); ok && pt == unix.PACKET_OUTGOING {
		t[cRxOutgoing]++
		return false
	}
	start := Headroom - p.hl
	inBuf := len(b.Data) - start
	if d.flags&unix.MSG_TRUNC != 0 || d.n > inBuf+len(p.runs.over[d.slot]) {
		t[cRxTooLong]++
		return false
	}
	raw := b.Data[start : start+min(d.n, inBuf)]
	if d.n > inBuf {
		raw = p.runs.frame[:d.n]
		copy(raw, b.Data[start:])
		copy(raw[inBuf:], p.runs.over[d.slot])
	}
	h, ok := parseIPHeader(raw, p.local, p.cfg.Port)
	if !ok {
		t[cRxBadHeader]++
		return false
	}
	roce := raw[h.hdrLen:h.end]
	if len(roce) < minRoCELen {
		t[cRxShort]++
		return false
	}
	if p.v6 && !d.ctrl.csumDone && !udp6ChecksumOK(raw[:h.hdrLen], roce) {
		t[cRxUDPChecksum]++
		return false
	}
	if !p.onePacket(raw[:h.hdrLen], roce) {
		if run, bad := p.runs.cut(&p.rxSum, raw, h, p.tap.Load()); run {
			t[cRxICRCErrors] += uint64(bad)
			return false
		}
		switch _, err := bth.Parse(roce); {
		case len(roce) > MaxRoCELen:
			t[cRxTooLong]++
		case err != nil:
			t[cRxMalformed]++
		default:
			t[cRxICRCErrors]++
			if tp := p.tap.Load(); tp != nil {
				tp.Packet(TapICRCError, raw[:h.hdrLen], roce, ICRCUnchecked, 0)
			}
		}
		return false
	}
	if tp := p.tap.Load(); tp != nil {
		tp.Packet(TapReceived, raw[:h.hdrLen], roce, ICRCVerified, 0)
	}
	if start+h.hdrLen != Headroom {
		copy(b.Data[Headroom:], roce)
	}
	b.N = len(roce)
	b.Peer, b.PeerPort, b.TOS, b.IPID = h.env.Src, h.env.SrcPort, h.env.TOS, h.env.ID
	b.SrcPort, b.Flip = 0, 0
	b.ICRC = ICRCVerified
	return true
}
