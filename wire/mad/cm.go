package mad

// The CM messages (IBTA vol. 1, 12.6; field positions as in Linux's
// include/rdma/ibta_vol1_c12.h). Each view covers the DataLen bytes after
// the MAD header, so the offsets below are those of the spec's tables. A
// field narrower than its byte sits in the byte's top bits unless noted, as
// the spec draws them (bit 0 of a byte is its most significant bit there).

// GID is a 128-bit port GID as the CM messages carry it; for RoCEv2 over
// IPv4 it is the IPv4-mapped IPv6 address (::ffff:a.b.c.d).
type GID [16]byte

// Lengths of the private data each message carries (IBTA 12.6, the tables'
// last rows; Linux IB_CM_*_PRIVATE_DATA_SIZE).
const (
	REQPrivateDataLen     = 92
	MRAPrivateDataLen     = 222
	REJPrivateDataLen     = 148
	REPPrivateDataLen     = 196
	RTUPrivateDataLen     = 224
	DREQPrivateDataLen    = 220
	DREPPrivateDataLen    = 224
	SIDRReqPrivateDataLen = 216
	SIDRRepPrivateDataLen = 136

	ARILen = 72 // REJ's additional reject information, SIDR_REP's additional information
)

// MsgKind says which message an MRA or a REJ refers to (IBTA 12.6.6 and
// 12.6.7: "message MRAed", "message rejected"; Linux CM_MSG_RESPONSE_*).
type MsgKind uint8

const (
	MsgKindREQ   MsgKind = 0
	MsgKindREP   MsgKind = 1
	MsgKindOther MsgKind = 2 // LAP, which RoCE never sends
)

// RejReason is a REJ's reason code (IBTA table 109; Linux enum
// ib_cm_rej_reason). The ones rnicd sends or meets are named.
type RejReason uint16

const (
	RejNoQP                      RejReason = 1
	RejNoResources               RejReason = 3
	RejTimeout                   RejReason = 4
	RejUnsupported               RejReason = 5
	RejInvalidCommID             RejReason = 6
	RejInvalidCommInstance       RejReason = 7
	RejInvalidServiceID          RejReason = 8 // no listener: rdma_cm's "connection refused"
	RejInvalidTransportType      RejReason = 9
	RejStaleConn                 RejReason = 10
	RejInvalidGID                RejReason = 12
	RejInvalidMTU                RejReason = 26
	RejInsufficientRespResources RejReason = 27
	RejConsumerDefined           RejReason = 28 // rdma_reject
	RejInvalidRNRRetry           RejReason = 29
	RejDuplicateLocalCommID      RejReason = 30
	RejInvalidClassVersion       RejReason = 31
)

// Transport service types of a REQ (IBTA 12.6.5: 0 RC, 1 UC, 3 RD).
// XRC (annex A14) takes the RD value with extended transport type 1, as
// Linux's cm_req_set_qp_type writes an XRC initiator's REQ; such a REQ
// leaves responder resources, retry counts and SRQ zero, and the target's
// REP carries its QPN in the local EECN field with SRQ set (cm_format_rep).
const (
	TransportRC  = 0
	TransportUC  = 1
	TransportXRC = 3

	ExtendedTransportXRC = 1
)

// SIDR_REP status values (IBTA table 121; Linux enum ib_cm_sidr_status).
type SIDRStatus uint8

const (
	SIDRSuccess            SIDRStatus = 0
	SIDRUnsupported        SIDRStatus = 1 // no listener on the service ID
	SIDRReject             SIDRStatus = 2
	SIDRNoQP               SIDRStatus = 3
	SIDRRedirect           SIDRStatus = 4
	SIDRUnsupportedVersion SIDRStatus = 5
)

// commIDs are the two 32-bit communication IDs every connected-mode
// message begins with: the sender's, then the receiver's.
type commIDs []byte

func (c commIDs) LocalCommID() uint32  { return be.Uint32(c[0:]) }
func (c commIDs) RemoteCommID() uint32 { return be.Uint32(c[4:]) }

// --- REQ (IBTA 12.6.5, table 106) ---

// REQ is a view of a connection request.
type REQ []byte

// ParseREQ returns the REQ view of b, a MAD's class data.
func ParseREQ(b []byte) (REQ, error) { m, err := parseMsg("REQ", b); return REQ(m), err }

// REQFields are the values of a REQ. The alternate path (bytes 96-139) is
// carried as bytes: RoCE has no alternate path and Linux's CM zeroes it.
type REQFields struct {
	LocalCommID             uint32
	ServiceID               uint64
	LocalCAGUID             uint64
	LocalQKey               uint32
	LocalQPN                uint32
	ResponderResources      uint8
	LocalEECN               uint32
	InitiatorDepth          uint8
	RemoteEECN              uint32
	RemoteCMResponseTimeout uint8 // 5 bits; 4.096 us * 2^t
	TransportType           uint8 // 2 bits: TransportRC, TransportUC
	EndToEndFlowControl     bool
	StartingPSN             uint32
	LocalCMResponseTimeout  uint8 // 5 bits
	RetryCount              uint8 // 3 bits
	PKey                    uint16
	PathMTU                 uint8 // 4 bits, IBTA MTU code (1 = 256 ... 5 = 4096)
	RDCExists               bool
	RNRRetryCount           uint8 // 3 bits
	MaxCMRetries            uint8 // 4 bits
	SRQ                     bool
	ExtendedTransport       uint8 // 3 bits
	PrimaryLocalLID         uint16
	PrimaryRemoteLID        uint16
	PrimaryLocalGID         GID
	PrimaryRemoteGID        GID
	PrimaryFlowLabel        uint32 // 20 bits
	PrimaryPacketRate       uint8  // 6 bits
	PrimaryTrafficClass     uint8
	PrimaryHopLimit         uint8
	PrimarySL               uint8 // 4 bits
	PrimarySubnetLocal      bool
	PrimaryLocalACKTimeout  uint8 // 5 bits
	Alternate               [44]byte
	PrivateData             [REQPrivateDataLen]byte
}

func (r REQ) LocalCommID() uint32            { return be.Uint32(r[0:]) }
func (r REQ) ServiceID() uint64              { return be.Uint64(r[8:]) }
func (r REQ) LocalCAGUID() uint64            { return be.Uint64(r[16:]) }
func (r REQ) LocalQKey() uint32              { return be.Uint32(r[28:]) }
func (r REQ) LocalQPN() uint32               { return u24(r[32:]) }
func (r REQ) ResponderResources() uint8      { return r[35] }
func (r REQ) LocalEECN() uint32              { return u24(r[36:]) }
func (r REQ) InitiatorDepth() uint8          { return r[39] }
func (r REQ) RemoteEECN() uint32             { return u24(r[40:]) }
func (r REQ) RemoteCMResponseTimeout() uint8 { return r[43] >> 3 }
func (r REQ) TransportType() uint8           { return r[43] >> 1 & 3 }
func (r REQ) EndToEndFlowControl() bool      { return r[43]&1 != 0 }
func (r REQ) StartingPSN() uint32            { return u24(r[44:]) }
func (r REQ) LocalCMResponseTimeout() uint8  { return r[47] >> 3 }
func (r REQ) RetryCount() uint8              { return r[47] & 7 }
func (r REQ) PKey() uint16                   { return be.Uint16(r[48:]) }
func (r REQ) PathMTU() uint8                 { return r[50] >> 4 }
func (r REQ) RDCExists() bool                { return r[50]&8 != 0 }
func (r REQ) RNRRetryCount() uint8           { return r[50] & 7 }
func (r REQ) MaxCMRetries() uint8            { return r[51] >> 4 }
func (r REQ) SRQ() bool                      { return r[51]&8 != 0 }
func (r REQ) ExtendedTransport() uint8       { return r[51] & 7 }
func (r REQ) PrimaryLocalLID() uint16        { return be.Uint16(r[52:]) }
func (r REQ) PrimaryRemoteLID() uint16       { return be.Uint16(r[54:]) }
func (r REQ) PrimaryLocalGID() (g GID)       { copy(g[:], r[56:72]); return g }
func (r REQ) PrimaryRemoteGID() (g GID)      { copy(g[:], r[72:88]); return g }
func (r REQ) PrimaryFlowLabel() uint32       { return be.Uint32(r[88:]) >> 12 }
func (r REQ) PrimaryPacketRate() uint8       { return r[91] & 0x3f }
func (r REQ) PrimaryTrafficClass() uint8     { return r[92] }
func (r REQ) PrimaryHopLimit() uint8         { return r[93] }
func (r REQ) PrimarySL() uint8               { return r[94] >> 4 }
func (r REQ) PrimarySubnetLocal() bool       { return r[94]&8 != 0 }
func (r REQ) PrimaryLocalACKTimeout() uint8  { return r[95] >> 3 }
func (r REQ) PrivateData() []byte            { return r[140:DataLen] }

// Fields decodes the REQ.
func (r REQ) Fields() (f REQFields) {
	f = REQFields{
		LocalCommID: r.LocalCommID(), ServiceID: r.ServiceID(), LocalCAGUID: r.LocalCAGUID(),
		LocalQKey: r.LocalQKey(), LocalQPN: r.LocalQPN(), ResponderResources: r.ResponderResources(),
		LocalEECN: r.LocalEECN(), InitiatorDepth: r.InitiatorDepth(), RemoteEECN: r.RemoteEECN(),
		RemoteCMResponseTimeout: r.RemoteCMResponseTimeout(), TransportType: r.TransportType(),
		EndToEndFlowControl: r.EndToEndFlowControl(), StartingPSN: r.StartingPSN(),
		LocalCMResponseTimeout: r.LocalCMResponseTimeout(), RetryCount: r.RetryCount(),
		PKey: r.PKey(), PathMTU: r.PathMTU(), RDCExists: r.RDCExists(), RNRRetryCount: r.RNRRetryCount(),
		MaxCMRetries: r.MaxCMRetries(), SRQ: r.SRQ(), ExtendedTransport: r.ExtendedTransport(),
		PrimaryLocalLID: r.PrimaryLocalLID(), PrimaryRemoteLID: r.PrimaryRemoteLID(),
		PrimaryLocalGID: r.PrimaryLocalGID(), PrimaryRemoteGID: r.PrimaryRemoteGID(),
		PrimaryFlowLabel: r.PrimaryFlowLabel(), PrimaryPacketRate: r.PrimaryPacketRate(),
		PrimaryTrafficClass: r.PrimaryTrafficClass(), PrimaryHopLimit: r.PrimaryHopLimit(),
		PrimarySL: r.PrimarySL(), PrimarySubnetLocal: r.PrimarySubnetLocal(),
		PrimaryLocalACKTimeout: r.PrimaryLocalACKTimeout(),
	}
	copy(f.Alternate[:], r[96:140])
	copy(f.PrivateData[:], r.PrivateData())
	return f
}

// Encode writes f into the REQ; reserved bits become zero and values wider
// than their field are cut to it.
func (r REQ) Encode(f *REQFields) {
	clear(r[:DataLen])
	be.PutUint32(r[0:], f.LocalCommID)
	be.PutUint64(r[8:], f.ServiceID)
	be.PutUint64(r[16:], f.LocalCAGUID)
	be.PutUint32(r[28:], f.LocalQKey)
	putU24(r[32:], f.LocalQPN)
	r[35] = f.ResponderResources
	putU24(r[36:], f.LocalEECN)
	r[39] = f.InitiatorDepth
	putU24(r[40:], f.RemoteEECN)
	r[43] = f.RemoteCMResponseTimeout<<3 | (f.TransportType&3)<<1 | b2u(f.EndToEndFlowControl)
	putU24(r[44:], f.StartingPSN)
	r[47] = f.LocalCMResponseTimeout<<3 | f.RetryCount&7
	be.PutUint16(r[48:], f.PKey)
	r[50] = f.PathMTU<<4 | b2u(f.RDCExists)<<3 | f.RNRRetryCount&7
	r[51] = f.MaxCMRetries<<4 | b2u(f.SRQ)<<3 | f.ExtendedTransport&7
	be.PutUint16(r[52:], f.PrimaryLocalLID)
	be.PutUint16(r[54:], f.PrimaryRemoteLID)
	copy(r[56:72], f.PrimaryLocalGID[:])
	copy(r[72:88], f.PrimaryRemoteGID[:])
	be.PutUint32(r[88:], f.PrimaryFlowLabel<<12|uint32(f.PrimaryPacketRate&0x3f))
	r[92] = f.PrimaryTrafficClass
	r[93] = f.PrimaryHopLimit
	r[94] = f.PrimarySL<<4 | b2u(f.PrimarySubnetLocal)<<3
	r[95] = f.PrimaryLocalACKTimeout << 3
	copy(r[96:140], f.Alternate[:])
	copy(r[140:DataLen], f.PrivateData[:])
}

// --- MRA (IBTA 12.6.6, table 107) ---

// MRA is a view of a message receipt acknowledgement: "I got your REQ or
// REP, give me ServiceTimeout longer".
type MRA []byte

// ParseMRA returns the MRA view of b, a MAD's class data.
func ParseMRA(b []byte) (MRA, error) { m, err := parseMsg("MRA", b); return MRA(m), err }

// MRAFields are the values of an MRA.
type MRAFields struct {
	LocalCommID, RemoteCommID uint32
	MessageMRAed              MsgKind // 2 bits
	ServiceTimeout            uint8   // 5 bits
	PrivateData               [MRAPrivateDataLen]byte
}

func (m MRA) LocalCommID() uint32   { return commIDs(m).LocalCommID() }
func (m MRA) RemoteCommID() uint32  { return commIDs(m).RemoteCommID() }
func (m MRA) MessageMRAed() MsgKind { return MsgKind(m[8] >> 6) }
func (m MRA) ServiceTimeout() uint8 { return m[9] >> 3 }
func (m MRA) PrivateData() []byte   { return m[10:DataLen] }

// Fields decodes the MRA.
func (m MRA) Fields() (f MRAFields) {
	f = MRAFields{LocalCommID: m.LocalCommID(), RemoteCommID: m.RemoteCommID(),
		MessageMRAed: m.MessageMRAed(), ServiceTimeout: m.ServiceTimeout()}
	copy(f.PrivateData[:], m.PrivateData())
	return f
}

// Encode writes f into the MRA.
func (m MRA) Encode(f *MRAFields) {
	clear(m[:DataLen])
	be.PutUint32(m[0:], f.LocalCommID)
	be.PutUint32(m[4:], f.RemoteCommID)
	m[8] = byte(f.MessageMRAed&3) << 6
	m[9] = f.ServiceTimeout << 3
	copy(m[10:DataLen], f.PrivateData[:])
}

// --- REJ (IBTA 12.6.7, table 108) ---

// REJ is a view of a reject.
type REJ []byte

// ParseREJ returns the REJ view of b, a MAD's class data.
func ParseREJ(b []byte) (REJ, error) { m, err := parseMsg("REJ", b); return REJ(m), err }

// REJFields are the values of a REJ.
type REJFields struct {
	LocalCommID, RemoteCommID uint32
	MessageRejected           MsgKind // 2 bits
	RejectInfoLength          uint8   // 7 bits: how much of ARI is meaningful
	Reason                    RejReason
	ARI                       [ARILen]byte
	PrivateData               [REJPrivateDataLen]byte
}

func (r REJ) LocalCommID() uint32      { return commIDs(r).LocalCommID() }
func (r REJ) RemoteCommID() uint32     { return commIDs(r).RemoteCommID() }
func (r REJ) MessageRejected() MsgKind { return MsgKind(r[8] >> 6) }
func (r REJ) RejectInfoLength() uint8  { return r[9] >> 1 }
func (r REJ) Reason() RejReason        { return RejReason(be.Uint16(r[10:])) }
func (r REJ) ARI() []byte              { return r[12:84] }
func (r REJ) PrivateData() []byte      { return r[84:DataLen] }

// Fields decodes the REJ.
func (r REJ) Fields() (f REJFields) {
	f = REJFields{LocalCommID: r.LocalCommID(), RemoteCommID: r.RemoteCommID(),
		MessageRejected: r.MessageRejected(), RejectInfoLength: r.RejectInfoLength(), Reason: r.Reason()}
	copy(f.ARI[:], r.ARI())
	copy(f.PrivateData[:], r.PrivateData())
	return f
}

// Encode writes f into the REJ.
func (r REJ) Encode(f *REJFields) {
	clear(r[:DataLen])
	be.PutUint32(r[0:], f.LocalCommID)
	be.PutUint32(r[4:], f.RemoteCommID)
	r[8] = byte(f.MessageRejected&3) << 6
	r[9] = f.RejectInfoLength << 1
	be.PutUint16(r[10:], uint16(f.Reason))
	copy(r[12:84], f.ARI[:])
	copy(r[84:DataLen], f.PrivateData[:])
}

// --- REP (IBTA 12.6.8, table 110) ---

// REP is a view of a connection reply.
type REP []byte

// ParseREP returns the REP view of b, a MAD's class data.
func ParseREP(b []byte) (REP, error) { m, err := parseMsg("REP", b); return REP(m), err }

// REPFields are the values of a REP.
type REPFields struct {
	LocalCommID, RemoteCommID uint32
	LocalQKey                 uint32
	LocalQPN                  uint32
	LocalEECN                 uint32
	StartingPSN               uint32
	ResponderResources        uint8
	InitiatorDepth            uint8
	TargetACKDelay            uint8 // 5 bits
	FailoverAccepted          uint8 // 2 bits
	EndToEndFlowControl       bool
	RNRRetryCount             uint8 // 3 bits
	SRQ                       bool
	LocalCAGUID               uint64
	PrivateData               [REPPrivateDataLen]byte
}

func (r REP) LocalCommID() uint32       { return commIDs(r).LocalCommID() }
func (r REP) RemoteCommID() uint32      { return commIDs(r).RemoteCommID() }
func (r REP) LocalQKey() uint32         { return be.Uint32(r[8:]) }
func (r REP) LocalQPN() uint32          { return u24(r[12:]) }
func (r REP) LocalEECN() uint32         { return u24(r[16:]) }
func (r REP) StartingPSN() uint32       { return u24(r[20:]) }
func (r REP) ResponderResources() uint8 { return r[24] }
func (r REP) InitiatorDepth() uint8     { return r[25] }
func (r REP) TargetACKDelay() uint8     { return r[26] >> 3 }
func (r REP) FailoverAccepted() uint8   { return r[26] >> 1 & 3 }
func (r REP) EndToEndFlowControl() bool { return r[26]&1 != 0 }
func (r REP) RNRRetryCount() uint8      { return r[27] >> 5 }
func (r REP) SRQ() bool                 { return r[27]&0x10 != 0 }
func (r REP) LocalCAGUID() uint64       { return be.Uint64(r[28:]) }
func (r REP) PrivateData() []byte       { return r[36:DataLen] }

// Fields decodes the REP.
func (r REP) Fields() (f REPFields) {
	f = REPFields{LocalCommID: r.LocalCommID(), RemoteCommID: r.RemoteCommID(),
		LocalQKey: r.LocalQKey(), LocalQPN: r.LocalQPN(), LocalEECN: r.LocalEECN(),
		StartingPSN: r.StartingPSN(), ResponderResources: r.ResponderResources(),
		InitiatorDepth: r.InitiatorDepth(), TargetACKDelay: r.TargetACKDelay(),
		FailoverAccepted: r.FailoverAccepted(), EndToEndFlowControl: r.EndToEndFlowControl(),
		RNRRetryCount: r.RNRRetryCount(), SRQ: r.SRQ(), LocalCAGUID: r.LocalCAGUID()}
	copy(f.PrivateData[:], r.PrivateData())
	return f
}

// Encode writes f into the REP.
func (r REP) Encode(f *REPFields) {
	clear(r[:DataLen])
	be.PutUint32(r[0:], f.LocalCommID)
	be.PutUint32(r[4:], f.RemoteCommID)
	be.PutUint32(r[8:], f.LocalQKey)
	putU24(r[12:], f.LocalQPN)
	putU24(r[16:], f.LocalEECN)
	putU24(r[20:], f.StartingPSN)
	r[24] = f.ResponderResources
	r[25] = f.InitiatorDepth
	r[26] = f.TargetACKDelay<<3 | (f.FailoverAccepted&3)<<1 | b2u(f.EndToEndFlowControl)
	r[27] = f.RNRRetryCount<<5 | b2u(f.SRQ)<<4
	be.PutUint64(r[28:], f.LocalCAGUID)
	copy(r[36:DataLen], f.PrivateData[:])
}

// --- RTU, DREQ, DREP (IBTA 12.6.9, 12.6.10, 12.6.11; tables 111 to 113) ---

// RTU is a view of a ready-to-use.
type RTU []byte

// ParseRTU returns the RTU view of b, a MAD's class data.
func ParseRTU(b []byte) (RTU, error) { m, err := parseMsg("RTU", b); return RTU(m), err }

// RTUFields are the values of an RTU.
type RTUFields struct {
	LocalCommID, RemoteCommID uint32
	PrivateData               [RTUPrivateDataLen]byte
}

func (r RTU) LocalCommID() uint32  { return commIDs(r).LocalCommID() }
func (r RTU) RemoteCommID() uint32 { return commIDs(r).RemoteCommID() }
func (r RTU) PrivateData() []byte  { return r[8:DataLen] }

// Fields decodes the RTU.
func (r RTU) Fields() (f RTUFields) {
	f = RTUFields{LocalCommID: r.LocalCommID(), RemoteCommID: r.RemoteCommID()}
	copy(f.PrivateData[:], r.PrivateData())
	return f
}

// Encode writes f into the RTU.
func (r RTU) Encode(f *RTUFields) {
	be.PutUint32(r[0:], f.LocalCommID)
	be.PutUint32(r[4:], f.RemoteCommID)
	copy(r[8:DataLen], f.PrivateData[:])
}

// DREQ is a view of a disconnect request.
type DREQ []byte

// ParseDREQ returns the DREQ view of b, a MAD's class data.
func ParseDREQ(b []byte) (DREQ, error) { m, err := parseMsg("DREQ", b); return DREQ(m), err }

// DREQFields are the values of a DREQ.
type DREQFields struct {
	LocalCommID, RemoteCommID uint32
	RemoteQPN                 uint32 // the receiver's QPN (or EECN), 24 bits
	PrivateData               [DREQPrivateDataLen]byte
}

func (d DREQ) LocalCommID() uint32  { return commIDs(d).LocalCommID() }
func (d DREQ) RemoteCommID() uint32 { return commIDs(d).RemoteCommID() }
func (d DREQ) RemoteQPN() uint32    { return u24(d[8:]) }
func (d DREQ) PrivateData() []byte  { return d[12:DataLen] }

// Fields decodes the DREQ.
func (d DREQ) Fields() (f DREQFields) {
	f = DREQFields{LocalCommID: d.LocalCommID(), RemoteCommID: d.RemoteCommID(), RemoteQPN: d.RemoteQPN()}
	copy(f.PrivateData[:], d.PrivateData())
	return f
}

// Encode writes f into the DREQ.
func (d DREQ) Encode(f *DREQFields) {
	be.PutUint32(d[0:], f.LocalCommID)
	be.PutUint32(d[4:], f.RemoteCommID)
	be.PutUint32(d[8:], 0)
	putU24(d[8:], f.RemoteQPN)
	copy(d[12:DataLen], f.PrivateData[:])
}

// DREP is a view of a disconnect reply.
type DREP []byte

// ParseDREP returns the DREP view of b, a MAD's class data.
func ParseDREP(b []byte) (DREP, error) { m, err := parseMsg("DREP", b); return DREP(m), err }

// DREPFields are the values of a DREP.
type DREPFields struct {
	LocalCommID, RemoteCommID uint32
	PrivateData               [DREPPrivateDataLen]byte
}

func (d DREP) LocalCommID() uint32  { return commIDs(d).LocalCommID() }
func (d DREP) RemoteCommID() uint32 { return commIDs(d).RemoteCommID() }
func (d DREP) PrivateData() []byte  { return d[8:DataLen] }

// Fields decodes the DREP.
func (d DREP) Fields() (f DREPFields) {
	f = DREPFields{LocalCommID: d.LocalCommID(), RemoteCommID: d.RemoteCommID()}
	copy(f.PrivateData[:], d.PrivateData())
	return f
}

// Encode writes f into the DREP.
func (d DREP) Encode(f *DREPFields) {
	be.PutUint32(d[0:], f.LocalCommID)
	be.PutUint32(d[4:], f.RemoteCommID)
	copy(d[8:DataLen], f.PrivateData[:])
}

// --- SIDR_REQ, SIDR_REP (IBTA 12.11, tables 119 and 120) ---

// SIDRReq is a view of a service ID resolution request: which UD QP and
// Q_Key serve this service ID?
type SIDRReq []byte

// ParseSIDRReq returns the SIDR_REQ view of b, a MAD's class data.
func ParseSIDRReq(b []byte) (SIDRReq, error) {
	m, err := parseMsg("SIDR_REQ", b)
	return SIDRReq(m), err
}

// SIDRReqFields are the values of a SIDR_REQ.
type SIDRReqFields struct {
	RequestID   uint32
	PKey        uint16
	ServiceID   uint64
	PrivateData [SIDRReqPrivateDataLen]byte
}

func (s SIDRReq) RequestID() uint32   { return be.Uint32(s[0:]) }
func (s SIDRReq) PKey() uint16        { return be.Uint16(s[4:]) }
func (s SIDRReq) ServiceID() uint64   { return be.Uint64(s[8:]) }
func (s SIDRReq) PrivateData() []byte { return s[16:DataLen] }

// Fields decodes the SIDR_REQ.
func (s SIDRReq) Fields() (f SIDRReqFields) {
	f = SIDRReqFields{RequestID: s.RequestID(), PKey: s.PKey(), ServiceID: s.ServiceID()}
	copy(f.PrivateData[:], s.PrivateData())
	return f
}

// Encode writes f into the SIDR_REQ.
func (s SIDRReq) Encode(f *SIDRReqFields) {
	clear(s[:16])
	be.PutUint32(s[0:], f.RequestID)
	be.PutUint16(s[4:], f.PKey)
	be.PutUint64(s[8:], f.ServiceID)
	copy(s[16:DataLen], f.PrivateData[:])
}

// SIDRRep is a view of a service ID resolution reply.
type SIDRRep []byte

// ParseSIDRRep returns the SIDR_REP view of b, a MAD's class data.
func ParseSIDRRep(b []byte) (SIDRRep, error) {
	m, err := parseMsg("SIDR_REP", b)
	return SIDRRep(m), err
}

// SIDRRepFields are the values of a SIDR_REP.
type SIDRRepFields struct {
	RequestID     uint32
	Status        SIDRStatus
	AddInfoLength uint8
	QPN           uint32 // 24 bits
	ServiceID     uint64
	QKey          uint32
	AddInfo       [ARILen]byte
	PrivateData   [SIDRRepPrivateDataLen]byte
}

func (s SIDRRep) RequestID() uint32    { return be.Uint32(s[0:]) }
func (s SIDRRep) Status() SIDRStatus   { return SIDRStatus(s[4]) }
func (s SIDRRep) AddInfoLength() uint8 { return s[5] }
func (s SIDRRep) QPN() uint32          { return u24(s[8:]) }
func (s SIDRRep) ServiceID() uint64    { return be.Uint64(s[12:]) }
func (s SIDRRep) QKey() uint32         { return be.Uint32(s[20:]) }
func (s SIDRRep) AddInfo() []byte      { return s[24:96] }
func (s SIDRRep) PrivateData() []byte  { return s[96:DataLen] }

// Fields decodes the SIDR_REP.
func (s SIDRRep) Fields() (f SIDRRepFields) {
	f = SIDRRepFields{RequestID: s.RequestID(), Status: s.Status(), AddInfoLength: s.AddInfoLength(),
		QPN: s.QPN(), ServiceID: s.ServiceID(), QKey: s.QKey()}
	copy(f.AddInfo[:], s.AddInfo())
	copy(f.PrivateData[:], s.PrivateData())
	return f
}

// Encode writes f into the SIDR_REP.
func (s SIDRRep) Encode(f *SIDRRepFields) {
	clear(s[:24])
	be.PutUint32(s[0:], f.RequestID)
	s[4], s[5] = byte(f.Status), f.AddInfoLength
	putU24(s[8:], f.QPN)
	be.PutUint64(s[12:], f.ServiceID)
	be.PutUint32(s[20:], f.QKey)
	copy(s[24:96], f.AddInfo[:])
	copy(s[96:DataLen], f.PrivateData[:])
}
