package hostif

import (
	"maps"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rnicd/rnicd/abi"
	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/internal/looptest"
)

// shmSegment makes a System V segment of n bytes and, unless attach is
// false, attaches it (SHM_RDONLY if ro); it returns the id and the
// attachment.
func shmSegment(t *testing.T, n int, attach, ro bool) (int, []byte) {
	t.Helper()
	id, err := unix.SysvShmGet(unix.IPC_PRIVATE, n, unix.IPC_CREAT|0o600)
	if err != nil {
		t.Skipf("System V shared memory: %v", err)
	}
	t.Cleanup(func() { unix.SysvShmCtl(id, unix.IPC_RMID, nil) })
	if !attach {
		return id, nil
	}
	flag := 0
	if ro {
		flag = unix.SHM_RDONLY
	}
	mem, err := unix.SysvShmAttach(id, 0, flag)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.SysvShmDetach(mem) })
	return id, mem
}

func nattch(t *testing.T, id int) uint64 {
	t.Helper()
	var ds unix.SysvShmDesc
	if _, err := unix.SysvShmCtl(id, unix.IPC_STAT, &ds); err != nil {
		t.Fatal(err)
	}
	return uint64(ds.Nattch)
}

// TestRegMRShm: a region in a System V segment the client has attached
// is registered by attaching the same segment (one more attachment while
// the region lives, none after dereg_mr or the client's end); a segment
// the client has not attached, a range past its attachment, and write
// access to a read-only attachment are refused and change nothing.
func TestRegMRShm(t *testing.T) {
	n := newNIC(t, looptest.Get(t).String())
	c := n.client(t)
	var pd abi.Handle
	call(t, c, abi.KindAllocPD, &abi.Empty{}, nil, &pd)
	const size = 3 * 4096
	id, mem := shmSegment(t, size, true, false)
	base := uint64(uintptr(unsafePointer(mem)))
	rw := uint32(ib.AccessLocalWrite | ib.AccessRemoteWrite | ib.AccessRemoteRead)

	var mr abi.RegMRReply
	call(t, c, abi.KindRegMRShm, &abi.RegMRShmReq{PD: pd.H, Access: rw, ShmID: uint32(id), Addr: base + 100, Length: 5000, IOVA: base + 100}, nil, &mr)
	if got := nattch(t, id); got != 2 {
		t.Fatalf("segment attached %d times with the region registered, want 2 (the client's and the daemon's)", got)
	}
	call(t, c, abi.KindDeregMR, &abi.Handle{H: mr.H}, nil, &abi.Empty{})
	if got := nattch(t, id); got != 1 {
		t.Fatalf("segment attached %d times after dereg_mr, want 1", got)
	}

	objs := n.srv.Objects()
	other, _ := shmSegment(t, size, false, false)
	roID, roMem := shmSegment(t, size, true, true)
	roBase := uint64(uintptr(unsafePointer(roMem)))
	for _, tc := range []struct {
		name string
		req  abi.RegMRShmReq
	}{
		{"a segment the client has not attached", abi.RegMRShmReq{ShmID: uint32(other), Addr: base, Length: 4096, Access: rw}},
		{"another segment's id", abi.RegMRShmReq{ShmID: uint32(roID), Addr: base, Length: 4096, Access: rw}},
		{"past the attachment", abi.RegMRShmReq{ShmID: uint32(id), Addr: base + 4096, Length: size, Access: rw}},
		{"before the attachment", abi.RegMRShmReq{ShmID: uint32(id), Addr: base - 1, Length: 2, Access: rw}},
		{"write access to a read-only attachment", abi.RegMRShmReq{ShmID: uint32(roID), Addr: roBase, Length: 4096, Access: uint32(ib.AccessLocalWrite)}},
		{"an address that wraps", abi.RegMRShmReq{ShmID: uint32(id), Addr: ^uint64(0), Length: 2, Access: rw}},
		{"zero length", abi.RegMRShmReq{ShmID: uint32(id), Addr: base, Length: 0, Access: rw}},
		{"access flags", abi.RegMRShmReq{ShmID: uint32(id), Addr: base, Length: 4096, Access: 1 << 20}},
	} {
		tc.req.PD = pd.H
		_, err := c.Call(abi.KindRegMRShm, &tc.req, nil, &abi.RegMRReply{})
		wantCode(t, tc.name, err, abi.CodeInvalid)
		if got := n.srv.Objects(); !maps.Equal(got, objs) {
			t.Fatalf("%s changed the objects: %v", tc.name, got)
		}
	}
	if nattch(t, id) != 1 || nattch(t, roID) != 1 || nattch(t, other) != 0 {
		t.Fatal("a refused registration left the daemon attached to a segment")
	}
	// Read-only access to a read-only attachment is fine.
	call(t, c, abi.KindRegMRShm, &abi.RegMRShmReq{PD: pd.H, ShmID: uint32(roID), Addr: roBase, Length: 4096}, nil, &mr)

	// The client detaches and the region stays the daemon's to use;
	// the daemon lets go when the client's connection ends.
	call(t, c, abi.KindRegMRShm, &abi.RegMRShmReq{PD: pd.H, Access: rw, ShmID: uint32(id), Addr: base, Length: size}, nil, &mr)
	if err := unix.SysvShmDetach(mem); err != nil {
		t.Fatal(err)
	}
	if got := nattch(t, id); got != 1 {
		t.Fatalf("segment attached %d times after the client detached, want the daemon's 1", got)
	}
	c.Close()
	for i := 0; i < 1000 && (nattch(t, id) != 0 || nattch(t, roID) != 1); i++ {
		unixSleep()
	}
	if nattch(t, id) != 0 || nattch(t, roID) != 1 {
		t.Fatalf("after the client closed: segments attached %d and %d times, want 0 and the client's 1", nattch(t, id), nattch(t, roID))
	}
}

func unsafePointer(b []byte) unsafe.Pointer { return unsafe.Pointer(&b[0]) }

func unixSleep() { time.Sleep(time.Millisecond) }
