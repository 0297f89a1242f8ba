package rnic

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/rnic/dma"
	"github.com/rnicd/rnicd/rnic/qpmgr"
	"github.com/rnicd/rnicd/wire/ibudp"
	"github.com/rnicd/rnicd/wire/netif"
)

// The verbs objects, under the names libibverbs gives them: the blocks
// that own them (dma, qpmgr) are the device's inside, and the Device's
// methods hand them out. What a verb carries (WRs, WCs, attributes) is
// package ib's, under its own name.
type (
	PD  = dma.PD
	MR  = dma.MR
	CQ  = qpmgr.CQ
	SRQ = qpmgr.RecvQueue
	QP  = qpmgr.QP
	// SendRing is a QP's send queue in host memory, read by the device.
	SendRing = qpmgr.SendRing
	// RecvRing is a receive queue in host memory, read by the device.
	RecvRing = qpmgr.RecvRing
)

// Device limits (ibv_query_device).
const (
	MaxCQE = 1 << 20
)

// PortAttr describes the port (ibv_query_port, ibv_query_gid).
type PortAttr struct {
	Addr      netip.Addr
	GID       netif.GID
	ActiveMTU int
}

// QueryPort returns the port's address, GID and active MTU.
func (d *Device) QueryPort() PortAttr {
	a := d.port.Addr()
	return PortAttr{Addr: a, GID: netif.GIDFromAddr(a), ActiveMTU: d.port.MTU()}
}

// AllocPD allocates a protection domain (ibv_alloc_pd).
func (d *Device) AllocPD() PD {
	d.mu.Lock()
	defer d.mu.Unlock()
	pd := d.nextPD
	d.nextPD++
	return pd
}

// RegMR registers buf as a memory region answering to addresses va ..
// va+len(buf)-1 (ibv_reg_mr: va is the address the application uses in
// SGEs and hands its peer with the rkey).
func (d *Device) RegMR(pd PD, buf []byte, va uint64, access ib.Access) (*MR, error) {
	return d.dma.Register(pd, buf, va, access)
}

// DeregMR deregisters a memory region (ibv_dereg_mr).
func (d *Device) DeregMR(mr *MR) error { return d.dma.Deregister(mr.LKey) }

// CreateCQ creates a completion queue of n entries (ibv_create_cq).
func (d *Device) CreateCQ(n int) (*CQ, error) {
	if n < 1 || n > MaxCQE {
		return nil, fmt.Errorf("rnic: CQ size %d outside 1..%d", n, MaxCQE)
	}
	return qpmgr.NewCQ(n), nil
}

// CreateSRQ creates a shared receive queue (ibv_create_srq).
func (d *Device) CreateSRQ(pd PD, maxWR, maxSGE int) (*SRQ, error) {
	if maxWR < 1 || maxWR > ib.MaxQPWR || maxSGE < 1 || maxSGE > ib.MaxSGE {
		return nil, fmt.Errorf("rnic: SRQ of %d WRs x %d SGEs outside the device limits", maxWR, maxSGE)
	}
	return qpmgr.NewRecvQueue(maxWR, maxSGE), nil
}

// QPInitAttr is what CreateQP needs (ibv_qp_init_attr).
type QPInitAttr struct {
	PD     PD
	Type   ib.QPType
	SendCQ *CQ
	RecvCQ *CQ
	SRQ    *SRQ
	Caps   ib.QPCap
	SigAll bool
}

// CreateQP creates a queue pair in RESET (ibv_create_qp).
func (d *Device) CreateQP(a QPInitAttr) (*QP, error) {
	if a.PD == 0 {
		return nil, errors.New("rnic: create QP: no PD")
	}
	qpn, err := d.qps.Alloc()
	if err != nil {
		return nil, err
	}
	qp, err := qpmgr.New(qpmgr.Config{
		QPN: qpn, Type: a.Type, PD: a.PD, SendCQ: a.SendCQ, RecvCQ: a.RecvCQ, SRQ: a.SRQ,
		Caps: a.Caps, SigAll: a.SigAll, PortMTU: d.port.MTU(), Counters: d.countersOf(qpn), Kick: d.kick,
	})
	if err != nil {
		d.qps.Remove(qpn)
		return nil, fmt.Errorf("rnic: create QP: %w", err)
	}
	d.qps.Insert(qp)
	return qp, nil
}

// ModifyQP changes a QP's state and attributes (ibv_modify_qp). A wrong
// transition or attribute changes nothing.
func (d *Device) ModifyQP(qp *QP, attr *ib.QPAttr, mask ib.AttrMask) error {
	if qp.QPN == GSIQPN {
		return ErrGSI
	}
	d.sendHeldAck(qp) // owed for a message the application may have seen complete
	return qp.Modify(attr, mask)
}

// QueryQP returns a QP's state and attributes (ibv_query_qp).
func (d *Device) QueryQP(qp *QP) ib.QPAttr {
	qp.Lock()
	defer qp.Unlock()
	return qp.Attr
}

// DestroyQP destroys a QP (ibv_destroy_qp).
func (d *Device) DestroyQP(qp *QP) error {
	if qp.QPN == GSIQPN {
		return ErrGSI
	}
	d.drainSend(qp)
	d.awaitReceiveBatch(qp)
	d.sendHeldAck(qp)
	qp.Destroy()
	d.detachAll(qp) // after Destroy: an attach that raced it finds it destroyed, or is undone here
	d.qps.Remove(qp.QPN)
	return nil
}

// drainSend sends what was posted to an RTS QP and not sent yet before
// the QP goes, as rxe's QP cleanup lets its requester task drain
// (rxe_cleanup_task): a program that posts unsignaled datagrams and
// destroys the QP at once, as Debian's mckey does with its 10 multicast
// SENDs, has them sent (without the drain its rnicd sent 1 of the 10 in
// 1 run of 6). An RC QP sends what its window allows; nothing waits for
// an ACK.
func (d *Device) drainSend(qp *QP) {
	qp.Lock()
	rts := qp.State() == ib.QPSRTS
	qp.Unlock()
	if !rts {
		return
	}
	q := d.queueOf(qp)
	// The client chose what its ring holds: at most ib.MaxQPWR (16384)
	// WQEs, each up to a 2 GiB message on RC and UC. So the drain is
	// bounded by turns, not by WQEs: 257 turns of runBudget (64) packets,
	// 16448 packets, send a full queue of UD datagrams (one packet each)
	// and cut a UC queue of large WRITEs short (RC stops sooner, at its
	// window). The send lock is taken a turn at a time, as the pipeline
	// takes it for each QP on its run list, so that the other QPs of the
	// engine send between the turns rather than after all of them.
	for range ib.MaxQPWR/runBudget + 1 {
		q.sendMu.Lock()
		n := q.turn(qp)
		q.sendMu.Unlock()
		if n < runBudget {
			return
		}
	}
}

// awaitReceiveBatch returns once the receive batch in progress, if any,
// has ended. A batch pushes its completions before it sends the ACKs they
// owe (rx.Acker.Flush, one per QP at the batch's end), so an application
// may poll a receive completion and destroy the QP while the ACK is still
// to leave; without the wait the peer retries, against nobody, a message
// the application saw complete. A delayed ACK (sendHeldAck) is owed too.
// The batch is that of qp's engine, the only one that receives for it.
func (d *Device) awaitReceiveBatch(qp *QP) {
	q := d.queueOf(qp)
	q.recvMu.Lock()
	q.recvMu.Unlock()
}

// Port returns the device's port.
func (d *Device) Port() ibudp.Port { return d.port }

// QPs returns every QP of the device but QP1, which is the device's own
// (GSI), in QPN order (rdma res show qp).
func (d *Device) QPs() []*QP {
	all := d.qps.All()
	out := all[:0]
	for _, qp := range all {
		if qp.QPN != GSIQPN {
			out = append(out, qp)
		}
	}
	return out
}
