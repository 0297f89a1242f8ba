package hostif

import (
	"maps"
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rnicd/rnicd/abi"
	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/internal/looptest"
)

// A client that hangs up holding one of every object kind today's
// features added (its event queue, private and file-shared XRC domains,
// XRC SRQs, both XRC QPs, type 1 and 2 memory windows, a region
// registered through map_files) leaves nothing behind: no object, no
// charge, no shared domain.
func TestHangUpFreesNewObjects(t *testing.T) {
	n := newNIC(t, looptest.Get(t).String())
	baseObjs, baseHeld := n.srv.Objects(), held(n)
	c := n.client(t)
	openAsync(t, c)
	var pd, x, xf abi.Handle
	call(t, c, abi.KindAllocPD, &abi.Empty{}, nil, &pd)
	call(t, c, abi.KindOpenXRCD, &abi.Empty{}, nil, &x)
	f, err := os.Create(filepath.Join(t.TempDir(), "xrc_domain"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	call(t, c, abi.KindOpenXRCDFile, &abi.OpenXRCDFileReq{OFlags: unix.O_CREAT}, []int{int(f.Fd())}, &xf)
	var cq abi.RingReply
	closeAll(call(t, c, abi.KindCreateCQ, &abi.CreateCQReq{CQE: 4}, nil, &cq))
	for _, d := range []uint32{x.H, xf.H} {
		closeAll(call(t, c, abi.KindCreateXRCSRQ, &abi.CreateXRCSRQReq{PD: pd.H, XRCD: d, CQ: cq.H, MaxWR: 4, MaxSGE: 1}, nil, &abi.RingReply{}))
		closeAll(call(t, c, abi.KindCreateXRCQP, &abi.CreateXRCQPReq{Type: ib.QPTypeXRCRecv, XRCD: d}, nil, &abi.RingReply{}))
	}
	closeAll(call(t, c, abi.KindCreateXRCQP, &abi.CreateXRCQPReq{Type: ib.QPTypeXRCSend, PD: pd.H, SendCQ: cq.H,
		Caps: ib.QPCap{MaxSendWR: 4, MaxSendSGE: 1}}, nil, &abi.RingReply{}))
	for _, typ := range []uint32{1, 2} {
		call(t, c, abi.KindAllocMW, &abi.AllocMWReq{PD: pd.H, Type: typ}, nil, &abi.AllocMWReply{})
	}
	if os.Geteuid() == 0 { // map_files needs CAP_SYS_ADMIN
		anon := mmapT(t, -1, 8192, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
		call(t, c, abi.KindRegMRMapped, &abi.RegMRMappedReq{PD: pd.H, Access: uint32(ib.AccessLocalWrite),
			Addr: uint64(uintptr(unsafe.Pointer(&anon[0]))), Length: 8192}, nil, &abi.RegMRReply{})
	}
	if got := n.srv.Objects(); got["xrcd"] != 2 || got["mw"] != 2 || got["qp"] != 3 || got["srq"] != 2 {
		t.Fatalf("objects before the hang-up: %v", got)
	}
	c.Close()
	eventually(t, "the client's objects gone", func() bool { return maps.Equal(n.srv.Objects(), baseObjs) })
	eventually(t, "the client's charges refunded", func() bool { return maps.Equal(held(n), baseHeld) })
	// The file's domain went with its last open.
	other := n.client(t)
	_, err = other.Call(abi.KindOpenXRCDFile, &abi.OpenXRCDFileReq{}, []int{int(f.Fd())}, &abi.Handle{})
	wantCode(t, "open_xrcd without O_CREAT after its only holder hung up", err, abi.CodeInvalid)
}
