package ibudp

import (
	"encoding/binary"

	"golang.org/x/sys/unix"

	"github.com/rnicd/rnicd/wire/bth"
)

// UDP generic segmentation offload (UDP_SEGMENT, Linux 4.18): one message
// of sendmmsg carries a run of datagrams of one size (the last may be
// shorter), and the kernel cuts it apart as late as it can, often only at
// the receiving socket. The stack is crossed once per run instead of once
// per packet, which is where a UDP sender spends its time. The packets of
// one RDMA message are such a run: one QP, one peer, MTU-sized payloads.
//
// The kernel gives the segments of a run IPv4 IDs counting up from the
// run's (0 for a DF datagram of an unconnected socket), and the ICRC
// covers the ID, so packet k of a run is sealed for ID k.
//
// A run's segments also share one TOS / traffic class: the kernel copies
// the message's IP header, which an IP_TOS / IPV6_TCLASS control message
// sets, to each. So the ECN codepoint (Buf.SetECN) goes per message, and a
// change of TOS ends a run (gsoRun). That keeps runs whole where it
// matters: DCQCN marks every data packet of a QP ECT(0) and only ACKs and
// CNPs Not-ECT, and those are single packets between runs, never inside
// one. Setting IP_TOS on the socket instead would cost a setsockopt per
// change and race with the other messages of the batch; a control message
// is 24 bytes the kernel parses per message, and is not written when TOS
// is 0 (BenchmarkPort/udp-ect0 measures it).
const (
	maxGSOSegs  = 64    // UDP_MAX_SEGMENTS
	maxGSOBytes = 65507 // the most UDP payload an IPv4 datagram holds
)

// gsoSupported reports whether the kernel takes UDP_SEGMENT on fd.
func gsoSupported(fd int) bool {
	_, err := unix.GetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_SEGMENT)
	return err == nil
}

// putGSOCmsg writes a UDP_SEGMENT control message for segments of size
// bytes into b and returns its length, 0 if b is too short.
func putGSOCmsg(b []byte, size int) int {
	space := cmsgAlignUp(cmsgHdrLen + 2)
	if len(b) < space {
		return 0
	}
	clear(b[:space])
	putCmsgLen(b, cmsgHdrLen+2)
	binary.NativeEndian.PutUint32(b[cmsgHdrLen-8:], uint32(unix.SOL_UDP))
	binary.NativeEndian.PutUint32(b[cmsgHdrLen-4:], uint32(unix.UDP_SEGMENT))
	binary.NativeEndian.PutUint16(b[cmsgHdrLen:], uint16(size))
	return space
}

// gsoRun returns how many Bufs from the start of bufs go out as one run
// behind bufs[0]: same peer and TOS, valid, the size of the first except for
// a shorter last one, within the kernel's limits. A packet longer than the
// next (a FIRST with its RETH before the MIDDLEs) goes alone, so that the
// run starts with the packets that share a size.
//
// With small (unless Config.FullMTURunsOnly) the first may be of any size,
// so that 64-byte WRITEs to one peer are runs too; without, it must carry a
// full IB MTU of payload.
func gsoRun(bufs []*Buf, small bool) int {
	first := bufs[0]
	// The size and the opcode are all fullMTU reads: the Buf's own bytes
	// serve, without copying in a lent payload (RoCE would).
	if !small && !fullMTU(first.Data[Headroom:Headroom+first.N]) {
		return 1
	}
	size, total := first.N, first.N
	n := 1
	for n < len(bufs) && n < maxGSOSegs {
		b := bufs[n]
		if !b.valid() || b.Peer != first.Peer || b.TOS != first.TOS || b.N > size || total+b.N > maxGSOBytes {
			break
		}
		if n == 1 && b.N < size && len(bufs) > 2 && bufs[2].valid() && bufs[2].N == b.N {
			break
		}
		total += b.N
		n++
		if b.N < size {
			break // a shorter datagram ends the run
		}
	}
	return n
}

// sendGSO is Send with runs of packets handed to the kernel as one message
// each.
func (u *udpPort) sendGSO(bufs []*Buf) error {
	u.txMu.Lock()
	defer u.txMu.Unlock()
	m := u.tx.m
	for len(bufs) > 0 {
		if u.closed.Load() {
			return closedError("send", true, nil)
		}
		var t tally
		// Messages, iovecs and packets used: at most Batch packets a
		// call, as without lent payloads (iovsPerBuf iovecs each).
		k, iov, pkts := 0, 0, 0
		for len(bufs) > 0 && k < len(m.hdrs) && pkts < len(m.hdrs) {
			b := bufs[0]
			if !b.valid() {
				t[cTxInvalid]++
				bufs = bufs[1:]
				continue
			}
			peer, ok := peerOK(b.Peer, u.v6)
			if !ok {
				t[cTxInvalid]++
				bufs = bufs[1:]
				continue
			}
			n := min(gsoRun(bufs, !u.cfg.FullMTURunsOnly), len(m.hdrs)-pkts)
			env := bth.Envelope{
				Src: u.cfg.Addr, Dst: peer,
				SrcPort: u.cfg.Port, DstPort: u.cfg.RemotePort,
				TOS: b.TOS, TTL: defaultTTL,
			}
			first := iov
			for j, s := range bufs[:n] {
				if !u.v6 {
					env.ID = uint16(j)
				}
				iov += u.sealInto(&env, s, m.iovs[iov:iov+iovsPerBuf])
			}
			nl := putSockaddr(m.name(k), peer, u.cfg.RemotePort, u.scope)
			ctrl := m.control(k)
			cl := 0
			if n > 1 {
				cl = putGSOCmsg(ctrl, b.N)
			}
			if b.TOS != 0 {
				cl += putTOSCmsg(ctrl[cl:], u.v6, b.TOS)
			}
			m.setv(k, first, iov-first, nl, cl)
			u.segs[k] = n
			k++
			pkts += n
			bufs = bufs[n:]
		}
		err := u.sendPrepared(k, 0, &t, u.segs)
		m.release(iov)
		u.stats.add(&t)
		if err != nil {
			return err
		}
	}
	return nil
}

// iovsPerBuf is the most iovecs one packet takes: its headers, a payload
// lent from registered memory, its pad and ICRC (Buf.SetPayloadRef).
const iovsPerBuf = 3

// sealInto seals b for env and points iovs at it, returning how many it
// used: one for a contiguous RoCE part, three for one whose payload is lent
// by reference, which goes to the kernel from where it lies. Sending from
// the registered memory spares the copy into the Buf that the kernel's own
// copy makes redundant: one of the two copies per byte rnicd made beyond
// TCP's (BENCHMARKS.md, "Sending from registered memory").
func (u *udpPort) sealInto(env *bth.Envelope, b *Buf, iovs []unix.Iovec) int {
	if t := u.tap.Load(); b.Flip == 0 && (t == nil || !wantsPayload(t)) {
		if head, payload, tail, ok := b.lentParts(); ok {
			u.txSum.sealEnvelopeParts(env, head, payload, tail)
			if t != nil {
				// The trace's tap: headers, length and ICRC only.
				roce := b.Data[Headroom : Headroom+b.N]
				t.Packet(TapSentHeaders, u.sentHeader(env, roce), roce, ICRCUnchecked, b.QPN)
			}
			n := 0
			for _, p := range [...][]byte{head, payload, tail} {
				if len(p) > 0 {
					iovs[n].Base = &p[0]
					iovs[n].SetLen(len(p))
					n++
				}
			}
			return n
		}
	}
	roce := b.RoCE()
	u.txSum.sealEnvelope(env, roce)
	b.ApplyFlip()
	if t := u.tap.Load(); t != nil {
		t.Packet(TapSent, u.sentHeader(env, roce), roce, ICRCUnchecked, b.QPN)
	}
	iovs[0].Base = &roce[0]
	iovs[0].SetLen(b.N)
	return 1
}
