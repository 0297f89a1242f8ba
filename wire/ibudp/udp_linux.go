package ibudp

import (
	"fmt"
	"io"
	"net/netip"
	"os"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/rnicd/rnicd/wire/bth"
	"github.com/rnicd/rnicd/wire/netif"
	"github.com/rnicd/rnicd/wire/steer"
)

// udpPort is a ModeUDP port: one unconnected UDP socket bound to
// Addr:Port. The kernel builds the IP and UDP headers; for an unconnected
// socket with IP_PMTUDISC_DO they carry DF and IPv4 ID 0, which is what the
// ICRC is sealed for.
type udpPort struct {
	sockPort
	sock  io.Closer
	v6    bool
	scope uint32 // sin6_scope_id for link-local peers
	// gso sends runs of packets as one UDP_SEGMENT message (gso_linux.go);
	// segs is how many packets each message of a batch carries.
	gso  bool
	segs []int
	// steer, with Config.Queues, opens more sockets of the port's group,
	// for queues of this process only.
	steer *steer.Group
	// gro receives runs the kernel coalesced (gro_linux.go): the slots'
	// overflow room and the held packets are in runs, the packets of this
	// batch's runs in groSegs.
	gro     bool
	runs    *runs
	groSegs []groSeg
	dgrams  []dgram
	free    []*Buf // scratch of spread
	order   []*Buf // scratch of spread
	counted []bool // scratch of deliverHeld
	// perDgram is how many packets the datagrams of the last batch held,
	// on average, rounded up; recvGRO asks for as many datagrams as the
	// caller's Bufs take at that rate (gro_linux.go).
	perDgram int
	// dry says the last recvGRO found the socket empty (gro_linux.go).
	dry bool
	// ifindex is the port's interface (0 if unknown), where it joins
	// multicast groups and sends their datagrams; mc is the groups'
	// receive side (mcast_linux.go), made at the first join, under mcMu.
	ifindex  int
	mcMu     sync.Mutex
	mc       *mcastRx
	mcClosed bool // the port closed: no more groups
}

// SteeringOf returns the steering of a port opened with Config.Queues
// above 1, nil for any other port.
func SteeringOf(p Port) *steer.Group {
	if u, ok := p.(*udpPort); ok {
		return u.steer
	}
	return nil
}

func openUDP(cfg Config, ifc netif.Interface, mtu int) (*udpPort, error) {
	u := &udpPort{sockPort: sockPort{cfg: cfg, mtu: mtu}, v6: cfg.Addr.Is6(), ifindex: ifc.Index}
	if u.v6 && cfg.Addr.IsLinkLocalUnicast() {
		u.scope = uint32(ifc.Index)
	}
	bind := netip.AddrPortFrom(cfg.Addr, cfg.Port)
	setup := func(fd int) error {
		u.gso = !cfg.NoGSO && gsoSupported(fd)
		err := setUDPOptions(fd, u.v6, !u.gso, cfg)
		if err == nil {
			err = u.setMulticastIf(fd)
		}
		u.gro = err == nil && !cfg.NoGSO && enableGRO(fd)
		return err
	}
	fd, err := cfg.SocketFD, error(nil)
	if fd > 0 {
		// A socket of a steered port's group (steer.Group.Queue): bound,
		// and its buffers sized already when Queue opened it with the
		// port's options.
		cfg.RcvBuf, cfg.SndBuf = 0, 0
		if err = setup(fd); err != nil {
			unix.Close(fd)
		}
	} else {
		if cfg.Queues > 1 {
			// A reuseport bind would join another steered port's group
			// on this address, as a second rnicd would: make sure the
			// address is free, as a plain bind does.
			probe, perr := openUDPSocket(bind, u.scope, false, func(int) error { return nil })
			if perr != nil {
				return nil, fmt.Errorf("ibudp: opening UDP %s: %w", bind, perr)
			}
			unix.Close(probe)
		}
		fd, err = openUDPSocket(bind, u.scope, cfg.Queues > 1, setup)
	}
	if err != nil {
		return nil, fmt.Errorf("ibudp: opening UDP %s: %w", bind, err)
	}
	if cfg.Queues > 1 {
		queueSetup := func(fd int) error {
			if err := setUDPOptions(fd, u.v6, !u.gso, cfg); err != nil {
				return err
			}
			return u.setMulticastIf(fd)
		}
		openQueue := func() (int, error) { return openUDPSocket(bind, u.scope, true, queueSetup) }
		if u.steer, err = steer.New(fd, cfg.Queues, openQueue); err != nil {
			unix.Close(fd)
			return nil, err
		}
	}
	rc, closer, err := socketIO(fd, cfg.WaitInKernel, "ibudp-udp")
	if err != nil {
		if u.steer != nil {
			u.steer.Close()
		}
		return nil, fmt.Errorf("ibudp: UDP %s: %w", bind, err)
	}
	u.sock = closer
	u.tx = newBatchIO(rc, newMmsgs(cfg.Batch, txCtrlLen))
	u.tx.m.iovs = make([]unix.Iovec, iovsPerBuf*cfg.Batch) // sendGSO: lent payloads
	u.segs = make([]int, cfg.Batch)
	u.rx = newBatchIO(rc, newMmsgs(cfg.Batch, ctrlLen))
	if u.gro {
		u.rx.m.iovs = make([]unix.Iovec, 2*cfg.Batch)
		u.runs = newRuns(cfg.Batch)
		u.groSegs = make([]groSeg, 0, cfg.Batch*maxGSOSegs)
		u.dgrams = make([]dgram, 0, cfg.Batch)
		u.counted = make([]bool, cfg.Batch)
	}
	return u, nil
}

// openUDPSocket opens a non-blocking UDP socket, sets its options with
// setup and binds it to addr, as net.ListenPacket would but without
// handing it to the runtime's poller (see kfd).
func openUDPSocket(addr netip.AddrPort, scope uint32, reusePort bool, setup func(fd int) error) (int, error) {
	family := unix.AF_INET6
	var sa unix.Sockaddr = &unix.SockaddrInet6{Addr: addr.Addr().As16(), Port: int(addr.Port()), ZoneId: scope}
	if addr.Addr().Is4() {
		family = unix.AF_INET
		sa = &unix.SockaddrInet4{Addr: addr.Addr().As4(), Port: int(addr.Port())}
	}
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return -1, os.NewSyscallError("socket", err)
	}
	if family == unix.AF_INET6 {
		err = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 1)
	}
	if err == nil && reusePort {
		err = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
	}
	if err == nil {
		err = setup(fd)
	}
	if err == nil {
		if err = unix.Bind(fd, sa); err != nil {
			err = os.NewSyscallError("bind", err)
		}
	}
	if err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// setUDPOptions makes a UDP socket send with DF (hence IPv4 ID 0) and, for
// IPv4 with noCheck, UDP checksum 0 (the kernel refuses UDP_SEGMENT on such
// a socket, so with GSO the checksum is left to the NIC's offload); report the TOS/traffic class and kernel drops of
// received datagrams; and have large buffers. IPv6 sockets also accept a
// zero UDP checksum, as rxe sends.
func setUDPOptions(fd int, v6, noCheck bool, cfg Config) error {
	type opt struct {
		level, name, value int
		what               string
	}
	opts := []opt{
		{unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO, "IP_MTU_DISCOVER"},
		{unix.IPPROTO_IP, unix.IP_RECVTOS, 1, "IP_RECVTOS"},
	}
	if noCheck {
		opts = append(opts, opt{unix.SOL_SOCKET, unix.SO_NO_CHECK, 1, "SO_NO_CHECK"})
	}
	if v6 {
		opts = []opt{
			{unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_PMTUDISC_DO, "IPV6_MTU_DISCOVER"},
			{unix.IPPROTO_IPV6, unix.IPV6_RECVTCLASS, 1, "IPV6_RECVTCLASS"},
			{unix.IPPROTO_UDP, unix.UDP_NO_CHECK6_RX, 1, "UDP_NO_CHECK6_RX"},
		}
	}
	opts = append(opts, opt{unix.SOL_SOCKET, unix.SO_RXQ_OVFL, 1, "SO_RXQ_OVFL"})
	for _, o := range opts {
		if err := unix.SetsockoptInt(fd, o.level, o.name, o.value); err != nil {
			return fmt.Errorf("ibudp: setsockopt %s: %w", o.what, err)
		}
	}
	return setBuffers(fd, cfg.RcvBuf, cfg.SndBuf)
}

func (u *udpPort) Close() error {
	u.closeMulticast()
	if u.steer != nil {
		u.steer.Close()
	}
	return u.close(u.sock.Close)
}

func (u *udpPort) Send(bufs []*Buf) error {
	if u.gso {
		return u.sendGSO(bufs)
	}
	return u.send(bufs, 0, u.prepare)
}

// prepare seals b for the headers the kernel will write (ID 0, DF, the
// bound port) and points message k at it, with its TOS if it has one.
func (u *udpPort) prepare(b *Buf, k int) bool {
	peer, ok := peerOK(b.Peer, u.v6)
	if !ok {
		return false
	}
	env := bth.Envelope{
		Src: u.cfg.Addr, Dst: peer,
		SrcPort: u.cfg.Port, DstPort: u.cfg.RemotePort,
		TOS: b.TOS, TTL: defaultTTL,
	}
	roce := b.RoCE()
	u.txSum.sealEnvelope(&env, roce)
	b.ApplyFlip()
	if t := u.tap.Load(); t != nil {
		t.Packet(TapSent, u.sentHeader(&env, roce), roce, ICRCUnchecked, b.QPN)
	}
	m := u.tx.m
	nl := putSockaddr(m.name(k), peer, u.cfg.RemotePort, u.scope)
	cl := 0
	if b.TOS != 0 {
		cl = putTOSCmsg(m.control(k), u.v6, b.TOS)
	}
	m.set(k, roce, nl, cl)
	return true
}

func (u *udpPort) Recv(bufs []*Buf) (int, error) { return u.recvWait(bufs, true) }

// TryRecv is Recv that does not wait (Poller).
func (u *udpPort) TryRecv(bufs []*Buf) (int, error) { return u.recvWait(bufs, false) }

// WaitRecv waits, without holding the receive side, until a datagram is
// there (Poller).
func (u *udpPort) WaitRecv() error {
	if err := u.rx.waitReadable(); err != nil {
		return closedError("wait", u.closed.Load(), err)
	}
	return nil
}

// Pending reports whether packets of a coalesced datagram wait for the
// next TryRecv (Poller).
func (u *udpPort) Pending() bool {
	u.rxMu.Lock()
	defer u.rxMu.Unlock()
	return u.gro && u.runs.waiting()
}

func (u *udpPort) recvWait(bufs []*Buf, wait bool) (int, error) {
	if u.gro {
		return u.recvGRO(bufs, wait)
	}
	return u.recv(bufs, 0, wait, u.check)
}

// check verifies one received datagram and fills in b, counting a drop in
// t. A datagram the kernel coalesced (UDP_GRO) keeps its first packet in b;
// the others are listed for spread, which hands them out in order.
func (u *udpPort) check(b *Buf, d rxInfo, t *tally) bool {
	if !u.gro {
		return u.checkDatagram(b, d, t)
	}
	from := len(u.groSegs)
	ok := u.checkDatagram(b, d, t)
	u.dgrams = append(u.dgrams, dgram{b: b, ok: ok, from: from, to: len(u.groSegs)})
	return ok
}

func (u *udpPort) checkDatagram(b *Buf, d rxInfo, t *tally) bool {
	inBuf, over := len(b.Data)-Headroom, 0
	if u.gro {
		over = len(u.runs.over[d.slot])
	}
	g := d.ctrl.gro
	switch {
	case d.flags&unix.MSG_TRUNC != 0 || d.n > inBuf+over || (g == 0 && d.n > MaxRoCELen) || g > MaxRoCELen:
		t[cRxTooLong]++
		return false
	case d.n < minRoCELen:
		t[cRxShort]++
		return false
	}
	peer, peerPort, ok := parseSockaddr(d.name)
	if !ok {
		t[cRxBadHeader]++
		return false
	}
	b.N = d.n
	if g > 0 && d.n > g {
		for off := g; off < d.n; off += g {
			u.groSegs = append(u.groSegs, groSeg{b: b, slot: d.slot, off: off, n: min(g, d.n-off),
				peer: peer, peerPort: peerPort, tos: d.ctrl.tos})
		}
		b.N = g
	}
	// With GRO the batch's packets go out in another order than the
	// datagrams came (each one's first packet, then the rest of it:
	// spread), and the tap is shown them in that order, there.
	return u.checkPacket(b, peer, peerPort, d.ctrl.tos, !u.gro, t)
}

// rxEnvelope is the headers a datagram from peer had, as far as a UDP
// socket tells: the IPv4 ID is not among them.
func (u *udpPort) rxEnvelope(peer netip.Addr, peerPort uint16, tos uint8) bth.Envelope {
	return bth.Envelope{
		Src: peer, Dst: u.cfg.Addr.WithZone(""),
		SrcPort: peerPort, DstPort: u.cfg.Port,
		TOS: tos, TTL: defaultTTL,
	}
}

// checkPacket verifies the packet of b.N bytes in b that came from
// peer:peerPort with tos and fills in b. The ICRC is checked in one pass
// for the headers of an ID-0 datagram and, for IPv4, solved for the ID if
// that is not it.
func (u *udpPort) checkPacket(b *Buf, peer netip.Addr, peerPort uint16, tos uint8, show bool, t *tally) bool {
	if _, err := bth.Parse(b.RoCE()); err != nil {
		t[cRxMalformed]++
		return false
	}
	env := u.rxEnvelope(peer, peerPort, tos)
	b.Peer, b.PeerPort, b.TOS, b.Dst = peer, peerPort, tos, netip.Addr{}
	b.SrcPort, b.IPID, b.Flip = 0, 0, 0
	if !verifyICRC(&u.rxSum, &env, b, t) {
		u.tapRecv(TapICRCError, &env, b)
		return false
	}
	if show {
		u.tapRecv(TapReceived, &env, b)
	}
	return true
}

// showRecv shows the tap a good packet checkPacket did not show it, as it
// was received.
func (u *udpPort) showRecv(b *Buf) {
	if u.tap.Load() != nil {
		env := u.rxEnvelope(b.Peer, b.PeerPort, b.TOS)
		env.ID = b.IPID
		u.tapRecv(TapReceived, &env, b)
	}
}

// verifyICRC checks b's ICRC under the headers env describes, for any
// IPv4 ID, with sum: it sets b.ICRC (and b.IPID and env.ID to the ID
// found) and counts in t an ICRC error or a check that needed another ID.
func verifyICRC(sum *icrc, env *bth.Envelope, b *Buf, t *tally) bool {
	switch id, exact, ok := sum.checkEnvelopeAnyID(env, b.RoCE()); {
	case exact:
		b.ICRC = ICRCVerified
	case ok:
		t[cRxICRCAnyID]++
		b.ICRC, b.IPID = ICRCVerifiedAnyID, id
		env.ID = id
	default:
		t[cRxICRCErrors]++
		return false
	}
	return true
}

// sentHeader is the IP and UDP header the kernel writes in front of roce,
// for the tap: over IPv6 with the UDP checksum the kernel computes.
func (u *udpPort) sentHeader(env *bth.Envelope, roce []byte) []byte {
	h := u.txHdr[:env.Put(u.txHdr[:], len(roce))]
	if u.v6 {
		putUDP6Checksum(h, roce)
	}
	return h
}

// tapRecv shows a received datagram to the tap under the headers the
// kernel stripped, as far as the port knows them.
func (u *udpPort) tapRecv(at TapPoint, env *bth.Envelope, b *Buf) {
	if t := u.tap.Load(); t != nil {
		roce := b.RoCE()
		t.Packet(at, u.rxHdr[:env.Put(u.rxHdr[:], len(roce))], roce, b.ICRC, 0)
	}
}
