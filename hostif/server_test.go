package hostif

import (
	"encoding/binary"
	"errors"
	"maps"
	"net/netip"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rnicd/rnicd/abi"
	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/internal/looptest"
	"github.com/rnicd/rnicd/rnic"
	"github.com/rnicd/rnicd/wire/ibudp"
)

// nic is a device with its host interface, in this process, on a
// loopback address of its own.
type nic struct {
	dev  *rnic.Device
	srv  *Server
	addr netip.Addr
}

func newNIC(t *testing.T, addr string) *nic { t.Helper(); return newNICPolling(t, addr, 0) }

// newNICPolling is newNIC with a polling engine that sleeps after
// pollIdle (rnic.Config.PollIdle; 0: none).
func newNICPolling(t *testing.T, addr string, pollIdle time.Duration) *nic {
	t.Helper()
	a := netip.MustParseAddr(addr)
	p, err := ibudp.Open(ibudp.Config{Addr: a, MTU: 1024})
	if err != nil {
		t.Fatal(err)
	}
	d, err := rnic.Open(rnic.Config{Port: p, PollIdle: pollIdle})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return &nic{dev: d, srv: NewServer(Config{Device: d}), addr: a}
}

// client connects a new client over a socketpair.
func (n *nic) client(t *testing.T) *Client {
	t.Helper()
	se, ce, err := Socketpair()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { n.srv.ServeConn(se); close(done) }()
	c := NewClient(ce)
	t.Cleanup(func() { c.Close(); <-done })
	return c
}

// wantCode checks that err is a refusal with code.
func wantCode(t *testing.T, what string, err error, code abi.Code) {
	t.Helper()
	var e *abi.Error
	if !errors.As(err, &e) || e.Code != code {
		t.Fatalf("%s: %v, want code %v", what, err, code)
	}
}

func call(t *testing.T, c *Client, k abi.Kind, req abi.Body, fds []int, reply abi.Body) []int {
	t.Helper()
	rfds, err := c.Call(k, req, fds, reply)
	if err != nil {
		t.Fatalf("%v: %v", k, err)
	}
	return rfds
}

// sealedMemfd is memory as verbs.Context.Alloc makes it.
func sealedMemfd(t *testing.T, n int, seal bool) int {
	t.Helper()
	fd, err := unix.MemfdCreate("test", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.Ftruncate(fd, int64(n)); err != nil {
		t.Fatal(err)
	}
	if seal {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK); err != nil {
			t.Fatal(err)
		}
	}
	return fd
}

// unsealableMemfd is a memfd made without MFD_ALLOW_SEALING: born sealed
// with F_SEAL_SEAL, so nothing can keep it from shrinking.
func unsealableMemfd(t *testing.T, n int) int {
	t.Helper()
	fd, err := unix.MemfdCreate("test", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.Ftruncate(fd, int64(n)); err != nil {
		t.Fatal(err)
	}
	return fd
}

func eventfd(t *testing.T) int {
	t.Helper()
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// Every malformed, misdirected or unknown request gets an error reply with
// the right code and changes nothing; the connection serves on.
func TestHostileRequests(t *testing.T) {
	n := newNIC(t, looptest.Get(t).String())
	c := n.client(t)
	var pd abi.Handle
	call(t, c, abi.KindAllocPD, &abi.Empty{}, nil, &pd)
	base := n.srv.Objects()

	raw := func(name string, msg []byte, fds []int, code abi.Code) {
		t.Helper()
		reply, err := c.Raw(msg, fds)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		h, err := abi.ParseHeader(reply)
		if err != nil || h.Flags&abi.FlagReply == 0 {
			t.Fatalf("%s: reply %x: %v", name, reply, err)
		}
		wantCode(t, name, abi.DecodeReply(h.Kind, reply[abi.HeaderLen:], nil), code)
		if got := n.srv.Objects(); !maps.Equal(got, base) {
			t.Fatalf("%s changed the objects: %v, was %v", name, got, base)
		}
	}
	good := abi.Encode(abi.KindAllocPD, 0, 77, &abi.Empty{})
	withLen := func(b []byte, l uint32) []byte {
		b = append([]byte(nil), b...)
		binary.LittleEndian.PutUint32(b[8:], l)
		return b
	}
	raw("unknown kind", abi.Encode(999, 0, 1, &abi.Empty{}), nil, abi.CodeUnknown)
	raw("reply flag", abi.Encode(abi.KindAllocPD, abi.FlagReply, 1, &abi.Empty{}), nil, abi.CodeMalformed)
	raw("unknown flag", abi.Encode(abi.KindAllocPD, 4, 1, &abi.Empty{}), nil, abi.CodeMalformed)
	raw("length says more", withLen(good, 4), nil, abi.CodeMalformed)
	raw("length says less", withLen(append(good, 1, 2, 3, 4), 0), nil, abi.CodeMalformed)
	raw("reserved word", append(append([]byte(nil), good[:12]...), 1, 0, 0, 0), nil, abi.CodeMalformed)
	raw("shorter than a header", good[:7], nil, abi.CodeMalformed)
	raw("empty message", []byte{0}, nil, abi.CodeMalformed)
	trailing := append(abi.Encode(abi.KindDeallocPD, 0, 5, &abi.Handle{H: pd.H}), 0)
	raw("a byte after the body", withLen(trailing, uint32(len(trailing)-abi.HeaderLen)), nil, abi.CodeMalformed)
	mem := sealedMemfd(t, 1<<16, true)
	regmr := abi.Encode(abi.KindRegMR, 0, 6, &abi.RegMRReq{PD: pd.H, Access: 1, Length: 4096, IOVA: 0x1000})
	raw("truncated body", withLen(regmr[:len(regmr)-3], uint32(len(regmr)-3-abi.HeaderLen)), []int{mem}, abi.CodeMalformed)
	raw("descriptor missing", regmr, nil, abi.CodeMalformed)
	raw("descriptor not wanted", good, []int{mem}, abi.CodeMalformed)
	raw("bad handle", abi.Encode(abi.KindDeallocPD, 0, 8, &abi.Handle{H: 9999}), nil, abi.CodeNoHandle)
	raw("handle 0", abi.Encode(abi.KindDestroyQP, 0, 8, &abi.Handle{H: 0}), nil, abi.CodeNoHandle)
	raw("PD handle as a CQ", abi.Encode(abi.KindCreateQP, 0, 9, &abi.CreateQPReq{PD: pd.H, SendCQ: pd.H, RecvCQ: pd.H,
		Type: ib.QPTypeRC, Caps: ib.QPCap{MaxSendWR: 1, MaxRecvWR: 1}}), nil, abi.CodeNoHandle)
	raw("doorbell of no QP", abi.Encode(abi.KindDoorbell, 0, 10, &abi.DoorbellReq{H: pd.H}), nil, abi.CodeNoHandle)
	db := abi.Encode(abi.KindDoorbell, 0, 10, &abi.DoorbellReq{H: pd.H})
	db[len(db)-1] = 7
	raw("doorbell queue 7", db, nil, abi.CodeMalformed)
	raw("CQ of 0 entries", abi.Encode(abi.KindCreateCQ, 0, 11, &abi.CreateCQReq{CQE: 0}), nil, abi.CodeInvalid)
	raw("CQ with a descriptor", abi.Encode(abi.KindCreateCQ, 0, 11, &abi.CreateCQReq{CQE: 4}), []int{eventfd(t)}, abi.CodeMalformed)
	raw("channel of another kind", abi.Encode(abi.KindCreateCQ, 0, 11, &abi.CreateCQReq{CQE: 4, Channel: pd.H}), nil, abi.CodeNoHandle)
	raw("SRQ past the limits", abi.Encode(abi.KindCreateSRQ, 0, 12, &abi.CreateSRQReq{PD: pd.H, MaxWR: 1 << 20, MaxSGE: 1}), nil, abi.CodeInvalid)
	raw("access flags", abi.Encode(abi.KindRegMR, 0, 13, &abi.RegMRReq{PD: pd.H, Access: 1 << 20, Length: 4096}), []int{mem}, abi.CodeInvalid)

	// The connection still serves, and the PD is still there.
	var mr abi.RegMRReply
	call(t, c, abi.KindRegMR, &abi.RegMRReq{PD: pd.H, Access: 1, Length: 4096, IOVA: 0x1000}, []int{mem}, &mr)
	if mr.LKey == 0 {
		t.Fatal("no lkey")
	}
}

func pipeFD(t *testing.T) int {
	t.Helper()
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(p[0]); unix.Close(p[1]) })
	return p[1]
}

// asyncErr returns the error reply of the doorbells before it: a call
// reads any such reply on its way to its own.
func asyncErr(t *testing.T, c *Client) error {
	t.Helper()
	call(t, c, abi.KindQueryPort, &abi.Empty{}, nil, &abi.PortReply{})
	return c.AsyncErr()
}

// A handle names an object of its own client only: another client's
// handle is refused and the object is untouched.
func TestOtherClientsHandle(t *testing.T) {
	n := newNIC(t, looptest.Get(t).String())
	c1, c2 := n.client(t), n.client(t)
	var pd abi.Handle
	call(t, c1, abi.KindAllocPD, &abi.Empty{}, nil, &pd)
	_, err := c2.Call(abi.KindDeallocPD, &pd, nil, &abi.Empty{})
	wantCode(t, "dealloc another client's PD", err, abi.CodeNoHandle)
	mem := sealedMemfd(t, 8192, true)
	_, err = c2.Call(abi.KindRegMR, &abi.RegMRReq{PD: pd.H, Access: 1, Length: 4096}, []int{mem}, &abi.RegMRReply{})
	wantCode(t, "reg_mr on another client's PD", err, abi.CodeNoHandle)
	var mr abi.RegMRReply
	call(t, c1, abi.KindRegMR, &abi.RegMRReq{PD: pd.H, Access: 1, Length: 4096}, []int{mem}, &mr)
	_, err = c1.Call(abi.KindDeallocPD, &pd, nil, &abi.Empty{})
	wantCode(t, "dealloc a PD with an MR", err, abi.CodeBusy)
	call(t, c1, abi.KindDeregMR, &abi.Handle{H: mr.H}, nil, &abi.Empty{})
	call(t, c1, abi.KindDeallocPD, &pd, nil, &abi.Empty{})
	_, err = c1.Call(abi.KindDeallocPD, &pd, nil, &abi.Empty{})
	wantCode(t, "stale handle", err, abi.CodeNoHandle)
}

// RegMR maps only a memfd sealed against shrinking, sealing one that may
// still take seals (a program's own memfd, registered in place), and
// only as much of it as it has.
func TestRegMRDescriptors(t *testing.T) {
	n := newNIC(t, looptest.Get(t).String())
	c := n.client(t)
	var pd abi.Handle
	call(t, c, abi.KindAllocPD, &abi.Empty{}, nil, &pd)
	base := n.srv.Objects()
	f, err := os.CreateTemp(t.TempDir(), "file")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.Truncate(1 << 16)
	for _, tc := range []struct {
		name string
		fd   int
		req  abi.RegMRReq
	}{
		{"a pipe", pipeFD(t), abi.RegMRReq{Length: 4096}},
		{"a regular file", int(f.Fd()), abi.RegMRReq{Length: 4096}},
		{"an eventfd", eventfd(t), abi.RegMRReq{Length: 4096}},
		{"a memfd that cannot be sealed", unsealableMemfd(t, 1<<16), abi.RegMRReq{Length: 4096}},
		{"a memfd smaller than claimed", sealedMemfd(t, 4096, true), abi.RegMRReq{Length: 8192}},
		{"an offset past the end", sealedMemfd(t, 4096, true), abi.RegMRReq{Offset: 4096, Length: 1}},
		{"an offset that wraps", sealedMemfd(t, 4096, true), abi.RegMRReq{Offset: ^uint64(0), Length: 2}},
		{"zero length", sealedMemfd(t, 4096, true), abi.RegMRReq{Length: 0}},
	} {
		tc.req.PD, tc.req.Access = pd.H, uint32(ib.AccessLocalWrite)
		_, err := c.Call(abi.KindRegMR, &tc.req, []int{tc.fd}, &abi.RegMRReply{})
		wantCode(t, tc.name, err, abi.CodeInvalid)
		if got := n.srv.Objects(); !maps.Equal(got, base) {
			t.Fatalf("%s changed the objects: %v", tc.name, got)
		}
	}
	// A memfd that may still take seals is sealed against shrinking by
	// the registration, and keeps the seal: it can grow, not shrink.
	fd := sealedMemfd(t, 1<<16, false)
	var mr abi.RegMRReply
	call(t, c, abi.KindRegMR, &abi.RegMRReq{PD: pd.H, Access: uint32(ib.AccessLocalWrite), Offset: 4096, Length: 100}, []int{fd}, &mr)
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil || seals != unix.F_SEAL_SHRINK {
		t.Errorf("the registered memfd's seals: %#x, %v; want F_SEAL_SHRINK alone", seals, err)
	}
	if err := unix.Ftruncate(fd, 4096); err != unix.EPERM {
		t.Errorf("shrinking the registered memfd: %v, want EPERM", err)
	}
	if err := unix.Ftruncate(fd, 1<<17); err != nil {
		t.Errorf("growing the registered memfd: %v", err)
	}
	call(t, c, abi.KindDeregMR, &abi.Handle{H: mr.H}, nil, &abi.Empty{})
}

// rawQP is a QP made through the protocol with its rings mapped, for
// tests that write the rings as a hostile client could.
type rawQP struct {
	h, qpn uint32
	sq, rq *abi.Ring
	cq     *abi.Ring
	mr     abi.RegMRReply
}

func mapFD(t *testing.T, fds []int) []byte {
	t.Helper()
	// A CQ's reply carries its wake pipe's read end after the memfd.
	if len(fds) != 1 && len(fds) != 2 {
		t.Fatalf("%d descriptors", len(fds))
	}
	for _, fd := range fds {
		defer unix.Close(fd)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fds[0], &st); err != nil {
		t.Fatal(err)
	}
	mem, err := unix.Mmap(fds[0], 0, int(st.Size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(mem) })
	return mem
}

func ringOf(t *testing.T, mem []byte, d abi.RingDesc) *abi.Ring {
	t.Helper()
	r, err := abi.NewRing(mem[d.Offset:d.Offset+d.Size], d.Slots, d.SlotBytes)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// loopQP makes an RC QP connected to itself (same device, same QPN) with
// a 64 KiB MR at IOVA 0x10000 of PD pd and a 64-entry CQ.
func loopQP(t *testing.T, n *nic, c *Client, pd uint32) *rawQP {
	t.Helper()
	return connectedQP(t, n, c, pd, n.addr)
}

// connectedQP is loopQP with the QP's destination at dest.
func connectedQP(t *testing.T, n *nic, c *Client, pd uint32, dest netip.Addr) *rawQP {
	t.Helper()
	q := &rawQP{}
	call(t, c, abi.KindRegMR, &abi.RegMRReq{PD: pd, Access: 0xf, Length: 1 << 16, IOVA: 0x10000},
		[]int{sealedMemfd(t, 1<<16, true)}, &q.mr)
	var cq abi.RingReply
	q.cq = ringOf(t, mapFD(t, call(t, c, abi.KindCreateCQ, &abi.CreateCQReq{CQE: 64}, nil, &cq)), cq.Send)
	q.create(t, c, pd, cq.H, dest)
	return q
}

// create makes q's QP on PD pd and CQ cq, and takes it to RTS towards
// dest (at the same QPN).
func (q *rawQP) create(t *testing.T, c *Client, pd, cq uint32, dest netip.Addr) {
	t.Helper()
	var r abi.RingReply
	mem := mapFD(t, call(t, c, abi.KindCreateQP, &abi.CreateQPReq{PD: pd, SendCQ: cq, RecvCQ: cq, Type: ib.QPTypeRC,
		Caps: ib.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInlineData: 32}}, nil, &r))
	q.h, q.qpn = r.H, r.QPN
	q.sq, q.rq = ringOf(t, mem, r.Send), ringOf(t, mem, r.Recv)
	steps := []struct {
		a    ib.QPAttr
		mask ib.AttrMask
	}{
		{ib.QPAttr{State: ib.QPSInit, PortNum: 1, AccessFlags: 0xe},
			ib.AttrState | ib.AttrPKeyIndex | ib.AttrPort | ib.AttrAccessFlags},
		{ib.QPAttr{State: ib.QPSRTR, PathMTU: ib.MTU1024, DestQPN: q.qpn, AH: ib.AH{DGID: dest.As16()},
			MaxDestRdAtomic: 1}, ib.AttrState | ib.AttrAV | ib.AttrPathMTU | ib.AttrDestQPN |
			ib.AttrRQPSN | ib.AttrMaxDestRdAtomic | ib.AttrMinRNRTimer},
		{ib.QPAttr{State: ib.QPSRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
			ib.AttrState | ib.AttrSQPSN | ib.AttrTimeout | ib.AttrRetryCnt | ib.AttrRNRRetry |
				ib.AttrMaxQPRdAtomic},
	}
	for _, s := range steps {
		call(t, c, abi.KindModifyQP, &abi.ModifyQPReq{H: q.h, Mask: s.mask, Attr: s.a}, nil, &abi.Empty{})
	}
}

// post writes wr into the next send slot, lets mangle spoil it, and
// rings the doorbell.
func (q *rawQP) post(t *testing.T, c *Client, wr *ib.SendWR, mangle func(slot []byte)) {
	t.Helper()
	q.write(t, wr, mangle)
	if err := c.Send(abi.KindDoorbell, &abi.DoorbellReq{H: q.h, Queue: abi.DoorbellSend}); err != nil {
		t.Fatal(err)
	}
}

// write writes wr into the next send slot without ringing the doorbell.
func (q *rawQP) write(t *testing.T, wr *ib.SendWR, mangle func(slot []byte)) {
	t.Helper()
	p := q.sq.Producer()
	slot := q.sq.Slot(p)
	if err := abi.EncodeSendWQE(slot, wr); err != nil {
		t.Fatal(err)
	}
	if mangle != nil {
		mangle(slot)
	}
	q.sq.SetProducer(p + 1)
}

// poll waits for the next CQE of the ring; the deadline guards a hang.
func poll(t *testing.T, r *abi.Ring, cons *uint32) ib.WC {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); r.Producer() == *cons; {
		if time.Now().After(deadline) {
			t.Fatal("no completion")
		}
		time.Sleep(time.Millisecond)
	}
	var wc ib.WC
	abi.GetCQE(r.Slot(*cons), &wc)
	*cons++
	r.SetConsumer(*cons)
	return wc
}

func qpState(t *testing.T, c *Client, h uint32) ib.QPState {
	t.Helper()
	var a abi.QPAttrReply
	call(t, c, abi.KindQueryQP, &abi.Handle{H: h}, nil, &a)
	return a.Attr.State
}

// WQEs a hostile client writes into its ring: each malformed one
// completes in error and moves the QP to ERR (what follows is flushed),
// the host interface counts the ones it refused at fetch, and nothing
// is read or written outside the client's MRs.
func TestHostileWQEs(t *testing.T) {
	n := newNIC(t, looptest.Get(t).String())
	c := n.client(t)
	var pd, otherPD abi.Handle
	call(t, c, abi.KindAllocPD, &abi.Empty{}, nil, &pd)
	call(t, c, abi.KindAllocPD, &abi.Empty{}, nil, &otherPD)
	var other abi.RegMRReply
	call(t, c, abi.KindRegMR, &abi.RegMRReq{PD: otherPD.H, Access: 0xf, Length: 4096, IOVA: 0x90000},
		[]int{sealedMemfd(t, 4096, true)}, &other)

	write := func(q *rawQP, id uint64, sge ib.SGE) *ib.SendWR {
		return &ib.SendWR{WRID: id, Opcode: ib.WRRDMAWrite, Flags: ib.SendSignaled,
			SGL: []ib.SGE{sge}, RemoteAddr: 0x18000, RKey: q.mr.RKey}
	}
	for _, tc := range []struct {
		name   string
		sge    func(q *rawQP) ib.SGE
		mangle func([]byte)
		status ib.WCStatus
		badWQE bool // refused at fetch (counted) rather than by the DMA engine
	}{
		{"opcode 7", nil, func(s []byte) { s[8] = 7 }, ib.WCLocQPOpErr, true},
		{"unknown send flag", nil, func(s []byte) { s[9] = 0x80 }, ib.WCLocQPOpErr, true},
		{"num_sge past the QP's", nil, func(s []byte) { s[10] = 3 }, ib.WCLocQPOpErr, true},
		{"num_sge 255", nil, func(s []byte) { s[10] = 255 }, ib.WCLocQPOpErr, true},
		{"inline length past max_inline", nil, func(s []byte) {
			s[9] |= uint8(ib.SendInline)
			s[10] = 0
			binary.LittleEndian.PutUint32(s[12:], 1<<30)
		}, ib.WCLocQPOpErr, true},
		{"has_ah 9", nil, func(s []byte) { s[11] = 9 }, ib.WCLocQPOpErr, true},
		{"atomic of 4 bytes", nil, func(s []byte) { s[8] = uint8(ib.WRAtomicFetchAdd); binary.LittleEndian.PutUint32(s[96+8:], 4) }, ib.WCLocQPOpErr, true},
		{"length past the largest message", func(q *rawQP) ib.SGE {
			return ib.SGE{Addr: 0x10000, Length: 0xffffffff, LKey: q.mr.LKey}
		}, nil, ib.WCLocQPOpErr, true},
		{"address past the MR", func(q *rawQP) ib.SGE {
			return ib.SGE{Addr: 0x10000 + 65000, Length: 1000, LKey: q.mr.LKey}
		}, nil, ib.WCLocProtErr, false},
		{"lkey of another PD", func(*rawQP) ib.SGE { return ib.SGE{Addr: 0x90000, Length: 8, LKey: other.LKey} }, nil, ib.WCLocProtErr, false},
		{"lkey nobody has", func(*rawQP) ib.SGE { return ib.SGE{Addr: 0x10000, Length: 8, LKey: 0xdead00} }, nil, ib.WCLocProtErr, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := loopQP(t, n, c, pd.H)
			var cons uint32
			before := n.srv.badWQEs.Load()
			sge := ib.SGE{Addr: 0x10000, Length: 8, LKey: q.mr.LKey}
			if tc.sge != nil {
				sge = tc.sge(q)
			}
			q.post(t, c, write(q, 1, sge), tc.mangle)
			q.post(t, c, write(q, 2, ib.SGE{Addr: 0x10000, Length: 8, LKey: q.mr.LKey}), nil)
			wc := poll(t, q.cq, &cons)
			if wc.WRID != 1 || wc.Status != tc.status || wc.QPNum != q.qpn {
				t.Fatalf("first completion %v, want wr_id 1 %v", &wc, tc.status)
			}
			if wc = poll(t, q.cq, &cons); wc.WRID != 2 || wc.Status != ib.WCWRFlushErr {
				t.Fatalf("second completion %v, want wr_id 2 WR_FLUSH_ERR", &wc)
			}
			if st := qpState(t, c, q.h); st != ib.QPSErr {
				t.Fatalf("QP in %v, want ERR", st)
			}
			err := asyncErr(t, c)
			if tc.badWQE {
				wantCode(t, "doorbell's error reply", err, abi.CodeInvalid)
			}
			want := uint64(0)
			if tc.badWQE {
				want = 1
			}
			if got := n.srv.badWQEs.Load() - before; got != want {
				t.Fatalf("hostif_bad_wqe moved by %d", got)
			}
			// Both slots are retired: the consumer index caught up.
			if q.sq.Consumer() != 2 {
				t.Fatalf("send consumer index %d, want 2", q.sq.Consumer())
			}
		})
	}

	t.Run("producer far ahead", func(t *testing.T) {
		q := loopQP(t, n, c, pd.H)
		q.sq.SetProducer(1 << 30)
		c.Send(abi.KindDoorbell, &abi.DoorbellReq{H: q.h, Queue: abi.DoorbellSend})
		wantCode(t, "doorbell's error reply", asyncErr(t, c), abi.CodeInvalid)
		if st := qpState(t, c, q.h); st != ib.QPSErr {
			t.Fatalf("QP in %v, want ERR", st)
		}
		if q.cq.Producer() != 0 {
			t.Fatal("a WQE of a garbage ring ran")
		}
	})
	t.Run("receive producer far ahead", func(t *testing.T) {
		q := loopQP(t, n, c, pd.H)
		q.rq.SetProducer(^uint32(0))
		c.Send(abi.KindDoorbell, &abi.DoorbellReq{H: q.h, Queue: abi.DoorbellRecv})
		wantCode(t, "doorbell's error reply", asyncErr(t, c), abi.CodeInvalid)
		if st := qpState(t, c, q.h); st != ib.QPSErr {
			t.Fatalf("QP in %v, want ERR", st)
		}
	})
	t.Run("malformed receive WQE", func(t *testing.T) {
		q := loopQP(t, n, c, pd.H)
		slot := q.rq.Slot(0)
		abi.EncodeRecvWQE(slot, &ib.RecvWR{WRID: 5})
		binary.LittleEndian.PutUint32(slot[8:], 1000) // num_sge
		q.rq.SetProducer(1)
		c.Send(abi.KindDoorbell, &abi.DoorbellReq{H: q.h, Queue: abi.DoorbellRecv})
		wantCode(t, "doorbell's error reply", asyncErr(t, c), abi.CodeInvalid)
		var cons uint32
		if wc := poll(t, q.cq, &cons); wc.WRID != 5 || wc.Status != ib.WCLocQPOpErr || wc.Opcode != ib.WCRecv {
			t.Fatalf("completion %v, want wr_id 5 LOC_QP_OP_ERR RECV", &wc)
		}
		if q.rq.Consumer() != 1 {
			t.Fatalf("receive consumer %d, want 1", q.rq.Consumer())
		}
	})
}

// A full completion ring sets the overrun flag and counts, rather than
// losing completions silently or overwriting unpolled ones.
func TestCQOverrun(t *testing.T) {
	n := newNIC(t, looptest.Get(t).String())
	c := n.client(t)
	var pd abi.Handle
	call(t, c, abi.KindAllocPD, &abi.Empty{}, nil, &pd)
	q := loopQP(t, n, c, pd.H)
	// The loop QP's CQ has 64 entries: 70 signaled WRITEs overrun it.
	for i := range 70 {
		for deadline := time.Now().Add(20 * time.Second); q.sq.Producer()-q.sq.Consumer() == q.sq.Slots; {
			if time.Now().After(deadline) {
				t.Fatal("send queue never drained")
			}
			time.Sleep(time.Millisecond)
		}
		q.post(t, c, &ib.SendWR{WRID: uint64(i), Opcode: ib.WRRDMAWrite, Flags: ib.SendSignaled,
			SGL: []ib.SGE{{Addr: 0x10000, Length: 8, LKey: q.mr.LKey}}, RemoteAddr: 0x18000, RKey: q.mr.RKey}, nil)
	}
	for deadline := time.Now().Add(20 * time.Second); !q.cq.Overrun(); {
		if time.Now().After(deadline) {
			t.Fatal("no overrun flag")
		}
		time.Sleep(time.Millisecond)
	}
	var cons uint32
	for i := range 64 {
		if wc := poll(t, q.cq, &cons); wc.WRID != uint64(i) || wc.Status != ib.WCSuccess {
			t.Fatalf("completion %d: %v", i, &wc)
		}
	}
	if n.srv.cqOverruns.Load() == 0 {
		t.Fatal("overrun not counted")
	}
}

// Shutdown flushes what a client wrote into its rings even when the
// doorbell never reached the daemon (doorbells are not answered, so a
// SIGTERM can come first): every posted WQE completes with WR_FLUSH_ERR,
// in order, and the QP is in ERR.
func TestShutdownFlushesUnrungWQEs(t *testing.T) {
	n := newNIC(t, looptest.Get(t).String())
	c := n.client(t)
	var pd abi.Handle
	call(t, c, abi.KindAllocPD, &abi.Empty{}, nil, &pd)
	// Nobody answers at 127.4.1.9: nothing completes before Shutdown.
	q := connectedQP(t, n, c, pd.H, netip.MustParseAddr("127.4.1.9"))
	for id := range uint64(3) {
		q.write(t, &ib.SendWR{WRID: id, Opcode: ib.WRRDMAWrite, Flags: ib.SendSignaled,
			SGL: []ib.SGE{{Addr: 0x10000, Length: 8, LKey: q.mr.LKey}}, RemoteAddr: 0x18000, RKey: q.mr.RKey}, nil)
	}
	n.srv.Shutdown()
	var cons uint32
	for id := range uint64(3) {
		if wc := poll(t, q.cq, &cons); wc.WRID != id || wc.Status != ib.WCWRFlushErr || wc.QPNum != q.qpn {
			t.Fatalf("completion %v, want wr_id %d WR_FLUSH_ERR on QP %#x", &wc, id, q.qpn)
		}
	}
	if st := qpState(t, c, q.h); st != ib.QPSErr {
		t.Fatalf("QP in %v, want ERR", st)
	}
}

// Doorbell coalescing: while a doorbell is on its way, further posts need
// none (RingBell says so), and the one fetch takes every WQE written
// before it; once the daemon has begun that fetch, the next post rings
// again.
func TestDoorbellCoalescing(t *testing.T) {
	n := newNIC(t, looptest.Get(t).String())
	c := n.client(t)
	var pd abi.Handle
	call(t, c, abi.KindAllocPD, &abi.Empty{}, nil, &pd)
	q := loopQP(t, n, c, pd.H)
	for id := range uint64(3) {
		q.write(t, &ib.SendWR{WRID: id, Opcode: ib.WRRDMAWrite, Flags: ib.SendSignaled,
			SGL: []ib.SGE{{Addr: 0x10000 + id*8, Length: 8, LKey: q.mr.LKey}}, RemoteAddr: 0x18000 + id*8, RKey: q.mr.RKey}, nil)
		if got, want := q.sq.RingBell(), id == 0; got != want {
			t.Fatalf("post %d: RingBell %v, want %v", id, got, want)
		}
	}
	if err := c.Send(abi.KindDoorbell, &abi.DoorbellReq{H: q.h, Queue: abi.DoorbellSend}); err != nil {
		t.Fatal(err)
	}
	var cons uint32
	for id := range uint64(3) {
		if wc := poll(t, q.cq, &cons); wc.WRID != id || wc.Status != ib.WCSuccess || wc.Opcode != ib.WCRDMAWrite {
			t.Fatalf("completion %v, want wr_id %d RDMA_WRITE SUCCESS", &wc, id)
		}
	}
	if !q.sq.RingBell() {
		t.Fatal("after the fetch, a post must ring the doorbell again")
	}
}

// The request that lent a client a socket of the port (kind 19,
// lend_port, gone) is an unknown request now, counted as a bad one, and
// its answer carries no descriptor: nothing a client asks gets it the
// port.
func TestNoLendPort(t *testing.T) {
	n := newNIC(t, looptest.Get(t).String())
	c := n.client(t)
	fds, err := c.Call(abi.Kind(19), &abi.Empty{}, nil, &abi.Empty{})
	wantCode(t, "kind 19", err, abi.CodeUnknown)
	if len(fds) != 0 {
		closeAll(fds)
		t.Fatalf("kind 19's refusal carries %d descriptors", len(fds))
	}
	if got := n.srv.Counters()["hostif_bad_request"]; got != 1 {
		t.Errorf("hostif_bad_request %d after kind 19, want 1", got)
	}
}

// A client that clears O_NONBLOCK on its wake pipes (a completion
// channel's, a CQ's) and never reads them costs the daemon nothing: 600
// WRITEs, each completing on an armed CQ whose client sleeps in Wait,
// signal both pipes past their 4 KiB, and every completion still
// arrives. With the client's own eventfds (as before), the daemon's
// write blocked once a client had cleared the flag and filled one.
//
// The daemon publishes a CQE (the producer index) before it disarms the
// CQ, counts the event and takes the waiter (qpmgr's cqeRing.publish), so that a
// client woken by the event always finds the CQE. Seeing the CQE thus
// says nothing about the event yet: the test waits for each one before
// it arms again. Arming earlier would be merged into the arm the daemon
// has not yet taken, one event for both, as ibv_req_notify_cq allows (an
// event after every arm, not one per arm); under -race on a loaded
// machine that made 599 events of 600.
func TestWakePipesNeverBlock(t *testing.T) {
	n := newNIC(t, looptest.Get(t).String())
	c := n.client(t)
	var pd, ch abi.Handle
	call(t, c, abi.KindAllocPD, &abi.Empty{}, nil, &pd)
	chFDs := call(t, c, abi.KindCreateChannel, &abi.Empty{}, nil, &ch)
	var cq abi.RingReply
	cqFDs := call(t, c, abi.KindCreateCQ, &abi.CreateCQReq{CQE: 64, Channel: ch.H}, nil, &cq)
	if len(chFDs) != 1 || len(cqFDs) != 2 {
		t.Fatalf("%d and %d descriptors, want a wake pipe and a ring with one", len(chFDs), len(cqFDs))
	}
	wakes := []int{chFDs[0], cqFDs[1]}
	for _, fd := range wakes {
		defer unix.Close(fd)
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFIFO {
			t.Fatalf("wake descriptor: mode %#o, %v; want a pipe", st.Mode, err)
		}
		if _, err := unix.Write(fd, []byte{0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}); err == nil {
			t.Fatal("the client could write its wake pipe")
		}
		if err := unix.SetNonblock(fd, false); err != nil {
			t.Fatal(err)
		}
	}
	q := &rawQP{}
	call(t, c, abi.KindRegMR, &abi.RegMRReq{PD: pd.H, Access: 0xf, Length: 1 << 16, IOVA: 0x10000},
		[]int{sealedMemfd(t, 1<<16, true)}, &q.mr)
	q.cq = ringOf(t, mapFD(t, cqFDs[:1]), cq.Send)
	q.create(t, c, pd.H, cq.H, n.addr)
	var cons uint32
	const writes = 600 // 4,800 bytes of wake-ups into each 4,096-byte pipe
	for i := range writes {
		q.cq.SetArmed(abi.ArmAny)
		q.cq.SetWaiting(true)
		q.post(t, c, &ib.SendWR{WRID: uint64(i), Opcode: ib.WRRDMAWrite, Flags: ib.SendSignaled,
			SGL: []ib.SGE{{Addr: 0x10000, Length: 8, LKey: q.mr.LKey}}, RemoteAddr: 0x18000, RKey: q.mr.RKey}, nil)
		if wc := poll(t, q.cq, &cons); wc.WRID != uint64(i) || wc.Status != ib.WCSuccess {
			t.Fatalf("completion %d: %v", i, &wc)
		}
		// Exactly one event per arm, and the waiter taken: a second
		// event or a lost one shows here, at the WRITE that caused it.
		eventually(t, "the completion's event and wake-up", func() bool {
			return q.cq.Events() >= uint32(i+1) && q.cq.Load(abi.RingWaiting) == 0
		})
		if ev := q.cq.Events(); ev != uint32(i+1) {
			t.Fatalf("%d completion events after %d armed completions", ev, i+1)
		}
	}
	if ev := q.cq.Events(); ev != writes {
		t.Fatalf("%d completion events, want %d", ev, writes)
	}
	for _, fd := range wakes {
		// TIOCINQ is FIONREAD: the bytes waiting in the pipe.
		if n, err := unix.IoctlGetInt(fd, unix.TIOCINQ); err != nil || n != os.Getpagesize() {
			t.Fatalf("wake pipe holds %d bytes, %v; want it full (%d)", n, err, os.Getpagesize())
		}
	}
}
