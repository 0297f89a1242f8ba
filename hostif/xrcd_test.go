package hostif

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/rnicd/rnicd/abi"
	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/internal/looptest"
)

// XRC's objects through the protocol: a domain, an XRC SRQ with a
// number, both XRC QP types; what names them must be the client's own,
// an XRC SRQ is no plain QP's SRQ, a domain in use is not closed, and
// domains are counted against the client's limit.
func TestXRCObjects(t *testing.T) {
	n := limitedNIC(t, looptest.Get(t).String(), Limits{Client: Quota{ResXRCDs: 2}})
	owner, thief := n.client(t), n.client(t)
	var pd, x, x2 abi.Handle
	call(t, owner, abi.KindAllocPD, &abi.Empty{}, nil, &pd)
	call(t, owner, abi.KindOpenXRCD, &abi.Empty{}, nil, &x)
	call(t, owner, abi.KindOpenXRCD, &abi.Empty{}, nil, &x2)
	_, err := owner.Call(abi.KindOpenXRCD, &abi.Empty{}, nil, &abi.Handle{})
	wantLimit(t, "a third XRC domain", err, "-client-max-xrcd")
	var cq abi.RingReply
	closeAll(call(t, owner, abi.KindCreateCQ, &abi.CreateCQReq{CQE: 4}, nil, &cq))
	var srq, srq2 abi.RingReply
	closeAll(call(t, owner, abi.KindCreateXRCSRQ, &abi.CreateXRCSRQReq{PD: pd.H, XRCD: x.H, CQ: cq.H, MaxWR: 4, MaxSGE: 1}, nil, &srq))
	closeAll(call(t, owner, abi.KindCreateXRCSRQ, &abi.CreateXRCSRQReq{PD: pd.H, XRCD: x2.H, CQ: cq.H, MaxWR: 4, MaxSGE: 1}, nil, &srq2))
	if srq.QPN == 0 || srq.QPN > 0xffffff || srq.QPN == srq2.QPN || srq.Recv.Slots != 4 {
		t.Fatalf("XRC SRQ numbers %d and %d, ring %+v", srq.QPN, srq2.QPN, srq.Recv)
	}
	var ini, tgt abi.RingReply
	closeAll(call(t, owner, abi.KindCreateXRCQP, &abi.CreateXRCQPReq{Type: ib.QPTypeXRCSend, PD: pd.H, SendCQ: cq.H,
		Caps: ib.QPCap{MaxSendWR: 4, MaxSendSGE: 1}}, nil, &ini))
	tgtMem := mapFD(t, call(t, owner, abi.KindCreateXRCQP, &abi.CreateXRCQPReq{Type: ib.QPTypeXRCRecv, XRCD: x.H}, nil, &tgt))
	if ini.QPN == 0 || tgt.QPN == 0 || ini.Send.Slots != 4 || ini.Recv.Size != 0 || tgt.Send.Slots != 0 {
		t.Fatalf("XRC QPs: initiator %+v, target %+v", ini, tgt)
	}
	// A target has no queue to post to: a producer index the client
	// writes into its empty send ring, and doorbells of both its queues,
	// are refused, and break nothing.
	ringOf(t, tgtMem, tgt.Send).SetProducer(3)
	for _, q := range []uint8{abi.DoorbellSend, abi.DoorbellRecv} {
		if err := owner.Send(abi.KindDoorbell, &abi.DoorbellReq{H: tgt.H, Queue: q}); err != nil {
			t.Fatal(err)
		}
		wantCode(t, "a doorbell of an XRC target", asyncErr(t, owner), abi.CodeInvalid)
	}
	// The modifies Debian's ibv_xsrq_pingpong makes of its target.
	for _, m := range []abi.ModifyQPReq{
		{H: tgt.H, Mask: ib.AttrState | ib.AttrPKeyIndex | ib.AttrPort | ib.AttrAccessFlags, Attr: ib.QPAttr{State: ib.QPSInit, PortNum: 1}},
	} {
		call(t, owner, abi.KindModifyQP, &m, nil, &abi.Empty{})
	}
	_, err = owner.Call(abi.KindCreateQP, &abi.CreateQPReq{PD: pd.H, SendCQ: cq.H, RecvCQ: cq.H, SRQ: srq.H, Type: ib.QPTypeRC,
		Caps: ib.QPCap{MaxSendWR: 1, MaxSendSGE: 1}}, nil, &abi.RingReply{})
	wantCode(t, "an RC QP on an XRC SRQ", err, abi.CodeInvalid)
	_, err = owner.Call(abi.KindCreateXRCQP, &abi.CreateXRCQPReq{Type: ib.QPTypeRC, PD: pd.H, SendCQ: cq.H}, nil, &abi.RingReply{})
	wantCode(t, "create_xrc_qp of an RC QP", err, abi.CodeInvalid)
	_, err = owner.Call(abi.KindCloseXRCD, &x, nil, &abi.Empty{})
	wantCode(t, "close_xrcd of a domain in use", err, abi.CodeBusy)

	// The thief's own PD and CQ; the owner's domain is not its.
	var tpd abi.Handle
	call(t, thief, abi.KindAllocPD, &abi.Empty{}, nil, &tpd)
	var tcq abi.RingReply
	closeAll(call(t, thief, abi.KindCreateCQ, &abi.CreateCQReq{CQE: 4}, nil, &tcq))
	for what, req := range map[string]abi.CreateXRCSRQReq{
		"XRC SRQ in the owner's domain": {PD: tpd.H, XRCD: x.H, CQ: tcq.H, MaxWR: 4, MaxSGE: 1},
		"XRC SRQ on the owner's CQ":     {PD: tpd.H, XRCD: 7, CQ: cq.H, MaxWR: 4, MaxSGE: 1},
	} {
		_, err := thief.Call(abi.KindCreateXRCSRQ, &req, nil, &abi.RingReply{})
		refused(t, what, err, "handle")
	}
	_, err = thief.Call(abi.KindCreateXRCQP, &abi.CreateXRCQPReq{Type: ib.QPTypeXRCRecv, XRCD: x.H}, nil, &abi.RingReply{})
	refused(t, "XRC target in the owner's domain", err, "handle")
	_, err = thief.Call(abi.KindCloseXRCD, &x2, nil, &abi.Empty{})
	refused(t, "close_xrcd of the owner's domain", err, "handle")

	for _, d := range []struct {
		k abi.Kind
		h uint32
	}{{abi.KindDestroyQP, ini.H}, {abi.KindDestroyQP, tgt.H}, {abi.KindDestroySRQ, srq.H}, {abi.KindDestroySRQ, srq2.H},
		{abi.KindCloseXRCD, x.H}, {abi.KindCloseXRCD, x2.H}} {
		call(t, owner, d.k, &abi.Handle{H: d.h}, nil, &abi.Empty{})
	}
	if h := held(n); h["hostif_held_xrcd"] != 0 || h["hostif_held_srq"] != 0 {
		t.Fatalf("held after closing: %v", h)
	}
	call(t, owner, abi.KindOpenXRCD, &abi.Empty{}, nil, &x)
	if h := held(n); h["hostif_held_xrcd"] != 1 {
		t.Fatalf("held after a new open: %v", h)
	}
}

// A domain opened through a file is the kernel's: shared by every open
// of the file (on this device) while one holds it, made only with
// O_CREAT, refused to O_EXCL while it exists, gone with its last close.
func TestXRCDFile(t *testing.T) {
	n := newNIC(t, looptest.Get(t).String())
	a, b := n.client(t), n.client(t)
	f, err := os.Create(filepath.Join(t.TempDir(), "xrc_domain"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	open := func(c *Client, flags uint32) (abi.Handle, error) {
		var h abi.Handle
		_, err := c.Call(abi.KindOpenXRCDFile, &abi.OpenXRCDFileReq{OFlags: flags}, []int{int(f.Fd())}, &h)
		return h, err
	}
	_, err = open(a, 0)
	wantCode(t, "open_xrcd without O_CREAT of a file with no domain", err, abi.CodeInvalid)
	ha, err := open(a, unix.O_CREAT)
	if err != nil {
		t.Fatal(err)
	}
	_, err = open(b, unix.O_CREAT|unix.O_EXCL)
	wantCode(t, "open_xrcd with O_EXCL of a file with a domain", err, abi.CodeInvalid)
	hb, err := open(b, 0)
	if err != nil {
		t.Fatal(err)
	}
	call(t, a, abi.KindCloseXRCD, &ha, nil, &abi.Empty{})
	ha, err = open(a, 0)
	if err != nil {
		t.Fatalf("open_xrcd while another client holds the domain: %v", err)
	}
	call(t, a, abi.KindCloseXRCD, &ha, nil, &abi.Empty{})
	call(t, b, abi.KindCloseXRCD, &hb, nil, &abi.Empty{})
	_, err = open(b, 0)
	wantCode(t, "open_xrcd without O_CREAT after the last close", err, abi.CodeInvalid)
	// A client that hangs up lets its opens go too.
	if _, err := open(a, unix.O_CREAT); err != nil {
		t.Fatal(err)
	}
	a.Close()
	eventually(t, "the hung-up client's domain closed", func() bool {
		h, err := open(b, 0)
		if err == nil {
			call(t, b, abi.KindCloseXRCD, &h, nil, &abi.Empty{})
		}
		return err != nil
	})
}

// The kernel keys a shared domain by a file the caller holds open
// (ib_uverbs_open_xrcd takes the descriptor with fdget, which refuses
// O_PATH): an O_PATH descriptor, which anyone may open of a file they
// cannot read (another user's mode 0600 domain file), joins no domain.
func TestXRCDFileOPath(t *testing.T) {
	n := newNIC(t, looptest.Get(t).String())
	owner, other := n.client(t), n.client(t)
	name := filepath.Join(t.TempDir(), "xrc_domain")
	f, err := os.OpenFile(name, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var h abi.Handle
	call(t, owner, abi.KindOpenXRCDFile, &abi.OpenXRCDFileReq{OFlags: unix.O_CREAT}, []int{int(f.Fd())}, &h)
	// The server registers a connection on its own goroutine: a reply
	// to other shows it counted among the clients before base is taken
	// (a loaded run took base before, and saw clients go from 1 to 2).
	call(t, other, abi.KindQueryPort, &abi.Empty{}, nil, &abi.PortReply{})
	base := n.srv.Objects()
	path, err := unix.Open(name, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(path)
	for _, flags := range []uint32{0, unix.O_CREAT} {
		_, err = other.Call(abi.KindOpenXRCDFile, &abi.OpenXRCDFileReq{OFlags: flags}, []int{path}, &abi.Handle{})
		wantCode(t, fmt.Sprintf("open_xrcd (oflags %#x) by an O_PATH descriptor of the domain's file", flags), err, abi.CodeInvalid)
		if got := n.srv.Objects(); !maps.Equal(got, base) {
			t.Fatalf("a refused open_xrcd changed the objects: %v, was %v", got, base)
		}
	}
}
