package steer

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"
)

// Group is the receive-side steering of a ModeUDP port opened with
// ibudp.Config.Queues above 1, as a multi-queue NIC steers each flow to
// its own queue by RSS: the port's socket and the Queues-1 others it
// opens share UDP 4791 (a SO_REUSEPORT group), and for every datagram an
// eBPF program in the kernel reads the BTH's destination QP and picks the
// socket of that QP's queue, QueueOf(qpn, queues). Each queue is an
// engine thread of the port's owner with the QPs of its shard: the
// packets of a QP only ever reach the thread that owns it.
//
// The program selects only sockets of its own map, a
// BPF_MAP_TYPE_REUSEPORT_SOCKARRAY the owner fills (queue i's socket
// under key i), and drops a datagram whose queue has no socket there
// (SK_DROP): it never lets the kernel fall back to its hash over the
// group's members. So a socket that joins the group (Linux lets only
// sockets of the same effective UID join it) gets nothing the program
// steers. A member can still attach a program of its own, detach this
// one or connect() to a peer (a connected member wins the lookup): the
// group keeps out other users, not the owner's own uid, which can read
// the daemon's memory anyway. sk_lookup (BPF_PROG_TYPE_SK_LOOKUP) would
// keep out those too.
//
// Every socket of the group is the port owner's, for its own queues
// (Queue): none may be passed to another process.
//
// Loading the program needs CAP_BPF (root).
//
// The program and the map are made with github.com/cilium/ebpf, its asm
// package for the instructions: the ecosystem's pure-Go library (the
// build stays CGO_ENABLED=0) in place of hand-assembled instruction bytes
// and a hand-rolled bpf(2) wrapper that had to keep its attribute memory
// where the garbage collector would not move it. Measured at the switch
// (v0.22.0): rnicd grows from 17.00 to 18.40 MB and rnic from 16.70 to
// 18.12 MB (+1.4 MB, +8%); a cold build of cmd/rnicd takes 54 s of CPU
// instead of 47 (+15%, once: the module is cached after); a steered port
// opens in 0.8-0.9 ms either way; the data path never calls the library
// (the kernel runs the program).
type Group struct {
	queues int
	// open makes a new socket of the group: bound to the port's address
	// and UDP port with SO_REUSEPORT, the port's options set. The port
	// gives it, so that steering knows nothing of the port's sockets.
	open func() (fd int, err error)

	mu     sync.Mutex
	socks  *ebpf.Map     // queue -> socket (REUSEPORT_SOCKARRAY)
	prog   *ebpf.Program // the selector
	opened []bool        // queue i's socket was handed out (Queue)
	closed bool
}

// bthDestQPLow is the offset of the low byte of the BTH's DestQP from the
// UDP header, where the program's packet data begins.
const bthDestQPLow = 8 + 7

// steerProgram is the selector: key = low byte of the DestQP modulo
// queues (0 if the byte cannot be read: queue 0 counts the runt), select
// the socket at key, and drop the datagram if there is none.
//
//	r6 = ctx
//	r0 = load_bytes(ctx, 15, fp-8, 1)
//	r7 = 0; if r0 == 0 { r7 = *(u8 *)(fp-8) % queues }
//	*(u32 *)(fp-4) = r7
//	if sk_select_reuseport(ctx, map, fp-4, 0) != 0 { return SK_DROP }
//	return SK_PASS
func steerProgram(socks *ebpf.Map, queues int) asm.Instructions {
	// In an SK_REUSEPORT program helper 26 is sk_reuseport_load_bytes,
	// which reads from the UDP header on.
	return asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.Mov.Imm(asm.R2, bthDestQPLow),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, -8),
		asm.Mov.Imm(asm.R4, 1),
		asm.FnSkbLoadBytes.Call(),
		asm.Mov.Imm(asm.R7, 0),
		asm.JNE.Imm(asm.R0, 0, "key"),
		asm.LoadMem(asm.R7, asm.RFP, -8, asm.Byte),
		asm.Mod.Imm(asm.R7, int32(queues)),
		asm.StoreMem(asm.RFP, -4, asm.R7, asm.Word).WithSymbol("key"),
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.LoadMapPtr(asm.R2, socks.FD()),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, -4),
		asm.Mov.Imm(asm.R4, 0),
		asm.FnSkSelectReuseport.Call(),
		asm.JEq.Imm(asm.R0, 0, "pass"),
		asm.Mov.Imm(asm.R0, 0), // SK_DROP
		asm.Return(),
		asm.Mov.Imm(asm.R0, 1).WithSymbol("pass"), // SK_PASS
		asm.Return(),
	}
}

// New makes the map and the program and attaches them to the group of
// fd, the port's bound socket, which takes queue 0, for queues queues
// (2..MaxQueues). open makes the socket of another queue (Queue); the
// caller keeps fd, and closes the group (Close) before it.
func New(fd int, queues int, open func() (fd int, err error)) (*Group, error) {
	if queues < 2 || queues > MaxQueues {
		return nil, fmt.Errorf("steer: %d queues, want 2..%d", queues, MaxQueues)
	}
	s := &Group{queues: queues, open: open, opened: make([]bool, queues)}
	s.mu.Lock()
	defer s.mu.Unlock()
	var err error
	s.socks, err = ebpf.NewMap(&ebpf.MapSpec{Name: "rnicd_steer", Type: ebpf.ReusePortSockArray,
		KeySize: 4, ValueSize: 8, MaxEntries: uint32(queues)}) // key: the queue; value: a socket descriptor
	if err != nil {
		return nil, fmt.Errorf("steer: steering map: %w", err)
	}
	// On a refusal the library loads again with the verifier's log and
	// puts it in the error: it says why.
	s.prog, err = ebpf.NewProgram(&ebpf.ProgramSpec{Name: "rnicd_steer", Type: ebpf.SkReuseport,
		Instructions: steerProgram(s.socks, queues), License: "GPL"})
	if err != nil {
		s.closeLocked()
		return nil, fmt.Errorf("steer: steering program: %w", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ATTACH_REUSEPORT_EBPF, s.prog.FD()); err != nil {
		s.closeLocked()
		return nil, fmt.Errorf("steer: attach steering program: %w", os.NewSyscallError("setsockopt", err))
	}
	if err := s.put(0, fd); err != nil {
		s.closeLocked()
		return nil, err
	}
	s.opened[0] = true
	return s, nil
}

// put sets the socket of queue q; mu is held.
func (s *Group) put(q int, fd int) error {
	if err := s.socks.Update(uint32(q), uint64(fd), ebpf.UpdateAny); err != nil {
		return fmt.Errorf("steer: steer queue %d: %w", q, err)
	}
	return nil
}

// Queues is the number of queues the port steers to, its own included.
func (s *Group) Queues() int { return s.queues }

// Queue opens queue q's socket (1 <= q < Queues; the port's own is queue
// 0) on the port's address and UDP port, in the port's group, and steers
// the QPNs of q to it. The caller owns the socket, a non-blocking
// descriptor for the engine of this process that runs queue q
// (ibudp.Config.SocketFD; never to be passed to another process:
// see Group). Each queue is opened once; its QPNs' packets are dropped
// once its socket closes.
func (s *Group) Queue(q int) (fd int, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return -1, errors.New("steer: steering of a closed port")
	}
	if q < 1 || q >= s.queues {
		return -1, fmt.Errorf("steer: steering queue %d outside 1..%d", q, s.queues-1)
	}
	if s.opened[q] {
		return -1, fmt.Errorf("steer: steering queue %d is open already", q)
	}
	fd, err = s.open()
	if err != nil {
		return -1, fmt.Errorf("steer: queue %d's socket: %w", q, err)
	}
	if err := s.put(q, fd); err != nil {
		unix.Close(fd)
		return -1, err
	}
	s.opened[q] = true
	return fd, nil
}

// Close releases the program's and the map's descriptors (the kernel
// keeps the program attached until the group's last socket closes) and
// opens no more queues. The port closes it when it closes.
func (s *Group) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closeLocked()
}

func (s *Group) closeLocked() {
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
