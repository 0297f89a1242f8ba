package rnic

import (
	"errors"
	"fmt"
	"sync"

	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/rnic/qpmgr"
)

// XRC's objects (IBTA annex A14; qpmgr/xrc.go says how the QPs work).
type (
	// XRCD is an XRC domain (ibv_xrcd).
	XRCD = qpmgr.XRCDomain
	// XRCSRQ is an XRC SRQ (ibv_create_srq_ex with IBV_SRQT_XRC).
	XRCSRQ = qpmgr.XRCSRQ
)

// OpenXRCD opens a new XRC domain (ibv_open_xrcd with no file).
func (d *Device) OpenXRCD() *XRCD { return &XRCD{} }

// XRCDFile names the file through which processes share an XRC domain,
// by its device and inode, as the kernel's uverbs keys its table of
// shared domains (ib_uverbs_open_xrcd).
type XRCDFile struct{ Dev, Ino uint64 }

// xrcdFiles are the device's domains shared through files, and how many
// opens hold each.
type xrcdFiles struct {
	mu    sync.Mutex
	byKey map[XRCDFile]*XRCD
	refs  map[*XRCD]int
	keys  map[*XRCD]XRCDFile
}

// ErrXRCDFile is OpenXRCDFile's refusal: no domain for the file and no
// O_CREAT, or one and O_EXCL (the kernel's EINVAL).
var ErrXRCDFile = errors.New("rnic: open_xrcd")

// OpenXRCDFile opens the domain shared through file f (ibv_open_xrcd
// with a file descriptor): the one already open for f, or with create
// (O_CREAT) a new one, unless excl (O_EXCL) asks for a new one only.
// Each open is undone by a CloseXRCD.
func (d *Device) OpenXRCDFile(f XRCDFile, create, excl bool) (*XRCD, error) {
	t := &d.xrcds
	t.mu.Lock()
	defer t.mu.Unlock()
	x := t.byKey[f]
	switch {
	case x != nil && excl:
		return nil, fmt.Errorf("%w: a domain is open for the file and O_EXCL is set", ErrXRCDFile)
	case x == nil && !create:
		return nil, fmt.Errorf("%w: no domain is open for the file and O_CREAT is not set", ErrXRCDFile)
	case x == nil:
		if t.byKey == nil {
			t.byKey, t.refs, t.keys = map[XRCDFile]*XRCD{}, map[*XRCD]int{}, map[*XRCD]XRCDFile{}
		}
		x = &XRCD{}
		t.byKey[f], t.keys[x] = x, f
	}
	t.refs[x]++
	return x, nil
}

// CloseXRCD undoes an open of x (ibv_close_xrcd); a domain shared
// through a file goes with its last open.
func (d *Device) CloseXRCD(x *XRCD) {
	t := &d.xrcds
	t.mu.Lock()
	defer t.mu.Unlock()
	f, shared := t.keys[x]
	if !shared {
		return
	}
	if t.refs[x]--; t.refs[x] == 0 {
		delete(t.refs, x)
		delete(t.keys, x)
		delete(t.byKey, f)
	}
}

// CreateXRCSRQ creates an XRC SRQ in domain x whose receives complete on
// cq and whose memory is pd's, and numbers it (ibv_get_srq_num).
func (d *Device) CreateXRCSRQ(pd PD, x *XRCD, cq *CQ, maxWR, maxSGE int) (*XRCSRQ, error) {
	if pd == 0 || x == nil || cq == nil {
		return nil, fmt.Errorf("rnic: an XRC SRQ needs a PD, an XRC domain and a CQ")
	}
	q, err := d.CreateSRQ(pd, maxWR, maxSGE)
	if err != nil {
		return nil, err
	}
	s := &XRCSRQ{Domain: x, PD: pd, CQ: cq, Queue: q}
	if err := d.qps.XRCSRQs.Add(s); err != nil {
		return nil, fmt.Errorf("rnic: %w", err)
	}
	return s, nil
}

// DestroyXRCSRQ takes s out of the device: once it returns no request
// finds it, and none being served holds it (ibv_destroy_srq). A target
// whose message was under way in it finds it gone at its next packet.
func (d *Device) DestroyXRCSRQ(s *XRCSRQ) {
	d.qps.XRCSRQs.Remove(s)
	d.Fence()
}

// CreateXRCQP creates an XRC QP in RESET (ibv_create_qp_ex): an
// initiator (ib.QPTypeXRCSend) with a send queue on sendCQ in pd, or a
// target (ib.QPTypeXRCRecv) in domain x, with no queue at all.
func (d *Device) CreateXRCQP(t ib.QPType, pd PD, sendCQ *CQ, x *XRCD, caps ib.QPCap, sigAll bool) (*QP, error) {
	switch t {
	case ib.QPTypeXRCSend:
		if x != nil || sendCQ == nil || pd == 0 {
			return nil, fmt.Errorf("rnic: an XRC_SEND QP needs a PD and a send CQ, and no XRC domain")
		}
		caps.MaxRecvWR, caps.MaxRecvSGE = 0, 0
	case ib.QPTypeXRCRecv:
		if x == nil {
			return nil, fmt.Errorf("rnic: an XRC_RECV QP needs an XRC domain")
		}
		// A target has no queues; its PD is its requests' SRQs'.
		caps, pd, sendCQ, sigAll = ib.QPCap{}, xrcTargetPD, nil, false
	default:
		return nil, fmt.Errorf("rnic: %v is not an XRC QP type", t)
	}
	return d.CreateQP(QPInitAttr{PD: pd, Type: t, SendCQ: sendCQ, XRCD: x, Caps: caps, SigAll: sigAll})
}

// xrcTargetPD stands for a target's PD until its first request names an
// SRQ (qpmgr.QP.SetXRCTarget): CreateQP wants one, and no region is in
// it (PDs count up from 1; this is the last).
const xrcTargetPD PD = ^PD(0)
