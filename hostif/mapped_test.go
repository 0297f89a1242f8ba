package hostif

import (
	"fmt"
	"maps"
	"os"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rnicd/rnicd/abi"
	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/internal/looptest"
)

func mmapT(t *testing.T, fd, n, prot, flags int) []byte {
	t.Helper()
	mem, err := unix.Mmap(fd, 0, n, prot, flags)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(mem) })
	return mem
}

// TestRegMRMapped: the client's MAP_SHARED anonymous memory, and a memfd
// it no longer holds open, are registered by the daemon opening the
// mapping itself (/proc/PID/map_files), the memfd sealed against
// shrinking; private memory, a range no one mapping covers, write access
// to a read-only mapping and a memfd that cannot be sealed are refused
// and change nothing. Opening map_files needs CAP_SYS_ADMIN or
// CAP_CHECKPOINT_RESTORE: without them every registration is refused.
func TestRegMRMapped(t *testing.T) {
	n := newNIC(t, looptest.Get(t).String())
	c := n.client(t)
	var pd abi.Handle
	call(t, c, abi.KindAllocPD, &abi.Empty{}, nil, &pd)
	const size = 3 * 4096
	rw := uint32(ib.AccessLocalWrite | ib.AccessRemoteWrite)
	addr := func(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(&b[0]))) }

	anon := mmapT(t, -1, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
	closed, err := unix.MemfdCreate("closed", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		t.Fatal(err)
	}
	unix.Ftruncate(closed, size)
	memfd := mmapT(t, closed, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	unix.Close(closed)

	base := n.srv.Objects()
	req := abi.RegMRMappedReq{PD: pd.H, Access: rw, Addr: addr(anon) + 100, Length: 5000}
	var mr abi.RegMRReply
	_, err = c.Call(abi.KindRegMRMapped, &req, nil, &mr)
	if os.Geteuid() != 0 {
		wantCode(t, "shared anonymous memory without the privilege to open map_files", err, abi.CodeInvalid)
		return
	}
	if err != nil {
		t.Fatalf("shared anonymous memory: %v", err)
	}
	call(t, c, abi.KindDeregMR, &abi.Handle{H: mr.H}, nil, &abi.Empty{})
	call(t, c, abi.KindRegMRMapped, &abi.RegMRMappedReq{PD: pd.H, Access: rw, Addr: addr(memfd) + 4096, Length: 4096}, nil, &mr)
	call(t, c, abi.KindDeregMR, &abi.Handle{H: mr.H}, nil, &abi.Empty{})
	// The memfd is sealed now: reopened through its mapping, it says so.
	fd, err := unix.Open("/proc/self/map_files/"+mapName(addr(memfd), size), unix.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	seals, _ := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	unix.Close(fd)
	if seals != unix.F_SEAL_SHRINK {
		t.Errorf("the registered memfd's seals: %#x, want F_SEAL_SHRINK", seals)
	}

	private := mmapT(t, -1, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	ro := mmapT(t, -1, size, unix.PROT_READ, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
	unsealable, err := unix.MemfdCreate("unsealable", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	unix.Ftruncate(unsealable, size)
	plain := mmapT(t, unsealable, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	unix.Close(unsealable)
	for _, tc := range []struct {
		name string
		req  abi.RegMRMappedReq
	}{
		{"private memory", abi.RegMRMappedReq{Access: rw, Addr: addr(private), Length: 4096}},
		{"past the mapping", abi.RegMRMappedReq{Access: rw, Addr: addr(anon) + 4096, Length: size}},
		{"nothing mapped", abi.RegMRMappedReq{Access: rw, Addr: 4096, Length: 4096}},
		{"write access to a read-only mapping", abi.RegMRMappedReq{Access: rw, Addr: addr(ro), Length: 4096}},
		{"a memfd that cannot be sealed", abi.RegMRMappedReq{Access: rw, Addr: addr(plain), Length: 4096}},
		{"a range that wraps", abi.RegMRMappedReq{Access: rw, Addr: ^uint64(0) - 10, Length: 100}},
	} {
		tc.req.PD = pd.H
		_, err := c.Call(abi.KindRegMRMapped, &tc.req, nil, &abi.RegMRReply{})
		wantCode(t, tc.name, err, abi.CodeInvalid)
		if got := n.srv.Objects(); !maps.Equal(got, base) {
			t.Fatalf("%s changed the objects: %v", tc.name, got)
		}
	}
	// A memfd the client maps read-only is not sealed for it.
	roFD, err := unix.MemfdCreate("ro", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		t.Fatal(err)
	}
	unix.Ftruncate(roFD, size)
	roMemfd := mmapT(t, roFD, size, unix.PROT_READ, unix.MAP_SHARED)
	_, err = c.Call(abi.KindRegMRMapped, &abi.RegMRMappedReq{PD: pd.H, Access: uint32(ib.AccessRemoteRead), Addr: addr(roMemfd), Length: 4096}, nil, &abi.RegMRReply{})
	wantCode(t, "an unsealed memfd mapped read-only", err, abi.CodeInvalid)
	if seals, _ := unix.FcntlInt(uintptr(roFD), unix.F_GET_SEALS, 0); seals != 0 {
		t.Errorf("a refused read-only memfd's seals: %#x, want none", seals)
	}
	unix.Close(roFD)
	// Read access alone to the read-only mapping is what it allows.
	call(t, c, abi.KindRegMRMapped, &abi.RegMRMappedReq{PD: pd.H, Access: uint32(ib.AccessRemoteRead), Addr: addr(ro), Length: 4096}, nil, &mr)
	call(t, c, abi.KindDeregMR, &abi.Handle{H: mr.H}, nil, &abi.Empty{})
}

// mapName is the name /proc/PID/map_files gives the mapping [a, a+n).
func mapName(a uint64, n int) string {
	return fmt.Sprintf("%x-%x", a, a+uint64(n))
}

// A mapping /proc/PID/maps names "/dev/zero (deleted)" is a client's
// tmpfs file as easily as the kernel's shared anonymous memory: in a
// mount namespace of its own (unprivileged user namespaces allow one) a
// client mounts a tmpfs at /dev, maps a file "zero" of it, unlinks it and
// keeps a descriptor to truncate it under the NIC, which faulted the
// daemon (SIGBUS). Such a file, an unlinked file of another tmpfs
// (/dev/shm here) under that name, is refused; the kernel's own shared
// anonymous memory still is not.
func TestUnshrinkableForgedAnonName(t *testing.T) {
	f, err := os.CreateTemp("/dev/shm", "zero")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	os.Remove(f.Name())
	var fs unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &fs); err != nil || fs.Type != unix.TMPFS_MAGIC {
		t.Fatalf("/dev/shm is not a tmpfs (%#x, %v): the test needs one", fs.Type, err)
	}
	mapping := func(fd int) clientMapping {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			t.Fatal(err)
		}
		return clientMapping{lo: 0x7f0000000000, hi: 0x7f0000001000, read: true, write: true, shared: true,
			major: unix.Major(st.Dev), minor: unix.Minor(st.Dev), ino: st.Ino, path: "/dev/zero (deleted)"}
	}
	if err := unshrinkable(int(f.Fd()), mapping(int(f.Fd()))); err == nil {
		t.Fatal("an unlinked file of another tmpfs named /dev/zero was taken for shared anonymous memory")
	}
	// The kernel's: the file behind the test's own MAP_SHARED|MAP_ANONYMOUS.
	if os.Geteuid() != 0 {
		return // map_files needs CAP_SYS_ADMIN: TestRegMRMapped says so
	}
	anon := mmapT(t, -1, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
	a := uint64(uintptr(unsafe.Pointer(&anon[0])))
	fd, err := unix.Open("/proc/self/map_files/"+mapName(a, len(anon)), unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unshrinkable(fd, mapping(fd)); err != nil {
		t.Fatalf("shared anonymous memory: %v", err)
	}
}
