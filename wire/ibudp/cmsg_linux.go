package ibudp

import (
	"encoding/binary"

	"golang.org/x/sys/unix"
)

// Control messages are read and written as bytes: a cmsghdr is a
// native-endian length (the width of a C long), a level and a type (int32
// each), then the data, each message padded to the word size.

const (
	cmsgHdrLen = unix.SizeofCmsghdr
	cmsgAlign  = unix.SizeofPtr
	ctrlLen    = 96 // per received message: TOS/TCLASS, SO_RXQ_OVFL and UDP_GRO, or PACKET_AUXDATA, with room to spare
	txCtrlLen  = 48 // per sent message: TOS/TCLASS and UDP_SEGMENT
)

func cmsgAlignUp(n int) int { return (n + cmsgAlign - 1) &^ (cmsgAlign - 1) }

func cmsgLenAt(b []byte) int {
	if cmsgHdrLen == 16 {
		v := binary.NativeEndian.Uint64(b)
		if v > uint64(len(b)) {
			return -1
		}
		return int(v)
	}
	return int(binary.NativeEndian.Uint32(b))
}

func putCmsgLen(b []byte, n int) {
	if cmsgHdrLen == 16 {
		binary.NativeEndian.PutUint64(b, uint64(n))
	} else {
		binary.NativeEndian.PutUint32(b, uint32(n))
	}
}

// rxCtrl is what a received datagram's control messages tell.
type rxCtrl struct {
	tos       uint8  // IP_TOS / IPV6_TCLASS
	haveTOS   bool   //
	drops     uint32 // SO_RXQ_OVFL: datagrams the socket dropped so far
	haveDrops bool
	gro       int // UDP_GRO: the datagram is a run of packets of this size
	// PACKET_AUXDATA (ModePacket): the packet's UDP checksum is not there
	// to check, because a local sender left it to an offload that never
	// ran (TP_STATUS_CSUMNOTREADY), or the driver checked it already
	// (TP_STATUS_CSUM_VALID).
	csumDone bool
}

// parseRxCtrl walks the control messages in b, ignoring any it does not
// know and stopping at the first that does not fit.
func parseRxCtrl(b []byte) rxCtrl {
	var c rxCtrl
	for len(b) >= cmsgHdrLen {
		l := cmsgLenAt(b)
		if l < cmsgHdrLen || l > len(b) {
			break
		}
		level := int32(binary.NativeEndian.Uint32(b[cmsgHdrLen-8:]))
		typ := int32(binary.NativeEndian.Uint32(b[cmsgHdrLen-4:]))
		data := b[cmsgHdrLen:l]
		switch {
		case level == unix.SOL_IP && typ == unix.IP_TOS && len(data) >= 1:
			c.tos, c.haveTOS = data[0], true
		case level == unix.SOL_IPV6 && typ == unix.IPV6_TCLASS && len(data) >= 4:
			c.tos, c.haveTOS = uint8(binary.NativeEndian.Uint32(data)), true
		case level == unix.SOL_SOCKET && typ == unix.SO_RXQ_OVFL && len(data) >= 4:
			c.drops, c.haveDrops = binary.NativeEndian.Uint32(data), true
		case level == unix.SOL_PACKET && typ == unix.PACKET_AUXDATA && len(data) >= 4:
			st := binary.NativeEndian.Uint32(data) // tpacket_auxdata.tp_status
			c.csumDone = st&(unix.TP_STATUS_CSUMNOTREADY|unix.TP_STATUS_CSUM_VALID) != 0
		case level == unix.SOL_UDP && typ == unix.UDP_GRO && len(data) >= 2:
			// An int on every kernel so far; its low 16 bits hold the size.
			if len(data) >= 4 {
				c.gro = int(int32(binary.NativeEndian.Uint32(data)))
			} else {
				c.gro = int(binary.NativeEndian.Uint16(data))
			}
			if c.gro < 0 {
				c.gro = 0
			}
		}
		next := cmsgAlignUp(l)
		if next >= len(b) {
			break
		}
		b = b[next:]
	}
	return c
}

// putTOSCmsg writes one control message setting the TOS (IP_TOS) or, for
// IPv6, the traffic class (IPV6_TCLASS) of a sent datagram, and returns its
// length, or 0 if b is too short.
func putTOSCmsg(b []byte, v6 bool, tos uint8) int {
	space := cmsgAlignUp(cmsgHdrLen + 4)
	if len(b) < space {
		return 0
	}
	clear(b[:space])
	putCmsgLen(b, cmsgHdrLen+4)
	level, typ := int32(unix.SOL_IP), int32(unix.IP_TOS)
	if v6 {
		level, typ = unix.SOL_IPV6, unix.IPV6_TCLASS
	}
	binary.NativeEndian.PutUint32(b[cmsgHdrLen-8:], uint32(level))
	binary.NativeEndian.PutUint32(b[cmsgHdrLen-4:], uint32(typ))
	binary.NativeEndian.PutUint32(b[cmsgHdrLen:], uint32(tos))
	return space
}
