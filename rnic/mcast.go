package rnic

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"

	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/rnic/qpmgr"
	"github.com/rnicd/rnicd/wire/ibudp"
)

// Multicast is rxe's (rxe_mcast.c, rxe_recv.c's rxe_rcv_mcast_pkt): a
// UD QP attaches to a multicast GID (ibv_attach_mcast); the first QP of a
// group makes the port join the group's IP address, the last to detach
// makes it leave; a datagram that arrives for the group is checked and
// handed, a copy each, to every QP attached to it, whose Q_Key decides
// whether it takes it. Sending needs nothing of this: a UD SEND to an AH
// whose DGID is the MGID, DQPN 0xFFFFFF, is an IP multicast datagram.

// MaxMcastGroups is the most groups a device's QPs attach to at once
// (ibv_device_attr.max_mcast_grp): the port's (each is a socket).
const MaxMcastGroups = ibudp.MaxMcastGroups

// MaxMcastQPAttach is the most QPs attached to one group
// (max_mcast_qp_attach): rxe's RXE_MAX_MCAST_QP_ATTACH, 56.
const MaxMcastQPAttach = 56

// Multicast errors, which a host interface maps to its codes.
var (
	// ErrMcastLimit: a group past MaxMcastQPAttach QPs, or the device
	// past MaxMcastGroups groups (rxe answers ENOMEM).
	ErrMcastLimit = errors.New("rnic: multicast limit")
	// ErrNotAttached: a detach of a QP that is not attached to the group.
	ErrNotAttached = errors.New("rnic: QP is not attached to the group")
)

// mcastTable is the device's groups and their QPs.
type mcastTable struct {
	mu      sync.Mutex
	groups  map[netip.Addr][]*qpmgr.QP
	running bool // the receive pipeline of the groups runs
}

// McastGroup is one group and its QPs, as McastGroups reports them.
type McastGroup struct {
	Group netip.Addr
	QPNs  []uint32
}

// AttachMcast attaches qp to the multicast group of gid (ibv_attach_mcast):
// qp must be UD and gid a RoCEv2 multicast GID (IPv4-mapped 224.0.0.0/4,
// or ff00::/8) of the port's address family. Attaching an attached QP
// again changes nothing, as in rxe.
func (d *Device) AttachMcast(qp *QP, gid [16]byte) error {
	group, m, err := mcastTarget(d.port, qp, gid)
	if err != nil {
		return err
	}
	t := &d.mcast
	t.mu.Lock()
	defer t.mu.Unlock()
	if qp.Destroyed() {
		return fmt.Errorf("rnic: attach_mcast: QP %d is destroyed", qp.QPN)
	}
	qps, joined := t.groups[group]
	switch {
	case slices.Contains(qps, qp):
		return nil
	case joined && len(qps) >= MaxMcastQPAttach:
		return fmt.Errorf("%w: group %v has %d QPs attached, the most it may (max_mcast_qp_attach)", ErrMcastLimit, group, MaxMcastQPAttach)
	case !joined && len(t.groups) >= MaxMcastGroups:
		return fmt.Errorf("%w: the device's QPs are attached to %d groups, the most they may (max_mcast_grp)", ErrMcastLimit, MaxMcastGroups)
	}
	if !joined {
		if err := m.JoinMulticast(group); err != nil {
			return fmt.Errorf("rnic: attach_mcast: %w", err)
		}
		if t.groups == nil {
			t.groups = map[netip.Addr][]*qpmgr.QP{}
		}
		if !t.running {
			t.running = true
			d.pipes.wg.Add(1)
			go d.pipes.mcastPipeline(m, t)
		}
	}
	t.groups[group] = append(qps, qp)
	return nil
}

// CheckAttachMcast returns the error AttachMcast would for what is wrong
// with the QP, the GID or the port, limits aside: a host interface that
// charges its client for the attachment asks first, so that a client at
// its limit is told what is wrong with its call rather than that it is
// over the limit.
func (d *Device) CheckAttachMcast(qp *QP, gid [16]byte) error {
	_, _, err := mcastTarget(d.port, qp, gid)
	return err
}

// mcastTarget checks that qp may attach to gid's group on port and
// returns the group and the port's Multicaster.
func mcastTarget(port ibudp.Port, qp *QP, gid [16]byte) (netip.Addr, ibudp.Multicaster, error) {
	if qp.QPN == GSIQPN {
		return netip.Addr{}, nil, ErrGSI
	}
	if qp.Type != ib.QPTypeUD {
		return netip.Addr{}, nil, fmt.Errorf("rnic: attach_mcast: QP %d is %v: only UD QPs join multicast groups", qp.QPN, qp.Type)
	}
	group, err := ibudp.MulticastGroup(gid)
	if err != nil {
		return netip.Addr{}, nil, fmt.Errorf("rnic: attach_mcast: %w", err)
	}
	if group.Is4() != port.Addr().Unmap().Is4() {
		return netip.Addr{}, nil, fmt.Errorf("rnic: attach_mcast: group %v is not of the port's address family (%v)", group, port.Addr())
	}
	m, ok := port.(ibudp.Multicaster)
	if !ok {
		return netip.Addr{}, nil, fmt.Errorf("rnic: attach_mcast: %w", ibudp.ErrNoMulticast)
	}
	return group, m, nil
}

// DetachMcast detaches qp from the group of gid (ibv_detach_mcast); the
// port leaves the group when its last QP goes.
func (d *Device) DetachMcast(qp *QP, gid [16]byte) error {
	group, err := ibudp.MulticastGroup(gid)
	if err != nil {
		return fmt.Errorf("rnic: detach_mcast: %w", err)
	}
	t := &d.mcast
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.detachLocked(d.port, qp, group) {
		return fmt.Errorf("%w: QP %d, group %v", ErrNotAttached, qp.QPN, group)
	}
	return nil
}

// detachLocked takes qp off group's list, and port off the group if it
// was the last; false if it was not attached. t.mu is held.
func (t *mcastTable) detachLocked(port ibudp.Port, qp *QP, group netip.Addr) bool {
	qps := t.groups[group]
	i := slices.Index(qps, qp)
	if i < 0 {
		return false
	}
	qps = slices.Delete(qps, i, i+1)
	if len(qps) > 0 {
		t.groups[group] = qps
		return true
	}
	delete(t.groups, group)
	if m, ok := port.(ibudp.Multicaster); ok {
		m.LeaveMulticast(group) // the port closing leaves every group anyway
	}
	return true
}

// detachAll takes a QP that is going off every group (ibv_destroy_qp of
// an attached QP detaches it, as rxe's rxe_qp_do_cleanup does).
func (t *mcastTable) detachAll(port ibudp.Port, qp *QP) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for g, qps := range t.groups {
		if slices.Contains(qps, qp) {
			t.detachLocked(port, qp, g)
		}
	}
}

// list is the groups QPs are attached to, sorted by address
// (Observer.McastGroups).
func (t *mcastTable) list() []McastGroup {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]McastGroup, 0, len(t.groups))
	for g, qps := range t.groups {
		e := McastGroup{Group: g}
		for _, qp := range qps {
			e.QPNs = append(e.QPNs, qp.QPN)
		}
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b McastGroup) int { return a.Group.Compare(b.Group) })
	return out
}

// mcastPipeline is the groups' receive pipeline: it takes their
// datagrams off the port and hands each to every QP attached to its
// group, under the receive lock of the QP's engine.
func (p *pipelines) mcastPipeline(m ibudp.Multicaster, t *mcastTable) {
	defer p.wg.Done()
	bufs := make([]*ibudp.Buf, 16)
	for i := range bufs {
		bufs[i] = ibudp.NewBuf()
	}
	var qps []*qpmgr.QP
	for {
		n, err := m.RecvMulticast(bufs)
		if err != nil {
			if p.portGone(err) {
				return
			}
			continue
		}
		for _, b := range bufs[:n] {
			qps = t.qps(b.Dst, qps[:0])
			if len(qps) == 0 {
				// Left since it arrived.
				p.queues[0].counters.Inc(ib.DropUnknownQP)
				continue
			}
			for _, qp := range qps {
				q := p.queueOf(qp)
				q.recvMu.Lock()
				q.rx.ReceiveMulticast(b, qp, q.recvTX)
				q.recvTX.flush()
				q.recvMu.Unlock()
			}
		}
		clear(qps[:cap(qps)])
	}
}

// qps appends the QPs attached to group to dst.
func (t *mcastTable) qps(group netip.Addr, dst []*qpmgr.QP) []*qpmgr.QP {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append(dst, t.groups[group]...)
}
