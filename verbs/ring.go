package verbs

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/rnicd/rnicd/abi"
)

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// mapRing maps the ring memfd of a create reply and views the ring d.
func mapRing(fds []int, d abi.RingDesc) ([]byte, *abi.Ring, error) {
	if len(fds) != 1 {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return nil, nil, fmt.Errorf("verbs: reply carries %d descriptors, want a ring", len(fds))
	}
	defer unix.Close(fds[0])
	var st unix.Stat_t
	if err := unix.Fstat(fds[0], &st); err != nil || st.Size <= 0 {
		return nil, nil, fmt.Errorf("verbs: ring memfd: %v", err)
	}
	mem, err := unix.Mmap(fds[0], 0, int(st.Size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, nil, fmt.Errorf("verbs: map ring: %w", err)
	}
	if uint64(d.Offset)+uint64(d.Size) > uint64(len(mem)) {
		unix.Munmap(mem)
		return nil, nil, fmt.Errorf("verbs: ring at %d+%d outside %d bytes", d.Offset, d.Size, len(mem))
	}
	ring, err := abi.NewRing(mem[d.Offset:d.Offset+d.Size], d.Slots, d.SlotBytes)
	if err != nil {
		unix.Munmap(mem)
		return nil, nil, err
	}
	return mem, ring, nil
}
