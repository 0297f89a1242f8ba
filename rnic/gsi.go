package rnic

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/rnic/dma"
	"github.com/rnicd/rnicd/rnic/qpmgr"
)

// The General Services Interface: QP1 (IBTA 13.5.1), the UD QP every port
// has for management datagrams, which the Communication Manager's MADs
// use. rxe treats QP1 as a UD QP of type GSI that only sends with the GSI
// Q_Key and only accepts it (rxe_req.c, rxe_recv.c check_keys); here it is
// a UD QP the device creates at Open with QPN 1 and Q_Key 0x80010000, so
// the receive path's Q_Key check applies to it unchanged. It belongs to
// the device (in rnicd, the daemon's CM agent): an application can neither
// create a QP numbered 1 (QPNs are handed out from qpmgr.FirstQPN) nor
// post to, modify or destroy this one (ErrGSI), and Device.QPs leaves it out.

// GSI constants (IBTA 13.5.1, 10.2.4).
const (
	GSIQPN  = 1
	GSIQKey = 0x80010000
	MADLen  = 256 // every GSI datagram, IBTA 13.4.2
)

const (
	// gsiRecvSlots receive WQEs are kept posted: Linux's MAD layer posts
	// IB_MAD_QP_RECV_SIZE (512) on QP1, where 64 dropped most of a burst
	// of REQs the CM agent had not yet taken. What still finds no WQE is
	// counted in the device's drop_no_recv_wqe.
	gsiRecvSlots = 512
	// gsiSlots sends may be in flight: as many as the receives, so that
	// the answers to a burst the receives took (a REJ or REP each) are
	// not refused while the first are still leaving. Linux posts 128 and
	// queues the rest in software; one refused here is counted in
	// cm_tx_errors and, if it is retried, resent by its timer.
	gsiSlots   = gsiRecvSlots
	gsiGRHLen  = 40                 // the GRH area a UD receive fills first
	gsiRecvLen = gsiGRHLen + MADLen // one receive slot
	// gsiPD is the GSI's protection domain, outside what AllocPD hands
	// out (from 1 up), so no application's rkey reaches its buffers.
	gsiPD = dma.PD(^uint32(0))
	gsiVA = 0x1000 // the address its buffers answer to, in its own PD
)

// ErrGSI is returned when an application's verb names QP1.
var ErrGSI = errors.New("rnic: QP1 (GSI) belongs to the device's CM agent")

// GSI is a device's QP1 as its owner (the CM agent) sees it: send a MAD
// to a port's QP1, receive the MADs sent to this one.
type GSI struct {
	d      *Device
	qp     *qpmgr.QP
	sendCQ *qpmgr.CQ
	recvCQ *qpmgr.CQ
	mr     *dma.MR
	mem    []byte // gsiRecvSlots receive slots, then gsiSlots send slots of MADLen

	mu   sync.Mutex // serialises senders: the free-slot list and the send CQ
	free []int      // free send slots
	wcs  [gsiSlots]ib.WC

	// RecvErrors counts datagrams QP1 could not take (longer than a MAD).
	RecvErrors atomic.Uint64
}

// newGSI creates QP1 and brings it to RTS with its receives posted.
func newGSI(d *Device) (*GSI, error) {
	g := &GSI{d: d, sendCQ: qpmgr.NewCQ(gsiSlots), recvCQ: qpmgr.NewCQ(gsiRecvSlots),
		mem: make([]byte, gsiRecvSlots*gsiRecvLen+gsiSlots*MADLen)}
	var err error
	if g.mr, err = d.dma.Register(gsiPD, g.mem, gsiVA, ib.AccessLocalWrite); err != nil {
		return nil, fmt.Errorf("rnic: GSI memory: %w", err)
	}
	g.qp, err = qpmgr.New(qpmgr.Config{
		QPN: GSIQPN, Type: ib.QPTypeUD, PD: gsiPD, SendCQ: g.sendCQ, RecvCQ: g.recvCQ,
		Caps:    ib.QPCap{MaxSendWR: gsiSlots, MaxRecvWR: gsiRecvSlots, MaxSendSGE: 1, MaxRecvSGE: 1},
		PortMTU: d.port.MTU(), Counters: d.pipes.countersOf(GSIQPN), Kick: d.pipes.kick,
	})
	if err != nil {
		return nil, fmt.Errorf("rnic: GSI QP: %w", err)
	}
	for _, step := range []struct {
		attr ib.QPAttr
		mask ib.AttrMask
	}{
		{ib.QPAttr{State: ib.QPSInit, QKey: GSIQKey, PortNum: 1}, ib.AttrState | ib.AttrPKeyIndex | ib.AttrPort | ib.AttrQKey},
		{ib.QPAttr{State: ib.QPSRTR}, ib.AttrState},
		{ib.QPAttr{State: ib.QPSRTS}, ib.AttrState | ib.AttrSQPSN},
	} {
		if err := g.qp.Modify(&step.attr, step.mask); err != nil {
			return nil, fmt.Errorf("rnic: GSI QP to %v: %w", step.attr.State, err)
		}
	}
	for i := range gsiRecvSlots {
		if err := g.postRecv(i); err != nil {
			return nil, err
		}
	}
	for i := range gsiSlots {
		g.free = append(g.free, i)
	}
	d.qps.Insert(g.qp)
	return g, nil
}

func (g *GSI) postRecv(slot int) error {
	wr := ib.RecvWR{WRID: uint64(slot), SGL: []ib.SGE{{Addr: gsiVA + uint64(slot*gsiRecvLen), Length: gsiRecvLen, LKey: g.mr.LKey}}}
	g.qp.Lock()
	_, err := g.qp.RQ.Post([]ib.RecvWR{wr})
	g.qp.Unlock()
	return err
}

// GSI returns the device's QP1.
func (d *Device) GSI() *GSI { return d.gsi }

// Addr is the address of the port QP1 serves: its GID is the one CM
// peers name as ours.
func (g *GSI) Addr() netip.Addr { return g.d.port.Addr() }

// QP returns QP1 itself, for tests and for showing it.
func (g *GSI) QP() *qpmgr.QP { return g.qp }

// SendMAD sends a 256-byte MAD to QP1 of the port whose address is to,
// with the GSI Q_Key and the default P_Key (a UD SEND ONLY from QP1, as
// rxe sends the kernel CM's MADs). It fails, and the caller's retry timer
// covers the loss, when gsiSlots sends are still in flight.
func (g *GSI) SendMAD(to netip.Addr, mad []byte) error {
	if len(mad) != MADLen {
		return fmt.Errorf("rnic: a MAD is %d bytes, not %d", MADLen, len(mad))
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, wc := range g.wcs[:g.sendCQ.Poll(g.wcs[:])] {
		g.free = append(g.free, int(wc.WRID))
	}
	if len(g.free) == 0 {
		return errors.New("rnic: GSI send queue full")
	}
	slot := g.free[len(g.free)-1]
	g.free = g.free[:len(g.free)-1]
	off := gsiRecvSlots*gsiRecvLen + slot*MADLen
	copy(g.mem[off:off+MADLen], mad)
	wr := ib.SendWR{
		WRID: uint64(slot), Opcode: ib.WRSend, Flags: ib.SendSignaled,
		SGL:       []ib.SGE{{Addr: gsiVA + uint64(off), Length: MADLen, LKey: g.mr.LKey}},
		AH:        &ib.AH{DGID: to.As16(), HopLimit: 64},
		RemoteQPN: GSIQPN, RemoteQKey: GSIQKey,
	}
	if err := g.d.postSend(g.qp, []ib.SendWR{wr}); err != nil {
		g.free = append(g.free, slot)
		return err
	}
	return nil
}

// RecvMAD copies the next MAD QP1 received into mad (MADLen bytes) and
// returns the address and QP it came from and how many bytes came; ok is
// false when none is waiting (Ready says when one may be). A datagram
// shorter than a MAD comes zero-padded with n saying its length, for the
// caller to refuse; one longer than a MAD did not fit the receive slot and
// is skipped, counted in RecvErrors. RecvMAD has one caller at a time.
func (g *GSI) RecvMAD(mad []byte) (from netip.Addr, srcQP uint32, n int, ok bool) {
	var wc [1]ib.WC
	for g.recvCQ.Poll(wc[:]) == 1 {
		slot := int(wc[0].WRID)
		b := g.mem[slot*gsiRecvLen : (slot+1)*gsiRecvLen]
		ok = wc[0].Status == ib.WCSuccess
		if ok {
			// The GRH area: an IPv4 header in its last 20 bytes, or an
			// IPv6 header (rx.putGRH).
			if b[20] == 0x45 {
				from = netip.AddrFrom4([4]byte(b[32:36]))
			} else {
				from = netip.AddrFrom16([16]byte(b[8:24]))
			}
			n = max(int(wc[0].ByteLen)-gsiGRHLen, 0)
			clear(mad[:MADLen])
			copy(mad[:MADLen], b[gsiGRHLen:gsiGRHLen+min(n, MADLen)])
			srcQP = wc[0].SrcQP
		} else {
			g.RecvErrors.Add(1)
		}
		if err := g.postRecv(slot); err != nil {
			g.RecvErrors.Add(1) // cannot happen: the slot was just taken
		}
		if ok {
			return from, srcQP, n, true
		}
	}
	return netip.Addr{}, 0, 0, false
}

// Ready is signalled when a MAD may be waiting for RecvMAD.
func (g *GSI) Ready() <-chan struct{} { return g.recvCQ.Ready() }
