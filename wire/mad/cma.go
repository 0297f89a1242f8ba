package mad

import (
	"fmt"
	"net/netip"
)

// rdma_cm's conventions on top of the CM (Linux drivers/infiniband/core/
// cma.c, include/rdma/rdma_cm.h): how an IP port becomes a service ID, and
// the header rdma_cm puts at the front of a REQ's private data so that the
// passive side learns the IP addresses and port of the connection.

// PortSpace is an rdma_cm port space (enum rdma_ucm_port_space).
type PortSpace uint16

const (
	PSIPoIB PortSpace = 0x0002
	PSIB    PortSpace = 0x013f
	PSTCP   PortSpace = 0x0106 // RC connections: rping, perftest -R
	PSUDP   PortSpace = 0x0111 // UD through SIDR
)

// RDMAUDPQKey is the Q_Key of every UD QP in rdma_cm's UDP port space
// (rdma_cm.h RDMA_UDP_QKEY): librdmacm puts it on the QP at INIT, and the
// passive side's SIDR_REP names it (cma.c cma_set_qkey). Having the MSB
// clear, it is a Q_Key a WR may name (IBTA 10.2.5: the MSB set means
// "take the QP's own").
const RDMAUDPQKey = 0x01234567

// ipServiceIDMask keeps the part of a service ID that is the same for
// every IP-based service: 0x0000000001xx0000 (cma.c RDMA_IB_IP_PS_MASK
// without the port space byte).
const ipServiceIDPrefix = 0x0000000001000000

// ServiceID returns the CM service ID of an rdma_cm port: the port space
// in bits 16-31, the port in bits 0-15 (cma.c cma_get_service_id). rping's
// port 7174 in the TCP space is 0x0000000001061c06.
func ServiceID(ps PortSpace, port uint16) uint64 {
	return uint64(ps)<<16 | uint64(port)
}

// SplitServiceID is the inverse of ServiceID. ok is false for a service
// ID that is not rdma_cm's IP form (top 40 bits other than 0x0000000001).
func SplitServiceID(id uint64) (ps PortSpace, port uint16, ok bool) {
	if id&^0xffffff != ipServiceIDPrefix {
		return 0, 0, false
	}
	return PortSpace(id >> 16), uint16(id), true
}

// CMA header constants (cma.c: CMA_VERSION, struct cma_hdr).
const (
	CMAVersion = 0x00
	CMAHdrLen  = 36
	// CMAUserPrivateDataLen is what a REQ's private data leaves to the
	// application after the cma_hdr (rdma_connect allows 56 bytes on IB).
	CMAUserPrivateDataLen = REQPrivateDataLen - CMAHdrLen
)

// CMAHdr is a view of rdma_cm's header at the front of a REQ's (and a
// SIDR_REQ's) private data:
//
//	byte 0      cma version (0)
//	byte 1      IP version (4 or 6) in the top 4 bits
//	bytes 2-3   the active side's source port
//	bytes 4-19  source address (IPv4 in bytes 16-19, the rest zero)
//	bytes 20-35 destination address (likewise)
//
// The destination port is in the service ID, not here.
type CMAHdr []byte

// CMAHdrError reports a cma_hdr that rdma_cm would refuse.
type CMAHdrError struct {
	Len       int
	Version   uint8
	IPVersion uint8
}

func (e *CMAHdrError) Error() string {
	if e.Len < CMAHdrLen {
		return fmt.Sprintf("mad: %d bytes are too short for a cma_hdr (%d bytes)", e.Len, CMAHdrLen)
	}
	if e.Version != CMAVersion {
		return fmt.Sprintf("mad: cma_hdr version %d, want %d", e.Version, CMAVersion)
	}
	return fmt.Sprintf("mad: cma_hdr IP version %d is neither 4 nor 6", e.IPVersion)
}

// ParseCMAHdr returns the cma_hdr view at the front of b, a REQ's private
// data. Like cma.c's cma_get_net_info it refuses a version other than 0
// and an IP version other than 4 or 6.
func ParseCMAHdr(b []byte) (CMAHdr, error) {
	if len(b) < CMAHdrLen {
		return nil, &CMAHdrError{Len: len(b)}
	}
	h := CMAHdr(b[:CMAHdrLen])
	if v := h.IPVersion(); h.Version() != CMAVersion || v != 4 && v != 6 {
		return nil, &CMAHdrError{Len: len(b), Version: h.Version(), IPVersion: v}
	}
	return h, nil
}

func (h CMAHdr) Version() uint8   { return h[0] }
func (h CMAHdr) IPVersion() uint8 { return h[1] >> 4 }
func (h CMAHdr) SrcPort() uint16  { return be.Uint16(h[2:]) }
func (h CMAHdr) SrcAddr() netip.Addr {
	return cmaAddr(h.IPVersion(), h[4:20])
}
func (h CMAHdr) DstAddr() netip.Addr {
	return cmaAddr(h.IPVersion(), h[20:36])
}

// UserData is the application's part of the private data after the header.
func (h CMAHdr) UserData(privateData []byte) []byte { return privateData[CMAHdrLen:] }

func cmaAddr(ipVer uint8, b []byte) netip.Addr {
	if ipVer == 4 {
		return netip.AddrFrom4([4]byte(b[12:16]))
	}
	return netip.AddrFrom16([16]byte(b[:16]))
}

// EncodeCMAHdr writes rdma_cm's header for a connection from src:srcPort
// to dst into b, which must hold CMAHdrLen bytes. Both addresses must be
// of one family; an IPv4-mapped IPv6 address counts as IPv4, as rdma_cm
// sees it.
func EncodeCMAHdr(b []byte, src netip.Addr, srcPort uint16, dst netip.Addr) error {
	if len(b) < CMAHdrLen {
		return &CMAHdrError{Len: len(b)}
	}
	src, dst = src.Unmap(), dst.Unmap()
	if !src.IsValid() || !dst.IsValid() || src.Is4() != dst.Is4() {
		return fmt.Errorf("mad: cma_hdr needs two addresses of one family, have %v and %v", src, dst)
	}
	clear(b[:CMAHdrLen])
	b[0] = CMAVersion
	be.PutUint16(b[2:], srcPort)
	if src.Is4() {
		b[1] = 4 << 4
		s, d := src.As4(), dst.As4()
		copy(b[16:20], s[:])
		copy(b[32:36], d[:])
	} else {
		b[1] = 6 << 4
		s, d := src.As16(), dst.As16()
		copy(b[4:20], s[:])
		copy(b[20:36], d[:])
	}
	return nil
}

// GIDFromAddr returns the RoCEv2 GID of an IP address: the address itself
// for IPv6, the IPv4-mapped address for IPv4 (IBTA annex A17.4.5.1).
func GIDFromAddr(a netip.Addr) GID {
	return GID(a.As16())
}

// Addr returns the IP address a RoCEv2 GID stands for (IPv4 for an
// IPv4-mapped GID).
func (g GID) Addr() netip.Addr { return netip.AddrFrom16(g).Unmap() }
