package rnic

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/rnic/dma"
	"github.com/rnicd/rnicd/rnic/qpmgr"
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
	XRCD   *XRCD // an XRC_RECV QP's (CreateXRCQP)
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
		QPN: qpn, Type: a.Type, PD: a.PD, SendCQ: a.SendCQ, RecvCQ: a.RecvCQ, SRQ: a.SRQ, XRCD: a.XRCD,
		Caps: a.Caps, SigAll: a.SigAll, PortMTU: d.port.MTU(), Counters: d.pipes.countersOf(qpn), Kick: d.pipes.kick,
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
	d.pipes.queueOf(qp).sendHeldAck(qp) // owed for a message the application may have seen complete
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
	q := d.pipes.queueOf(qp)
	q.drainSend(qp)
	q.awaitReceiveBatch()
	q.sendHeldAck(qp)
	qp.Destroy()
	d.mcast.detachAll(d.port, qp) // after Destroy: an attach that raced it finds it destroyed, or is undone here
	// Its type 2 windows are unbound: its QPN may come back.
	d.dma.ReleaseQP(qp.PD, qp.QPN)
	d.qps.Remove(qp.QPN)
	return nil
}

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
