package ibudp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Steering is the receive-side steering of a ModeUDP port opened with
// Config.Steered, as a multi-queue NIC steers each flow to its own queue:
// the port's socket and the sockets it lends share UDP 4791 (a SO_REUSEPORT
// group), and for every datagram an eBPF program in the kernel reads the
// BTH's destination QP and picks the socket that owns it. A daemon lends a
// socket to a client that runs its QPs' data path in its own process; the
// client gets every packet for its QPs with no daemon in between.
//
// QPNs are steered by block: the top byte of the 24-bit QPN (SteerBlock).
// Block 0 is the port's own socket, and the program falls back to it for
// a block no socket owns, for a packet too short to carry a BTH, and for
// anything it cannot read. A block's socket is held in a
// BPF_MAP_TYPE_REUSEPORT_SOCKARRAY under the block's number; Release
// removes it, after which the socket gets nothing more, even if its
// holder keeps it open.
//
// Loading the program needs CAP_BPF (root).
type Steering struct {
	addr  netip.AddrPort
	scope uint32
	setup func(fd int) error // options of a lent socket, before bind

	mu     sync.Mutex
	mapFD  int
	progFD int
	lent   [SteerBlocks]bool
	closed bool
	// call is the memory of a bpf(2) call, under mu. The attributes hold
	// addresses of the rest, so it lives here, on the heap, where nothing
	// moves it (a goroutine's stack may move between the store and the call).
	call struct {
		attr    [128]byte
		key     uint32
		val     uint64
		license [4]byte
		log     [4096]byte
	}
}

// SteerBlocks is the number of QPN blocks, the port's block 0 included.
const SteerBlocks = 256

// SteerBlock is the steering block of qpn.
func SteerBlock(qpn uint32) uint8 { return uint8(qpn >> 16) }

// SteerBlockQPNs is the first and last QPN of block b.
func SteerBlockQPNs(b uint8) (first, last uint32) {
	return uint32(b) << 16, uint32(b)<<16 | 0xffff
}

// SteeringOf returns the steering of a port opened with Config.Steered,
// nil for any other port.
func SteeringOf(p Port) *Steering {
	if u, ok := p.(*udpPort); ok {
		return u.steer
	}
	return nil
}

// eBPF, as the kernel's uapi linux/bpf.h numbers it.
const (
	bpfFuncSKBLoadBytes      = 26 // sk_reuseport_load_bytes for this program type
	bpfFuncSKSelectReuseport = 82
	skPass                   = 1
	// bthDestQPHigh is the offset of the top byte of the BTH's DestQP
	// from the UDP header, where the program's packet data begins.
	bthDestQPHigh = 8 + 5
)

// bpfInsn is one eBPF instruction.
type bpfInsn struct {
	code     uint8
	dst, src uint8
	off      int16
	imm      int32
}

func (i bpfInsn) put(b []byte) {
	b[0] = i.code
	b[1] = i.dst | i.src<<4
	binary.LittleEndian.PutUint16(b[2:], uint16(i.off))
	binary.LittleEndian.PutUint32(b[4:], uint32(i.imm))
}

// steerProgram is the selector: key = top byte of the DestQP, select the
// socket at key, and if there is none (or the byte cannot be read), the
// one at key 0.
//
//	r6 = ctx
//	r0 = load_bytes(ctx, 13, fp-8, 1)
//	r7 = 0; if r0 == 0 { r7 = *(u8 *)(fp-8) }
//	*(u32 *)(fp-4) = r7
//	if sk_select_reuseport(ctx, map, fp-4, 0) != 0 {
//		*(u32 *)(fp-4) = 0
//		sk_select_reuseport(ctx, map, fp-4, 0)
//	}
//	return SK_PASS
func steerProgram(mapFD int) []byte {
	const (
		alu64K = unix.BPF_ALU64 | unix.BPF_K
		alu64X = unix.BPF_ALU64 | unix.BPF_X
		call   = unix.BPF_JMP | unix.BPF_CALL
		fp     = 10
	)
	mov := func(dst, src uint8) bpfInsn { return bpfInsn{code: alu64X | unix.BPF_MOV, dst: dst, src: src} }
	movK := func(dst uint8, imm int32) bpfInsn { return bpfInsn{code: alu64K | unix.BPF_MOV, dst: dst, imm: imm} }
	addK := func(dst uint8, imm int32) bpfInsn { return bpfInsn{code: alu64K | unix.BPF_ADD, dst: dst, imm: imm} }
	ldMap := []bpfInsn{
		{code: unix.BPF_LD | unix.BPF_DW | unix.BPF_IMM, dst: 2, src: unix.BPF_PSEUDO_MAP_FD, imm: int32(mapFD)},
		{},
	}
	selectAt := func() []bpfInsn {
		return append(append([]bpfInsn{mov(1, 6)}, ldMap...),
			mov(3, fp), addK(3, -4), movK(4, 0), bpfInsn{code: call, imm: bpfFuncSKSelectReuseport})
	}
	prog := []bpfInsn{
		mov(6, 1),
		movK(2, bthDestQPHigh), mov(3, fp), addK(3, -8), movK(4, 1),
		{code: call, imm: bpfFuncSKBLoadBytes},
		movK(7, 0),
		{code: unix.BPF_JMP | unix.BPF_JNE | unix.BPF_K, dst: 0, off: 1},
		{code: unix.BPF_LDX | unix.BPF_MEM | unix.BPF_B, dst: 7, src: fp, off: -8},
		{code: unix.BPF_STX | unix.BPF_MEM | unix.BPF_W, dst: fp, src: 7, off: -4},
	}
	prog = append(prog, selectAt()...)
	fallback := append([]bpfInsn{{code: unix.BPF_ST | unix.BPF_MEM | unix.BPF_W, dst: fp, off: -4}}, selectAt()...)
	prog = append(prog, bpfInsn{code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, dst: 0, off: int16(len(fallback))})
	prog = append(prog, fallback...)
	prog = append(prog, movK(0, skPass), bpfInsn{code: unix.BPF_JMP | unix.BPF_EXIT})
	b := make([]byte, 8*len(prog))
	for i, in := range prog {
		in.put(b[8*i:])
	}
	return b
}

// bpf runs bpf(2) with s.call.attr, which it clears after; mu is held.
func (s *Steering) bpf(cmd int) (int, error) {
	a := &s.call.attr
	r, _, e := unix.Syscall(unix.SYS_BPF, uintptr(cmd), uintptr(unsafe.Pointer(a)), uintptr(len(a)))
	*a = [len(a)]byte{}
	if e != 0 {
		return -1, e
	}
	return int(r), nil
}

func addr64(p unsafe.Pointer) uint64 { return uint64(uintptr(p)) }

// newSteering makes the map and the program and attaches them to the
// group of fd, the port's bound socket, which takes block 0.
func newSteering(fd int, addr netip.AddrPort, scope uint32, setup func(fd int) error) (*Steering, error) {
	s := &Steering{addr: addr, scope: scope, setup: setup, mapFD: -1, progFD: -1}
	s.mu.Lock()
	defer s.mu.Unlock()
	le := binary.LittleEndian
	a := s.call.attr[:]
	le.PutUint32(a[0:], unix.BPF_MAP_TYPE_REUSEPORT_SOCKARRAY)
	le.PutUint32(a[4:], 4) // key: the block
	le.PutUint32(a[8:], 8) // value: a socket descriptor
	le.PutUint32(a[12:], SteerBlocks)
	var err error
	if s.mapFD, err = s.bpf(unix.BPF_MAP_CREATE); err != nil {
		return nil, fmt.Errorf("ibudp: steering map: %w", os.NewSyscallError("bpf", err))
	}
	insns := steerProgram(s.mapFD) // made with a computed size: on the heap
	copy(s.call.license[:], "GPL\x00")
	le.PutUint32(a[0:], unix.BPF_PROG_TYPE_SK_REUSEPORT)
	le.PutUint32(a[4:], uint32(len(insns)/8))
	le.PutUint64(a[8:], addr64(unsafe.Pointer(&insns[0])))
	le.PutUint64(a[16:], addr64(unsafe.Pointer(&s.call.license[0])))
	le.PutUint32(a[24:], 1) // log level: the verifier says why it refuses
	le.PutUint32(a[28:], uint32(len(s.call.log)))
	le.PutUint64(a[32:], addr64(unsafe.Pointer(&s.call.log[0])))
	s.progFD, err = s.bpf(unix.BPF_PROG_LOAD)
	runtime.KeepAlive(insns)
	if err != nil {
		log := s.call.log[:]
		if i := bytes.IndexByte(log, 0); i >= 0 {
			log = log[:i]
		}
		s.closeLocked()
		return nil, fmt.Errorf("ibudp: steering program: %w (verifier: %q)", os.NewSyscallError("bpf", err), log)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ATTACH_REUSEPORT_EBPF, s.progFD); err != nil {
		s.closeLocked()
		return nil, fmt.Errorf("ibudp: attach steering program: %w", os.NewSyscallError("setsockopt", err))
	}
	if err := s.put(0, fd); err != nil {
		s.closeLocked()
		return nil, err
	}
	return s, nil
}

// put sets the socket of block b; mu is held.
func (s *Steering) put(b uint8, fd int) error {
	if err := s.elem(unix.BPF_MAP_UPDATE_ELEM, b, fd); err != nil {
		return fmt.Errorf("ibudp: steer block %d: %w", b, os.NewSyscallError("bpf", err))
	}
	return nil
}

// elem updates or deletes the map element of block b; mu is held.
func (s *Steering) elem(cmd int, b uint8, fd int) error {
	s.call.key, s.call.val = uint32(b), uint64(fd)
	a := s.call.attr[:]
	binary.LittleEndian.PutUint32(a[0:], uint32(s.mapFD))
	binary.LittleEndian.PutUint64(a[8:], addr64(unsafe.Pointer(&s.call.key)))
	if cmd == unix.BPF_MAP_UPDATE_ELEM {
		binary.LittleEndian.PutUint64(a[16:], addr64(unsafe.Pointer(&s.call.val)))
	}
	_, err := s.bpf(cmd)
	return err
}

// ErrNoBlock is returned by Lend when every block is lent.
var ErrNoBlock = errors.New("ibudp: every steering block is lent")

// Lend opens a socket on the port's address and UDP port, in the port's
// group, and steers the QPNs of a free block to it. The caller owns the
// socket, a non-blocking descriptor to hand to the process that will run
// the block's QPs (Config.SocketFD), and must Release the block when that
// process is done.
func (s *Steering) Lend() (block uint8, fd int, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, -1, errors.New("ibudp: steering of a closed port")
	}
	b := 1
	for b < SteerBlocks && s.lent[b] {
		b++
	}
	if b == SteerBlocks {
		return 0, -1, ErrNoBlock
	}
	fd, err = openUDPSocket(s.addr, s.scope, true, s.setup)
	if err != nil {
		return 0, -1, fmt.Errorf("ibudp: lend a socket: %w", err)
	}
	if err := s.put(uint8(b), fd); err != nil {
		unix.Close(fd)
		return 0, -1, err
	}
	s.lent[b] = true
	return uint8(b), fd, nil
}

// Release stops steering block b's QPNs to its socket: they go to the
// port's own socket again, and the block may be lent anew.
func (s *Steering) Release(b uint8) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b == 0 || !s.lent[b] {
		return fmt.Errorf("ibudp: steering block %d is not lent", b)
	}
	s.lent[b] = false
	if s.closed {
		return nil
	}
	// ENOENT: the socket closed and left the map by itself.
	if err := s.elem(unix.BPF_MAP_DELETE_ELEM, b, -1); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("ibudp: release steering block %d: %w", b, os.NewSyscallError("bpf", err))
	}
	return nil
}

func (s *Steering) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closeLocked()
}

func (s *Steering) closeLocked() {
	s.closed = true
	if s.progFD >= 0 {
		unix.Close(s.progFD)
		s.progFD = -1
	}
	if s.mapFD >= 0 {
		unix.Close(s.mapFD)
		s.mapFD = -1
	}
}
