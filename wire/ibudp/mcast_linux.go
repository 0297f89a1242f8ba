package ibudp

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/rnicd/rnicd/wire/bth"
)

// mcastRx is a ModeUDP port's multicast receive side: a socket per joined
// group, bound to the group's address and port 4791 (SO_REUSEADDR, so
// that every rnicd of the host that joins the group gets its copy, as
// every rxe of a host does), and an epoll set over them that
// RecvMulticast waits in. It is made at the first join.
type mcastRx struct {
	mu      sync.Mutex // guards everything below; never held in EpollWait
	epfd    int
	wake    int // eventfd: Close wakes a RecvMulticast waiting in epoll
	groups  map[netip.Addr]*mcastSock
	byTag   map[uint64]*mcastSock
	tag     uint64
	waiting bool // a RecvMulticast waits in epoll: it closes epfd and wake if the port closes
	closed  bool
	sum     icrc
	oob     []byte
	events  []unix.EpollEvent
	hdr     [bth.MaxEnvelopeLen]byte // synthesized headers for the tap
}

type mcastSock struct {
	fd    int
	group netip.Addr
}

// wakeTag is the eventfd's epoll tag; sockets' tags start at 1.
const wakeTag = 0

func (u *udpPort) mcastState() (*mcastRx, error) {
	if u.mc != nil {
		return u.mc, nil
	}
	if u.mcClosed {
		return nil, net.ErrClosed
	}
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(epfd)
		return nil, os.NewSyscallError("eventfd", err)
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN}
	setEpollTag(&ev, wakeTag)
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, wake, &ev); err != nil {
		unix.Close(epfd)
		unix.Close(wake)
		return nil, os.NewSyscallError("epoll_ctl", err)
	}
	u.mc = &mcastRx{epfd: epfd, wake: wake, groups: map[netip.Addr]*mcastSock{}, byTag: map[uint64]*mcastSock{},
		oob: make([]byte, ctrlLen), events: make([]unix.EpollEvent, 16)}
	return u.mc, nil
}

func setEpollTag(ev *unix.EpollEvent, tag uint64) {
	ev.Fd, ev.Pad = int32(uint32(tag)), int32(uint32(tag>>32))
}

func epollTag(ev *unix.EpollEvent) uint64 { return uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32 }

// JoinMulticast joins group on the port's interface (Multicaster).
func (u *udpPort) JoinMulticast(group netip.Addr) error {
	group = group.Unmap()
	if !group.IsMulticast() {
		return fmt.Errorf("ibudp: join %v: not a multicast address", group)
	}
	if group.Is4() == u.v6 {
		return fmt.Errorf("ibudp: join %v: the port %v is of the other address family", group, u.cfg.Addr)
	}
	u.mcMu.Lock()
	defer u.mcMu.Unlock()
	m, err := u.mcastState()
	if err != nil {
		return fmt.Errorf("ibudp: join %v: %w", group, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.groups[group]; ok {
		return fmt.Errorf("ibudp: join %v: joined already", group)
	}
	if len(m.groups) >= MaxMcastGroups {
		return fmt.Errorf("ibudp: join %v: the port has joined %d groups, the most it may", group, MaxMcastGroups)
	}
	fd, err := u.openGroupSocket(group)
	if err != nil {
		return fmt.Errorf("ibudp: join %v on %v: %w", group, u.cfg.Addr, err)
	}
	m.tag++
	s := &mcastSock{fd: fd, group: group}
	ev := unix.EpollEvent{Events: unix.EPOLLIN}
	setEpollTag(&ev, m.tag)
	if err := unix.EpollCtl(m.epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		unix.Close(fd)
		return fmt.Errorf("ibudp: join %v: %w", group, os.NewSyscallError("epoll_ctl", err))
	}
	m.groups[group], m.byTag[m.tag] = s, s
	return nil
}

// openGroupSocket opens the socket that receives group's datagrams: bound
// to the group's address, a member of the group on the port's interface
// only, and (IP_MULTICAST_ALL off) given no other group's datagrams,
// which Linux otherwise delivers to it for any socket of the host that
// joined them.
func (u *udpPort) openGroupSocket(group netip.Addr) (int, error) {
	bind := netip.AddrPortFrom(group, u.cfg.Port)
	setup := func(fd int) error {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
			return os.NewSyscallError("setsockopt SO_REUSEADDR", err)
		}
		var err error
		if u.v6 {
			err = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_ALL, 0)
			if err == nil {
				err = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_RECVTCLASS, 1)
			}
			if err == nil {
				err = unix.SetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_NO_CHECK6_RX, 1)
			}
			if err == nil {
				err = unix.SetsockoptIPv6Mreq(fd, unix.IPPROTO_IPV6, unix.IPV6_JOIN_GROUP,
					&unix.IPv6Mreq{Multiaddr: group.As16(), Interface: uint32(u.ifindex)})
			}
		} else {
			err = unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MULTICAST_ALL, 0)
			if err == nil {
				err = unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_RECVTOS, 1)
			}
			if err == nil {
				err = unix.SetsockoptIPMreqn(fd, unix.IPPROTO_IP, unix.IP_ADD_MEMBERSHIP,
					&unix.IPMreqn{Multiaddr: group.As4(), Address: u.cfg.Addr.As4(), Ifindex: int32(u.ifindex)})
			}
		}
		if err != nil {
			return os.NewSyscallError("setsockopt (multicast membership)", err)
		}
		return setBuffers(fd, u.cfg.RcvBuf, 0)
	}
	return openUDPSocket(bind, u.scope, false, setup)
}

// setMulticastIf makes fd send multicast datagrams out of the port's
// interface, from its address, and loop them back to this host's members
// (another rnicd beside this one, or this one's own QPs: rxe's multicast
// datagrams loop back too).
func (u *udpPort) setMulticastIf(fd int) error {
	if u.ifindex == 0 {
		return nil // no interface known (an MTU given instead): the routing table picks
	}
	var err error
	if u.v6 {
		err = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_IF, u.ifindex)
		if err == nil {
			err = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_LOOP, 1)
		}
	} else {
		err = unix.SetsockoptIPMreqn(fd, unix.IPPROTO_IP, unix.IP_MULTICAST_IF,
			&unix.IPMreqn{Address: u.cfg.Addr.As4(), Ifindex: int32(u.ifindex)})
		if err == nil {
			err = unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MULTICAST_LOOP, 1)
		}
	}
	if err != nil {
		return fmt.Errorf("ibudp: setsockopt multicast interface: %w", err)
	}
	return nil
}

// LeaveMulticast leaves a joined group (Multicaster).
func (u *udpPort) LeaveMulticast(group netip.Addr) error {
	group = group.Unmap()
	u.mcMu.Lock()
	m := u.mc
	u.mcMu.Unlock()
	if m == nil {
		return fmt.Errorf("ibudp: leave %v: not joined", group)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.groups[group]
	if !ok || m.closed {
		return fmt.Errorf("ibudp: leave %v: not joined", group)
	}
	delete(m.groups, group)
	for t, v := range m.byTag {
		if v == s {
			delete(m.byTag, t)
		}
	}
	// Closing the socket takes it out of the epoll set and the group.
	unix.Close(s.fd)
	return nil
}

// closeMulticast closes the groups' sockets and wakes RecvMulticast;
// no group is joined after it.
func (u *udpPort) closeMulticast() {
	u.mcMu.Lock()
	defer u.mcMu.Unlock()
	u.mcClosed = true
	m := u.mc
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return
	}
	m.closed = true
	for g, s := range m.groups {
		unix.Close(s.fd)
		delete(m.groups, g)
	}
	clear(m.byTag)
	if m.waiting {
		// The waiter closes them when it wakes: closing an epoll fd
		// does not wake a thread waiting in it.
		unix.Write(m.wake, []byte{1, 0, 0, 0, 0, 0, 0, 0})
		return
	}
	unix.Close(m.epfd)
	unix.Close(m.wake)
}

// RecvMulticast waits for datagrams of the joined groups (Multicaster).
func (u *udpPort) RecvMulticast(bufs []*Buf) (int, error) {
	if err := CheckRecvBufs(bufs); err != nil {
		return 0, err
	}
	u.mcMu.Lock()
	m, err := u.mcastState()
	u.mcMu.Unlock()
	if err != nil {
		return 0, fmt.Errorf("ibudp: recv multicast: %w", err)
	}
	for {
		m.mu.Lock()
		if m.closed {
			m.mu.Unlock()
			return 0, fmt.Errorf("ibudp: recv multicast: %w", net.ErrClosed)
		}
		m.waiting = true
		m.mu.Unlock()
		ne, err := unix.EpollWait(m.epfd, m.events, -1)
		m.mu.Lock()
		m.waiting = false
		if m.closed {
			unix.Close(m.epfd)
			unix.Close(m.wake)
			m.mu.Unlock()
			return 0, fmt.Errorf("ibudp: recv multicast: %w", net.ErrClosed)
		}
		if err != nil && err != unix.EINTR {
			m.mu.Unlock()
			return 0, fmt.Errorf("ibudp: recv multicast: %w", os.NewSyscallError("epoll_wait", err))
		}
		n := 0
		var t tally
		for i := 0; i < ne && n < len(bufs); i++ {
			s := m.byTag[epollTag(&m.events[i])]
			if s == nil {
				continue // the wake-up, or a group left since
			}
			for n < len(bufs) {
				ok, more := u.recvGroup(m, s, bufs[n], &t)
				if ok {
					n++
				}
				if !more {
					break
				}
			}
		}
		m.mu.Unlock()
		u.stats.add(&t)
		if n > 0 {
			return n, nil
		}
	}
}

// recvGroup takes one datagram off s's socket into b and checks it: ok if
// b holds a packet, more if the socket may hold another. m.mu is held.
func (u *udpPort) recvGroup(m *mcastRx, s *mcastSock, b *Buf, t *tally) (ok, more bool) {
	b.reset()
	n, oobn, flags, from, err := unix.Recvmsg(s.fd, b.Data[Headroom:], m.oob, unix.MSG_DONTWAIT)
	if err != nil {
		return false, false
	}
	var peer netip.Addr
	var peerPort uint16
	switch sa := from.(type) {
	case *unix.SockaddrInet4:
		peer, peerPort = netip.AddrFrom4(sa.Addr), uint16(sa.Port)
	case *unix.SockaddrInet6:
		peer, peerPort = netip.AddrFrom16(sa.Addr), uint16(sa.Port)
	default:
		t[cRxBadHeader]++
		return false, true
	}
	switch {
	case flags&unix.MSG_TRUNC != 0 || n > MaxRoCELen:
		t[cRxTooLong]++
		return false, true
	case n < minRoCELen:
		t[cRxShort]++
		return false, true
	}
	b.N = n
	if _, err := bth.Parse(b.RoCE()); err != nil {
		t[cRxMalformed]++
		return false, true
	}
	tos := parseRxCtrl(m.oob[:oobn]).tos
	env := bth.Envelope{Src: peer, Dst: s.group, SrcPort: peerPort, DstPort: u.cfg.Port, TOS: tos, TTL: defaultTTL}
	b.Peer, b.PeerPort, b.TOS, b.Dst = peer, peerPort, tos, s.group
	if !verifyICRC(&m.sum, &env, b, t) {
		m.tapRecv(u, TapICRCError, &env, b)
		return false, true
	}
	t[cRxPackets]++
	t[cRxBytes] += uint64(n)
	m.tapRecv(u, TapReceived, &env, b)
	return true, true
}

// tapRecv is udpPort.tapRecv with the multicast side's own header room.
func (m *mcastRx) tapRecv(u *udpPort, at TapPoint, env *bth.Envelope, b *Buf) {
	if t := u.tap.Load(); t != nil {
		roce := b.RoCE()
		t.Packet(at, m.hdr[:env.Put(m.hdr[:], len(roce))], roce, b.ICRC, 0)
	}
}

var _ Multicaster = (*udpPort)(nil)
