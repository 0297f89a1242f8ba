package lend

import (
	"errors"
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The area's layout, little-endian (the host's order: both ends run on
// one machine). Each word one side writes and the other polls sits on a
// cache line of its own.
const (
	magic   = 0x444e454c43494e52 // "RNICLEND"
	version = 1

	offMagic   = 0   // u64
	offVersion = 8   // u32
	offTrace   = 64  // u32: 1 while the daemon's trace has a reader
	offCapture = 128 // u32: 1 while the daemon captures packets
	offFault   = 192 // u32: fault generation, odd while the daemon writes the faults
	offFaults  = 256 // two encoded Faults, TX then RX (faultsLen each)
	faultsLen  = 96
	offReq     = 512 // u32: the daemon's request generation (futex)
	offAns     = 576 // u32: the borrower's last answered generation (futex)
	offPubSeq  = 640 // u32: snapshot sequence lock, odd while the borrower writes

	offNCounters = 704 // u32
	offCounters  = 768 // MaxCounters entries of counterLen
	counterLen   = 48  // name (counterNameLen bytes, NUL padded) + u64
	// MaxCounters bounds the counters a borrower publishes: a device has
	// about 60 (rxe's, the drop reasons, flowctl's).
	MaxCounters    = 128
	counterNameLen = 40

	offFaultStats  = offCounters + MaxCounters*counterLen // 2 directions * faultCountsLen
	faultCountsLen = 16 * 8

	offRingHead = 8192 // u64: consumer (daemon) position
	offRingTail = 8256 // u64: producer (borrower) position
	offRingLost = 8320 // u64: trace events the borrower could not fit
	offPktLost  = 8328 // u64: packet copies the borrower could not fit
	offNQPs     = 8384 // u32: rows in the QP table

	offRing = 16384
	// RingLen is the bytes of trace events and packets in flight: about
	// 250 ms of a QP at 100 Mbit/s traced and captured (1.6 KB a packet
	// of MTU 1024 with its eight events); 60 ms at a quarter of this
	// lost records in tests on a loaded 2-core machine.
	RingLen = 4 << 20

	offQPs   = offRing + RingLen
	qpRowLen = 64
	// MaxQPs is the rows the QP table holds: a borrower's whole QPN block
	// (ibudp.Steering, 65,536 QPNs).
	MaxQPs = 1 << 16

	// Size is the area's length: about 8 MiB of a sparse memfd, of which
	// a borrower with a few QPs touches a few pages until the daemon
	// traces or captures.
	Size = offQPs + MaxQPs*qpRowLen
)

// Area is the shared memory of one lent socket, mapped by either side.
type Area struct {
	mem []byte
}

// Create makes a new area for a borrower: a memfd of Size bytes, mapped
// here. The caller hands fd to the borrower and closes it.
func Create() (fd int, a *Area, err error) {
	fd, err = unix.MemfdCreate("rnicd-lend", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return -1, nil, fmt.Errorf("lend: memfd: %w", err)
	}
	if err := unix.Ftruncate(fd, Size); err != nil {
		unix.Close(fd)
		return -1, nil, fmt.Errorf("lend: size the area: %w", err)
	}
	// The borrower must not shrink it under the daemon's mapping (a
	// SIGBUS in the daemon): seal its size.
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err != nil {
		unix.Close(fd)
		return -1, nil, fmt.Errorf("lend: seal the area: %w", err)
	}
	mem, err := unix.Mmap(fd, 0, Size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return -1, nil, fmt.Errorf("lend: map the area: %w", err)
	}
	a = &Area{mem: mem}
	a.u32(offVersion).Store(version)
	atomic.StoreUint64((*uint64)(unsafe.Pointer(&mem[offMagic])), magic)
	return fd, a, nil
}

// Map maps the area a daemon handed out in fd; fd may be closed after.
func Map(fd int) (*Area, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("lend: area: %w", err)
	}
	if st.Size != Size {
		return nil, fmt.Errorf("lend: area of %d bytes, want %d (a daemon of another version?)", st.Size, Size)
	}
	mem, err := unix.Mmap(fd, 0, Size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("lend: map the area: %w", err)
	}
	a := &Area{mem: mem}
	if m := atomic.LoadUint64((*uint64)(unsafe.Pointer(&mem[offMagic]))); m != magic || a.u32(offVersion).Load() != version {
		unix.Munmap(mem)
		return nil, errors.New("lend: the area is not a lend area of this version")
	}
	return a, nil
}

// Close unmaps the area. Nothing of it may be used after.
func (a *Area) Close() error {
	if a.mem == nil {
		return nil
	}
	err := unix.Munmap(a.mem)
	a.mem = nil
	return err
}

// u32 is the word at off, for atomic access; off is a multiple of 4.
func (a *Area) u32(off int) *atomic.Uint32 { return (*atomic.Uint32)(unsafe.Pointer(&a.mem[off])) }

// u64 is the word at off; off is a multiple of 8.
func (a *Area) u64(off int) *atomic.Uint64 { return (*atomic.Uint64)(unsafe.Pointer(&a.mem[off])) }

// TraceWord is the word that says the daemon's trace has a reader: the
// borrower's tracer reads it as its own flag (trace.NewForward).
func (a *Area) TraceWord() *atomic.Uint32 { return a.u32(offTrace) }

var errClosed = errors.New("lend: the registry is closed")
