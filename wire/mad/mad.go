package mad

import (
	"encoding/binary"
	"fmt"
)

var be = binary.BigEndian

// Sizes of a MAD (IBTA 13.4.2: every MAD on QP0 or QP1 is 256 bytes).
const (
	MADLen    = 256                // a whole MAD, header and data
	HeaderLen = 24                 // the common MAD header (struct ib_mad_hdr)
	DataLen   = MADLen - HeaderLen // the class data: a CM message
)

// Values of the MAD header for the Communication Manager (IBTA 13.4.2 and
// 12.6.1; Linux IB_MGMT_BASE_VERSION, IB_MGMT_CLASS_CM, IB_CM_CLASS_VERSION,
// IB_MGMT_METHOD_SEND).
const (
	BaseVersion    = 1
	ClassCM        = 0x07
	CMClassVersion = 2
	MethodSend     = 0x03
)

// GSI addressing (IBTA 13.5.1 and 10.2.4): QP1 receives every GSI MAD and
// accepts only datagrams with the well-known Q_Key.
const (
	GSIQPN  = 1
	GSIQKey = 0x80010000
)

// AttrID is a CM attribute ID: which message the MAD carries (IBTA table 104).
type AttrID uint16

// The CM attribute IDs (Linux CM_REQ_ATTR_ID ... CM_SIDR_REP_ATTR_ID). LAP and
// APR, for path migration, are named but have no view: RoCE has no
// alternate paths.
const (
	AttrREQ     AttrID = 0x0010
	AttrMRA     AttrID = 0x0011
	AttrREJ     AttrID = 0x0012
	AttrREP     AttrID = 0x0013
	AttrRTU     AttrID = 0x0014
	AttrDREQ    AttrID = 0x0015
	AttrDREP    AttrID = 0x0016
	AttrSIDRReq AttrID = 0x0017
	AttrSIDRRep AttrID = 0x0018
	AttrLAP     AttrID = 0x0019
	AttrAPR     AttrID = 0x001a
)

var attrNames = [...]string{
	AttrREQ: "REQ", AttrMRA: "MRA", AttrREJ: "REJ", AttrREP: "REP",
	AttrRTU: "RTU", AttrDREQ: "DREQ", AttrDREP: "DREP",
	AttrSIDRReq: "SIDR_REQ", AttrSIDRRep: "SIDR_REP", AttrLAP: "LAP", AttrAPR: "APR",
}

func (a AttrID) String() string {
	if int(a) < len(attrNames) && attrNames[a] != "" {
		return attrNames[a]
	}
	return fmt.Sprintf("attr(%#04x)", uint16(a))
}

// MAD is a view of a 256-byte management datagram. Its header (IBTA 13.4.2,
// figure 145):
//
//	byte 0      base version
//	byte 1      management class
//	byte 2      class version
//	byte 3      R(1) method(7)
//	bytes 4-5   status
//	bytes 6-7   class specific
//	bytes 8-15  transaction ID
//	bytes 16-17 attribute ID
//	bytes 18-19 reserved
//	bytes 20-23 attribute modifier
//	bytes 24-   class data (DataLen bytes)
type MAD []byte

// ShortError reports input shorter than the view it was offered to.
type ShortError struct {
	What      string // "MAD", "REQ", ...
	Len, Need int
}

func (e *ShortError) Error() string {
	return fmt.Sprintf("mad: %d bytes are too short for a %s (%d bytes)", e.Len, e.What, e.Need)
}

// ParseMAD returns the view of the MAD that b begins with. It refuses b if
// it is shorter than MADLen; bytes past MADLen are not part of the view.
// It checks nothing else: whether the class and version are ones the
// receiver serves is the receiver's question (CheckCM for the CM).
func ParseMAD(b []byte) (MAD, error) {
	if len(b) < MADLen {
		return nil, &ShortError{What: "MAD", Len: len(b), Need: MADLen}
	}
	return MAD(b[:MADLen]), nil
}

func (m MAD) BaseVersion() uint8    { return m[0] }
func (m MAD) MgmtClass() uint8      { return m[1] }
func (m MAD) ClassVersion() uint8   { return m[2] }
func (m MAD) Method() uint8         { return m[3] }
func (m MAD) Status() uint16        { return be.Uint16(m[4:]) }
func (m MAD) ClassSpecific() uint16 { return be.Uint16(m[6:]) }
func (m MAD) TID() uint64           { return be.Uint64(m[8:]) }
func (m MAD) AttrID() AttrID        { return AttrID(be.Uint16(m[16:])) }
func (m MAD) AttrMod() uint32       { return be.Uint32(m[20:]) }
func (m MAD) Data() []byte          { return m[HeaderLen:MADLen] }

// Header are the values of a MAD header.
type Header struct {
	BaseVersion   uint8
	MgmtClass     uint8
	ClassVersion  uint8
	Method        uint8
	Status        uint16
	ClassSpecific uint16
	TID           uint64
	AttrID        AttrID
	AttrMod       uint32
}

// CMHeader returns the header of a CM message of the given attribute and
// transaction ID, as Linux's cm_format_mad_hdr writes it.
func CMHeader(attr AttrID, tid uint64) Header {
	return Header{BaseVersion: BaseVersion, MgmtClass: ClassCM, ClassVersion: CMClassVersion,
		Method: MethodSend, TID: tid, AttrID: attr}
}

// Header decodes the MAD header.
func (m MAD) Header() Header {
	return Header{
		BaseVersion: m.BaseVersion(), MgmtClass: m.MgmtClass(), ClassVersion: m.ClassVersion(),
		Method: m.Method(), Status: m.Status(), ClassSpecific: m.ClassSpecific(),
		TID: m.TID(), AttrID: m.AttrID(), AttrMod: m.AttrMod(),
	}
}

// EncodeHeader writes h into the MAD header; the reserved bytes become zero.
func (m MAD) EncodeHeader(h *Header) {
	m[0], m[1], m[2], m[3] = h.BaseVersion, h.MgmtClass, h.ClassVersion, h.Method
	be.PutUint16(m[4:], h.Status)
	be.PutUint16(m[6:], h.ClassSpecific)
	be.PutUint64(m[8:], h.TID)
	be.PutUint16(m[16:], uint16(h.AttrID))
	be.PutUint16(m[18:], 0)
	be.PutUint32(m[20:], h.AttrMod)
}

// NotCMError reports a MAD that is not a CM message this package serves.
type NotCMError struct{ Header Header }

func (e *NotCMError) Error() string {
	h := e.Header
	return fmt.Sprintf("mad: not a CM send: base version %d, class %#x, class version %d, method %#x",
		h.BaseVersion, h.MgmtClass, h.ClassVersion, h.Method)
}

// CheckCM reports whether m is a CM message Linux's CM would accept: base
// version 1, class CM, class version 2, method Send (cm.c accepts nothing
// else from its MAD agent).
func (m MAD) CheckCM() error {
	if m.BaseVersion() != BaseVersion || m.MgmtClass() != ClassCM ||
		m.ClassVersion() != CMClassVersion || m.Method() != MethodSend {
		return &NotCMError{Header: m.Header()}
	}
	return nil
}

// parseMsg is the constructor shared by the message views: a CM message is
// the DataLen bytes after the MAD header, and none is shorter.
func parseMsg(what string, b []byte) ([]byte, error) {
	if len(b) < DataLen {
		return nil, &ShortError{What: what, Len: len(b), Need: DataLen}
	}
	return b[:DataLen], nil
}

// u24 reads the 24-bit field in the top bits of the 32-bit word at b[0:4]
// (IBA_FIELD32_LOC with 24 bits: QPNs, EECNs, PSNs).
func u24(b []byte) uint32 { return be.Uint32(b) >> 8 }

// putU24 writes v into the top 24 bits of b[0:4] and keeps b[3].
func putU24(b []byte, v uint32) {
	b[0], b[1], b[2] = byte(v>>16), byte(v>>8), byte(v)
}

func b2u(b bool) byte {
	if b {
		return 1
	}
	return 0
}
