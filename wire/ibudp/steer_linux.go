package ibudp

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"
)

// Steering is the receive-side steering of a ModeUDP port opened with
// Config.Steered, as a multi-queue NIC steers each flow to its own queue:
// the port's socket and the others it opens share UDP 4791 (a SO_REUSEPORT
// group), and for every datagram an eBPF program in the kernel reads the
// BTH's destination QP and picks the socket that owns it.
//
// Every socket of the group is the port owner's, for queues of its own
// (engine threads, each with its QPN blocks): none may be passed to
// another process. A member of the group receives whatever the program
// steers to it, and may connect() to take a peer's flow, attach its own
// SO_ATTACH_REUSEPORT_CBPF to take the whole port's traffic, or detach
// the program: a client that held one could read every QP's packets
// (payload, VA and rkey included), which no NIC allows. Linux lets only
// sockets of the same effective UID join the group, so a client running
// as another user cannot join it itself.
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
//
// The program and the map are made with github.com/cilium/ebpf, its asm
// package for the instructions: the ecosystem's pure-Go library (the
// build stays CGO_ENABLED=0) in place of hand-assembled instruction bytes
// and a hand-rolled bpf(2) wrapper that had to keep its attribute memory
// where the garbage collector would not move it. The program it builds is
// the same 28 instructions, byte for byte. Measured at the switch
// (v0.22.0): rnicd grows from 17.00 to 18.40 MB and rnic from 16.70 to
// 18.12 MB (+1.4 MB, +8%); a cold build of
// cmd/rnicd takes 54 s of CPU instead of 47 (+15%, once: the module is
// cached after); a steered port opens in 0.8-0.9 ms either way; the data
// path never calls the library (the kernel runs the program). Safer code
// we no longer maintain was judged worth the 1.4 MB.
type Steering struct {
	addr  netip.AddrPort
	scope uint32
	setup func(fd int) error // options of a group member's socket, before bind

	mu     sync.Mutex
	socks  *ebpf.Map     // block -> socket (REUSEPORT_SOCKARRAY)
	prog   *ebpf.Program // the selector
	lent   [SteerBlocks]bool
	closed bool
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

// bthDestQPHigh is the offset of the top byte of the BTH's DestQP from the
// UDP header, where the program's packet data begins.
const bthDestQPHigh = 8 + 5

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
func steerProgram(socks *ebpf.Map) asm.Instructions {
	// selectAt selects the socket of the key at fp-4; the result is in r0.
	selectAt := func() asm.Instructions {
		return asm.Instructions{
			asm.Mov.Reg(asm.R1, asm.R6),
			asm.LoadMapPtr(asm.R2, socks.FD()),
			asm.Mov.Reg(asm.R3, asm.RFP),
			asm.Add.Imm(asm.R3, -4),
			asm.Mov.Imm(asm.R4, 0),
			asm.FnSkSelectReuseport.Call(),
		}
	}
	// In an SK_REUSEPORT program helper 26 is sk_reuseport_load_bytes,
	// which reads from the UDP header on.
	prog := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.Mov.Imm(asm.R2, bthDestQPHigh),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, -8),
		asm.Mov.Imm(asm.R4, 1),
		asm.FnSkbLoadBytes.Call(),
		asm.Mov.Imm(asm.R7, 0),
		asm.JNE.Imm(asm.R0, 0, "key"),
		asm.LoadMem(asm.R7, asm.RFP, -8, asm.Byte),
		asm.StoreMem(asm.RFP, -4, asm.R7, asm.Word).WithSymbol("key"),
	}
	prog = append(prog, selectAt()...)
	prog = append(prog, asm.JEq.Imm(asm.R0, 0, "pass"),
		asm.StoreImm(asm.RFP, -4, 0, asm.Word))
	prog = append(prog, selectAt()...)
	return append(prog,
		asm.Mov.Imm(asm.R0, 1).WithSymbol("pass"), // SK_PASS
		asm.Return())
}

// newSteering makes the map and the program and attaches them to the
// group of fd, the port's bound socket, which takes block 0.
func newSteering(fd int, addr netip.AddrPort, scope uint32, setup func(fd int) error) (*Steering, error) {
	s := &Steering{addr: addr, scope: scope, setup: setup}
	s.mu.Lock()
	defer s.mu.Unlock()
	var err error
	s.socks, err = ebpf.NewMap(&ebpf.MapSpec{Name: "rnicd_steer", Type: ebpf.ReusePortSockArray,
		KeySize: 4, ValueSize: 8, MaxEntries: SteerBlocks}) // key: the block; value: a socket descriptor
	if err != nil {
		return nil, fmt.Errorf("ibudp: steering map: %w", err)
	}
	// On a refusal the library loads again with the verifier's log and
	// puts it in the error: it says why.
	s.prog, err = ebpf.NewProgram(&ebpf.ProgramSpec{Name: "rnicd_steer", Type: ebpf.SkReuseport,
		Instructions: steerProgram(s.socks), License: "GPL"})
	if err != nil {
		s.closeLocked()
		return nil, fmt.Errorf("ibudp: steering program: %w", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ATTACH_REUSEPORT_EBPF, s.prog.FD()); err != nil {
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
	if err := s.socks.Update(uint32(b), uint64(fd), ebpf.UpdateAny); err != nil {
		return fmt.Errorf("ibudp: steer block %d: %w", b, err)
	}
	return nil
}

// ErrNoBlock is returned by Lend when every block is lent.
var ErrNoBlock = errors.New("ibudp: every steering block is lent")

// Lend opens a socket on the port's address and UDP port, in the port's
// group, and steers the QPNs of a free block to it. The caller owns the
// socket, a non-blocking descriptor for the queue of this process that
// will run the block's QPs (Config.SocketFD; never to be passed to
// another process: see Steering), and must Release the block when that
// queue is done.
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
	// No key: the socket closed and left the map by itself.
	if err := s.socks.Delete(uint32(b)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("ibudp: release steering block %d: %w", b, err)
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
	if s.prog != nil {
		s.prog.Close()
		s.prog = nil
	}
	if s.socks != nil {
		s.socks.Close()
		s.socks = nil
	}
}
