package ibudp

import (
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/rnicd/rnicd/wire/bth"
)

// sockPort is what both modes share: the configuration, the counters, the
// batch machinery of each direction and the skeletons of Send and Recv.
type sockPort struct {
	cfg   Config
	mtu   int
	stats counters

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error

	txMu    sync.Mutex // serializes Send; guards tx and txSum
	tx      *batchIO
	txSum   icrc
	rxMu    sync.Mutex // serializes Recv; guards rx, rxSum and rxTally
	rx      *batchIO
	rxSum   icrc
	rxTally tally // a field, not a local: check is called indirectly, so its arguments escape

	tap          TapSlot
	txHdr, rxHdr [bth.MaxEnvelopeLen]byte // synthesized headers for the tap (ModeUDP)
}

func (s *sockPort) Addr() netip.Addr { return s.cfg.Addr }
func (s *sockPort) MTU() int         { return s.mtu }
func (s *sockPort) Stats() Stats     { return s.stats.snapshot() }

// close marks the port closed and releases its sockets with release, once.
func (s *sockPort) close(release func() error) error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		if err := release(); err != nil {
			s.closeErr = fmt.Errorf("ibudp: closing %v port: %w", s.cfg.Mode, err)
		}
	})
	return s.closeErr
}

// send transmits bufs in batches of cfg.Batch. prepare fills message k of
// s.tx.m for b (sealing the ICRC) or reports false if b cannot be sent;
// overhead is the length of the headers each message carries in front of
// the RoCE part.
func (s *sockPort) send(bufs []*Buf, overhead int, prepare func(b *Buf, k int) bool) error {
	s.txMu.Lock()
	defer s.txMu.Unlock()
	for len(bufs) > 0 {
		if s.closed.Load() {
			return closedError("send", true, nil)
		}
		chunk := bufs[:min(len(bufs), s.cfg.Batch)]
		bufs = bufs[len(chunk):]
		var t tally
		k := 0
		for _, b := range chunk {
			if !b.valid() || !prepare(b, k) {
				t[cTxInvalid]++
				continue
			}
			k++
		}
		err := s.sendPrepared(k, overhead, &t, nil)
		s.tx.m.release(k)
		s.stats.add(&t)
		if err != nil {
			return err
		}
	}
	return nil
}

// sendPrepared sends s.tx.m.hdrs[:k], skipping and counting the messages
// the kernel refuses. segs, if not nil, is how many packets each message
// carries (UDP_SEGMENT runs); overhead is per packet.
func (s *sockPort) sendPrepared(k, overhead int, t *tally, segs []int) error {
	pkts := func(i int) int {
		if segs == nil {
			return 1
		}
		return segs[i]
	}
	for off := 0; off < k; {
		n, errno, err := s.tx.send(off, k)
		if err != nil {
			return closedError("send", s.closed.Load(), err)
		}
		if n > 0 {
			for i, h := range s.tx.m.hdrs[off : off+n] {
				t[cTxBytes] += uint64(int(h.Len) - overhead*pkts(off+i))
				t[cTxPackets] += uint64(pkts(off + i))
			}
			t[cTxBatches]++
			off += n
			continue
		}
		if sendFatal(errno) {
			return closedError("send", s.closed.Load(), fmt.Errorf("sendmmsg: %w", errno))
		}
		t[cTxErrors] += uint64(pkts(off))
		s.stats.lastErrno.Store(uintptr(errno))
		off++
	}
	return nil
}

// rxInfo is what the kernel told about one received datagram.
type rxInfo struct {
	slot     int    // index of the message in the batch
	n, flags int    // length; MSG_TRUNC and the like
	name     []byte // source address
	ctrl     rxCtrl
}

// recv receives into bufs until at least one datagram passes check, which
// verifies it and fills in its Buf (counting a drop in t if not). Each
// datagram lands front bytes before Headroom, room for headers the socket
// delivers in front of the RoCE part. The good Bufs are moved to the front
// of bufs. Unless wait, it returns 0 when nothing waits on the socket.
func (s *sockPort) recv(bufs []*Buf, front int, wait bool, check func(b *Buf, d rxInfo, t *tally) bool) (int, error) {
	if len(bufs) == 0 {
		return 0, nil
	}
	if err := CheckRecvBufs(bufs); err != nil {
		return 0, err
	}
	s.rxMu.Lock()
	defer s.rxMu.Unlock()
	m := s.rx.m
	vlen := min(len(bufs), s.cfg.Batch)
	for {
		for i, b := range bufs[:vlen] {
			m.set(i, b.Data[Headroom-front:], nameLen, ctrlLen)
		}
		n, err := s.rx.recv(vlen, wait)
		m.release(vlen)
		if err != nil {
			return 0, closedError("recv", s.closed.Load(), err)
		}
		if n == 0 {
			return 0, nil
		}
		if good := s.accept(bufs[:n], check); good > 0 {
			return good, nil
		}
	}
}

func (s *sockPort) accept(bufs []*Buf, check func(b *Buf, d rxInfo, t *tally) bool) int {
	t := &s.rxTally
	*t = tally{}
	var drops uint32
	haveDrops := false
	good := 0
	for i, b := range bufs {
		d := rxInfo{slot: i}
		var ctrl []byte
		d.n, d.flags, d.name, ctrl = s.rx.m.received(i)
		d.ctrl = parseRxCtrl(ctrl)
		if d.ctrl.haveDrops {
			drops, haveDrops = d.ctrl.drops, true
		}
		if !check(b, d, t) {
			continue
		}
		t[cRxPackets]++
		t[cRxBytes] += uint64(b.N)
		bufs[good], bufs[i] = bufs[i], bufs[good]
		good++
	}
	if len(bufs) > 0 {
		t[cRxBatches]++
	}
	if haveDrops {
		s.stats.kernelDrops.Store(uint64(drops))
	}
	s.stats.add(t)
	return good
}

// setBuffers sets the socket buffer sizes, beyond net.core.[rw]mem_max if
// the process may (SO_*BUFFORCE), else as far as the limit allows.
func setBuffers(fd, rcv, snd int) error {
	if rcv > 0 {
		if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, rcv) != nil {
			if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, rcv); err != nil {
				return fmt.Errorf("ibudp: setsockopt SO_RCVBUF: %w", err)
			}
		}
	}
	if snd > 0 {
		if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, snd) != nil {
			if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, snd); err != nil {
				return fmt.Errorf("ibudp: setsockopt SO_SNDBUF: %w", err)
			}
		}
	}
	return nil
}

// peerOK reports whether a can be sent to from a socket of the family v6
// says, and returns it in that family.
func peerOK(a netip.Addr, v6 bool) (netip.Addr, bool) {
	if !a.IsValid() || a.IsUnspecified() {
		return a, false
	}
	if v6 {
		return a, a.Is6() && !a.Is4In6()
	}
	a = a.Unmap()
	return a, a.Is4()
}
