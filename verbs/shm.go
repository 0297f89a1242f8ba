package verbs

import (
	"fmt"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// shared is memory the application and the NIC both map: a memfd, sealed
// against shrinking so that the NIC's mapping can never fault, mapped
// here once; RegMR hands the NIC the descriptor and the NIC maps it too.
// The two mappings are different addresses for the same pages, as a
// buffer and its DMA mapping are.
type shared struct {
	fd  int
	app []byte
}

// allocs tracks a Context's shared memory by the address of its mapping.
type allocs struct {
	mu sync.Mutex
	m  map[uintptr]*shared
}

func (a *allocs) alloc(n int) (*shared, error) {
	fd, err := unix.MemfdCreate("rnic-buf", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("verbs: memfd_create: %w", err)
	}
	s := &shared{fd: fd}
	if err := unix.Ftruncate(fd, int64(n)); err != nil {
		s.free()
		return nil, fmt.Errorf("verbs: size %d bytes: %w", n, err)
	}
	// rnicd maps only a memfd that cannot shrink under it (an access
	// past the end would be its SIGBUS); the size is fixed, so sealed.
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err != nil {
		s.free()
		return nil, fmt.Errorf("verbs: seal memfd: %w", err)
	}
	if s.app, err = unix.Mmap(fd, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err != nil {
		s.free()
		return nil, fmt.Errorf("verbs: mmap %d bytes: %w", n, err)
	}
	a.mu.Lock()
	if a.m == nil {
		a.m = make(map[uintptr]*shared)
	}
	a.m[uintptr(Addr(s.app))] = s
	a.mu.Unlock()
	return s, nil
}

// find returns the shared memory b lies in and b's offset in it.
func (a *allocs) find(b []byte) (*shared, int, error) {
	p := uintptr(Addr(b))
	a.mu.Lock()
	defer a.mu.Unlock()
	for base, s := range a.m {
		if p >= base && p+uintptr(len(b)) <= base+uintptr(len(s.app)) {
			return s, int(p - base), nil
		}
	}
	return nil, 0, ErrNotShared
}

func (a *allocs) release(b []byte) error {
	a.mu.Lock()
	s, ok := a.m[uintptr(Addr(b))]
	delete(a.m, uintptr(Addr(b)))
	a.mu.Unlock()
	if !ok {
		return ErrNotShared
	}
	return s.free()
}

func (a *allocs) releaseAll() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for k, s := range a.m {
		s.free()
		delete(a.m, k)
	}
}

func (s *shared) free() error {
	var first error
	if s.app != nil {
		first = unix.Munmap(s.app)
		s.app = nil
	}
	if err := unix.Close(s.fd); err != nil && first == nil {
		first = err
	}
	return first
}

// Addr is the virtual address of b's first byte: what an SGE or a remote
// peer uses for it. b must not be empty.
func Addr(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) }

// Alloc returns n bytes of memory the NIC can share, zeroed. Register it
// (or slices of it) with RegMR; give it back with Free.
func (c *Context) Alloc(n int) ([]byte, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	if n <= 0 {
		return nil, fmt.Errorf("verbs: alloc %d bytes", n)
	}
	s, err := c.mem.alloc(n)
	if err != nil {
		return nil, err
	}
	return s.app, nil
}

// Free gives back memory from Alloc. A region still registered keeps the
// NIC's own mapping until it is deregistered.
func (c *Context) Free(b []byte) error { return c.mem.release(b) }
