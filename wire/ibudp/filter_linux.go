package ibudp

import (
	"fmt"
	"net/netip"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Classic BPF programs for the port's sockets. On an AF_PACKET SOCK_DGRAM
// socket the program sees the packet from its network header on.

const acceptLen = 0x40000 // bytes a matching packet keeps: all of it

// program is a BPF program under construction whose conditional jumps all
// lead forward to one final "drop".
type program struct {
	ins   []bpf.Instruction
	drops []int // indexes of the jumps to patch
}

func (p *program) add(in ...bpf.Instruction) { p.ins = append(p.ins, in...) }

// dropIf drops the packet if A satisfies cond against v.
func (p *program) dropIf(cond bpf.JumpTest, v uint32) {
	p.drops = append(p.drops, len(p.ins))
	p.ins = append(p.ins, bpf.JumpIf{Cond: cond, Val: v})
}

// assemble ends the program with "accept" and "drop" and assembles it.
func (p *program) assemble() ([]unix.SockFilter, error) {
	drop := len(p.ins) + 1
	for _, i := range p.drops {
		j := p.ins[i].(bpf.JumpIf)
		j.SkipTrue = uint8(drop - i - 1)
		p.ins[i] = j
	}
	p.add(bpf.RetConstant{Val: acceptLen}, bpf.RetConstant{Val: 0})
	raw, err := bpf.Assemble(p.ins)
	if err != nil {
		return nil, fmt.Errorf("ibudp: assembling BPF: %w", err)
	}
	out := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		out[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	return out, nil
}

// packetFilter accepts the packets an AF_PACKET port wants: not our own
// outgoing copies, arriving on one of ifindexes, IPv4 or IPv6 (as local is)
// carrying UDP, unfragmented, to local and UDP port port.
func packetFilter(local netip.Addr, port uint16, ifindexes []int) ([]unix.SockFilter, error) {
	var p program
	p.add(bpf.LoadExtension{Num: bpf.ExtType})
	p.dropIf(bpf.JumpEqual, unix.PACKET_OUTGOING)
	if len(ifindexes) > 0 {
		p.add(bpf.LoadExtension{Num: bpf.ExtInterfaceIndex})
		// Jump over the rest of the list on a match; drop after the last.
		for i, ix := range ifindexes[:len(ifindexes)-1] {
			p.add(bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(ix), SkipTrue: uint8(len(ifindexes) - 1 - i)})
		}
		p.dropIf(bpf.JumpNotEqual, uint32(ifindexes[len(ifindexes)-1]))
	}
	p.add(bpf.LoadExtension{Num: bpf.ExtProto})
	if local.Is4() {
		p.dropIf(bpf.JumpNotEqual, unix.ETH_P_IP)
		p.add(bpf.LoadAbsolute{Off: 9, Size: 1}) // protocol
		p.dropIf(bpf.JumpNotEqual, unix.IPPROTO_UDP)
		p.add(bpf.LoadAbsolute{Off: 6, Size: 2}) // flags, fragment offset
		p.dropIf(bpf.JumpBitsSet, 0x3fff)        // MF or an offset: a fragment
		a := local.As4()
		p.add(bpf.LoadAbsolute{Off: 16, Size: 4}) // destination
		p.dropIf(bpf.JumpNotEqual, uint32(a[0])<<24|uint32(a[1])<<16|uint32(a[2])<<8|uint32(a[3]))
		p.add(bpf.LoadMemShift{Off: 0})          // X = IP header length
		p.add(bpf.LoadIndirect{Off: 2, Size: 2}) // UDP destination port
		p.dropIf(bpf.JumpNotEqual, uint32(port))
	} else {
		p.dropIf(bpf.JumpNotEqual, unix.ETH_P_IPV6)
		p.add(bpf.LoadAbsolute{Off: 6, Size: 1}) // next header
		p.dropIf(bpf.JumpNotEqual, unix.IPPROTO_UDP)
		a := local.As16()
		for i := 0; i < 16; i += 4 {
			p.add(bpf.LoadAbsolute{Off: uint32(24 + i), Size: 4})
			p.dropIf(bpf.JumpNotEqual, uint32(a[i])<<24|uint32(a[i+1])<<16|uint32(a[i+2])<<8|uint32(a[i+3]))
		}
		p.add(bpf.LoadAbsolute{Off: 40 + 2, Size: 2}) // UDP destination port
		p.dropIf(bpf.JumpNotEqual, uint32(port))
	}
	return p.assemble()
}

// dropAllFilter drops everything: the socket that keeps a ModePacket port's
// UDP port bound is never read.
func dropAllFilter() []unix.SockFilter {
	return []unix.SockFilter{{Code: uint16(unix.BPF_RET | unix.BPF_K), K: 0}}
}

func attachFilter(fd int, prog []unix.SockFilter) error {
	fp := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if err := unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &fp); err != nil {
		return fmt.Errorf("ibudp: attaching BPF filter: %w", err)
	}
	return nil
}
