package bth

// XRCETH is a view of the 4-byte XRC Extended Transport Header (IBTA
// annex A14.3.1, figure 1): a reserved byte, then the 24-bit number of
// the XRC SRQ at the target that the request is for. Every XRC request
// carries it right after the BTH; ACKs and READ responses do not.
type XRCETH []byte

// SRQN is the XRC SRQ number.
func (x XRCETH) SRQN() uint32 { return be.Uint32(x) & SRQNMask }

// Encode writes the SRQ number; the reserved byte is written as zero.
func (x XRCETH) Encode(srqn uint32) { be.PutUint32(x, srqn&SRQNMask) }

// SRQNMask keeps the 24 bits of an XRC SRQ number.
const SRQNMask = 0xffffff

// XRCETH returns the packet's XRCETH, nil if its opcode carries none.
func (p Packet) XRCETH() XRCETH { return p.ext(HdrXRCETH, XRCETHLen) }
