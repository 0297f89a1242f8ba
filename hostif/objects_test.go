package hostif

import (
	"bytes"
	"errors"
	"maps"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/rnicd/rnicd/abi"
	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/internal/looptest"
)

// kit is one object of every kind, made by one client through the
// protocol: a PD, an MR of it, a completion channel, a CQ on the channel,
// an SRQ of the PD, and a QP on the PD and CQ connected to itself.
type kit struct {
	n       *nic
	c       *Client
	pd      uint32
	mr      abi.RegMRReply
	mem     []byte // the MR's memory: three pages at IOVA 0x40000
	ch      uint32
	cq      uint32
	srq     uint32
	srqRing *abi.Ring
	q       *rawQP
	cons    uint32 // the CQ's consumer index
	round   byte
}

const kitIOVA = 0x40000

func newKit(t *testing.T, n *nic, c *Client) *kit {
	t.Helper()
	k := &kit{n: n, c: c}
	var h abi.Handle
	call(t, c, abi.KindAllocPD, &abi.Empty{}, nil, &h)
	k.pd = h.H
	fd := sealedMemfd(t, 3*4096, true)
	mem, err := unix.Mmap(fd, 0, 3*4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(mem) })
	k.mem = mem
	call(t, c, abi.KindRegMR, &abi.RegMRReq{PD: k.pd, Access: 0xf, Length: 3 * 4096, IOVA: kitIOVA}, []int{fd}, &k.mr)
	call(t, c, abi.KindCreateChannel, &abi.Empty{}, nil, &h)
	k.ch = h.H
	var cq abi.RingReply
	cqMem := mapFD(t, call(t, c, abi.KindCreateCQ, &abi.CreateCQReq{CQE: 16, Channel: k.ch}, nil, &cq))
	k.cq = cq.H
	var srq abi.RingReply
	srqMem := mapFD(t, call(t, c, abi.KindCreateSRQ, &abi.CreateSRQReq{PD: k.pd, MaxWR: 4, MaxSGE: 1}, nil, &srq))
	k.srq, k.srqRing = srq.H, ringOf(t, srqMem, srq.Recv)
	k.q = &rawQP{mr: k.mr, cq: ringOf(t, cqMem, cq.Send)}
	k.q.create(t, c, k.pd, k.cq, n.addr)
	return k
}

// handles are the kit's handles by the request that destroys each.
func (k *kit) handles() map[abi.Kind]uint32 {
	return map[abi.Kind]uint32{
		abi.KindDeallocPD: k.pd, abi.KindDeregMR: k.mr.H, abi.KindDestroyChannel: k.ch,
		abi.KindDestroyCQ: k.cq, abi.KindDestroySRQ: k.srq, abi.KindDestroyQP: k.q.h,
	}
}

// works checks that every object of the kit still does its job: the QP
// WRITEs the MR's first page into its second and READs it back into its
// third (byte for byte, both completions field by field on the CQ), the
// SRQ takes a receive WQE, the channel takes a new CQ, and the QP is
// still in RTS.
func (k *kit) works(t *testing.T) {
	t.Helper()
	k.round++
	for i := range 64 {
		k.mem[i] = byte(i*7) + k.round
	}
	sge := func(page uint64) []ib.SGE {
		return []ib.SGE{{Addr: kitIOVA + page*4096, Length: 64, LKey: k.mr.LKey}}
	}
	for _, wr := range []ib.SendWR{
		{WRID: 1, Opcode: ib.WRRDMAWrite, Flags: ib.SendSignaled, SGL: sge(0), RemoteAddr: kitIOVA + 4096, RKey: k.mr.RKey},
		{WRID: 2, Opcode: ib.WRRDMARead, Flags: ib.SendSignaled, SGL: sge(2), RemoteAddr: kitIOVA + 4096, RKey: k.mr.RKey},
	} {
		k.q.post(t, k.c, &wr, nil)
		want := ib.WC{WRID: wr.WRID, Status: ib.WCSuccess, Opcode: wr.Opcode.WCOpcode(), ByteLen: 64, QPNum: k.q.qpn}
		if wc := poll(t, k.q.cq, &k.cons); wc != want {
			t.Fatalf("completion %+v, want %+v", wc, want)
		}
	}
	if !bytes.Equal(k.mem[4096:4096+64], k.mem[:64]) || !bytes.Equal(k.mem[2*4096:2*4096+64], k.mem[:64]) {
		t.Fatalf("the WRITE and READ moved %x and %x, want %x", k.mem[4096:4096+64], k.mem[2*4096:2*4096+64], k.mem[:64])
	}
	if st := qpState(t, k.c, k.q.h); st != ib.QPSRTS {
		t.Fatalf("QP in %v, want RTS", st)
	}

	p := k.srqRing.Producer()
	if err := abi.EncodeRecvWQE(k.srqRing.Slot(p), &ib.RecvWR{WRID: uint64(p), SGL: sge(2)}); err != nil {
		t.Fatal(err)
	}
	k.srqRing.SetProducer(p + 1)
	if err := k.c.Send(abi.KindDoorbell, &abi.DoorbellReq{H: k.srq, Queue: abi.DoorbellRecv}); err != nil {
		t.Fatal(err)
	}
	if err := asyncErr(t, k.c); err != nil {
		t.Fatalf("SRQ doorbell: %v", err)
	}

	var cq abi.RingReply
	closeAll(call(t, k.c, abi.KindCreateCQ, &abi.CreateCQReq{CQE: 1, Channel: k.ch}, nil, &cq))
	call(t, k.c, abi.KindDestroyCQ, &abi.Handle{H: cq.H}, nil, &abi.Empty{})
}

// destroyAll destroys the kit with the right request for each object, in
// dependency order: each must still be there, of its own kind.
func (k *kit) destroyAll(t *testing.T) {
	t.Helper()
	hs := k.handles()
	for _, kind := range []abi.Kind{abi.KindDestroyQP, abi.KindDestroySRQ, abi.KindDestroyCQ, abi.KindDestroyChannel, abi.KindDeregMR, abi.KindDeallocPD} {
		call(t, k.c, kind, &abi.Handle{H: hs[kind]}, nil, &abi.Empty{})
	}
}

// refused checks that err is a no-handle refusal whose message says why.
func refused(t *testing.T, what string, err error, why string) {
	t.Helper()
	var e *abi.Error
	if !errors.As(err, &e) || e.Code != abi.CodeNoHandle || !strings.Contains(e.Msg, why) {
		t.Fatalf("%s: %v, want a %v refusal saying %q", what, err, abi.CodeNoHandle, why)
	}
}

// A destroy request of one kind on a handle of another kind (8 of 8
// combinations once freed the object whatever its kind) is refused,
// says what the handle names, and changes nothing: every object still
// works and is then destroyed by the right request.
func TestDestroyOfAnotherKind(t *testing.T) {
	n := newNIC(t, looptest.Get(t).String())
	c := n.client(t)
	k := newKit(t, n, c)
	k.works(t)
	base := n.srv.Objects()
	names := map[abi.Kind]string{
		abi.KindDeallocPD: "PD", abi.KindDeregMR: "MR", abi.KindDestroyChannel: "completion channel",
		abi.KindDestroyCQ: "CQ", abi.KindDestroySRQ: "SRQ", abi.KindDestroyQP: "QP",
	}
	hs := k.handles()
	tried := 0
	for destroy, wantName := range names {
		for other, h := range hs {
			if other == destroy {
				continue
			}
			_, err := c.Call(destroy, &abi.Handle{H: h}, nil, &abi.Empty{})
			refused(t, destroy.String()+" of a "+names[other], err,
				"names a "+names[other]+", not a "+wantName)
			if got := n.srv.Objects(); !maps.Equal(got, base) {
				t.Fatalf("%v of a %s changed the objects: %v, was %v", destroy, names[other], got, base)
			}
			tried++
		}
	}
	if tried != 30 {
		t.Fatalf("%d combinations tried, want 6 x 5", tried)
	}
	k.works(t)
	k.destroyAll(t)
	if got := n.srv.Objects(); got["pd"]+got["mr"]+got["comp_channel"]+got["cq"]+got["srq"]+got["qp"] != 0 {
		t.Fatalf("objects left after destroying the kit: %v", got)
	}
}

// A request that names another client's object, as its target or as an
// object it would use, is refused as if the handle did not exist and
// changes nothing: the owner's objects all still work.
func TestOtherClientsObjects(t *testing.T) {
	n := newNIC(t, looptest.Get(t).String())
	owner, thief := n.client(t), n.client(t)
	// The thief's own PD and CQ take its handles 1 and 2; the owner's
	// kit starts at 3, so every handle of it is one the thief lacks.
	for range 2 {
		var h abi.Handle
		call(t, owner, abi.KindAllocPD, &abi.Empty{}, nil, &h)
		call(t, owner, abi.KindDeallocPD, &h, nil, &abi.Empty{})
	}
	k := newKit(t, n, owner)
	var pd abi.Handle
	call(t, thief, abi.KindAllocPD, &abi.Empty{}, nil, &pd)
	var cq abi.RingReply
	closeAll(call(t, thief, abi.KindCreateCQ, &abi.CreateCQReq{CQE: 4}, nil, &cq))
	for _, h := range k.handles() {
		if h == pd.H || h == cq.H {
			t.Fatalf("the owner's handle %d is also the thief's", h)
		}
	}
	k.works(t)
	base := n.srv.Objects()
	check := func(what string, err error) {
		t.Helper()
		refused(t, what, err, "no ")
		if got := n.srv.Objects(); !maps.Equal(got, base) {
			t.Fatalf("%s changed the objects: %v, was %v", what, got, base)
		}
	}
	for destroy, h := range k.handles() {
		_, err := thief.Call(destroy, &abi.Handle{H: h}, nil, &abi.Empty{})
		check(destroy.String()+" of the owner's object", err)
	}
	_, err := thief.Call(abi.KindModifyQP, &abi.ModifyQPReq{H: k.q.h, Mask: ib.AttrState, Attr: ib.QPAttr{State: ib.QPSErr}}, nil, &abi.Empty{})
	check("modify_qp to ERR", err)
	_, err = thief.Call(abi.KindQueryQP, &abi.Handle{H: k.q.h}, nil, &abi.QPAttrReply{})
	check("query_qp", err)
	for _, db := range []abi.DoorbellReq{{H: k.q.h, Queue: abi.DoorbellSend}, {H: k.q.h, Queue: abi.DoorbellRecv}, {H: k.srq, Queue: abi.DoorbellRecv}} {
		if err := thief.Send(abi.KindDoorbell, &db); err != nil {
			t.Fatal(err)
		}
		check("doorbell", asyncErr(t, thief))
	}
	_, err = thief.Call(abi.KindRegMR, &abi.RegMRReq{PD: k.pd, Access: 1, Length: 4096}, []int{sealedMemfd(t, 4096, true)}, &abi.RegMRReply{})
	check("reg_mr on the owner's PD", err)
	_, err = thief.Call(abi.KindCreateCQ, &abi.CreateCQReq{CQE: 4, Channel: k.ch}, nil, &abi.RingReply{})
	check("create_cq on the owner's channel", err)
	_, err = thief.Call(abi.KindCreateSRQ, &abi.CreateSRQReq{PD: k.pd, MaxWR: 4, MaxSGE: 1}, nil, &abi.RingReply{})
	check("create_srq on the owner's PD", err)
	caps := ib.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}
	for what, req := range map[string]abi.CreateQPReq{
		"create_qp on the owner's PD":  {PD: k.pd, SendCQ: cq.H, RecvCQ: cq.H},
		"create_qp on the owner's CQ":  {PD: pd.H, SendCQ: k.cq, RecvCQ: cq.H},
		"create_qp on the owner's SRQ": {PD: pd.H, SendCQ: cq.H, RecvCQ: cq.H, SRQ: k.srq},
	} {
		req.Type, req.Caps = ib.QPTypeRC, caps
		_, err = thief.Call(abi.KindCreateQP, &req, nil, &abi.RingReply{})
		check(what, err)
	}
	k.works(t)
	k.destroyAll(t)
}

// Every request that acts on an object has a body that names it: the
// table cannot hand a handler an unchecked target.
func TestRequestTargets(t *testing.T) {
	for k, r := range requests {
		_, ok := r.body().(targeted)
		if strings.HasPrefix(r.name, "kind(") {
			t.Errorf("%s has no name in abi's table", r.name)
		}
		if r.target != 0 && !ok {
			t.Errorf("%v acts on a %v but its body names no handle", k, r.target)
		}
		if strings.HasPrefix(r.name, "destroy_") || strings.HasPrefix(r.name, "dealloc_") || strings.HasPrefix(r.name, "dereg_") {
			if r.target == 0 || r.target&(r.target-1) != 0 {
				t.Errorf("%v destroys %v: want exactly one kind", k, r.target)
			}
		}
	}
}

// list_qps shows each QP as the engine has it, with its owner: after one
// WRITE to itself and one receive posted, the next PSNs on both sides
// have moved by one and the receive waits.
func TestListQPs(t *testing.T) {
	n := newNIC(t, looptest.Get(t).String())
	c := n.client(t)
	k := newKit(t, n, c)
	var cons uint32
	k.q.post(t, c, &ib.SendWR{WRID: 1, Opcode: ib.WRRDMAWrite, Flags: ib.SendSignaled,
		SGL: []ib.SGE{{Addr: kitIOVA, Length: 8, LKey: k.mr.LKey}}, RemoteAddr: kitIOVA + 4096, RKey: k.mr.RKey}, nil)
	if wc := poll(t, k.q.cq, &cons); wc.Status != ib.WCSuccess {
		t.Fatalf("WRITE: %v", &wc)
	}
	if err := abi.EncodeRecvWQE(k.q.rq.Slot(0), &ib.RecvWR{WRID: 2}); err != nil {
		t.Fatal(err)
	}
	k.q.rq.SetProducer(1)
	if err := c.Send(abi.KindDoorbell, &abi.DoorbellReq{H: k.q.h, Queue: abi.DoorbellRecv}); err != nil {
		t.Fatal(err)
	}
	if err := asyncErr(t, c); err != nil {
		t.Fatal(err)
	}
	var r abi.ListQPsReply
	call(t, c, abi.KindListQPs, &abi.ListQPsReq{}, nil, &r)
	if len(r.Rows) != 1 || r.More {
		t.Fatalf("%d rows (more %v), want 1", len(r.Rows), r.More)
	}
	got := r.Rows[0]
	want := abi.QPRow{QPN: k.q.qpn, SQPSN: 1, RQPSN: 1, DestQPN: k.q.qpn, Type: ib.QPTypeRC, State: ib.QPSRTS,
		PathMTU: ib.MTU1024, Dest: n.addr.As16(), SQDepth: 0, RQDepth: 1, PID: got.PID, Comm: got.Comm}
	if got != want {
		t.Fatalf("row %+v\nwant %+v", got, want)
	}
	if got.PID == 0 || got.Comm == "" || got.Comm == "rnicd" {
		t.Fatalf("owner pid %d comm %q: want this test process", got.PID, got.Comm)
	}
}
