package abi

import (
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"
)

// Kind is a control message's kind. A reply carries its request's kind
// with FlagReply set.
type Kind uint16

// The request kinds. Values are part of the protocol: append, never
// renumber.
const (
	KindQueryPort      Kind = 1
	KindAllocPD        Kind = 2
	KindDeallocPD      Kind = 3
	KindRegMR          Kind = 4
	KindDeregMR        Kind = 5
	KindCreateChannel  Kind = 6
	KindDestroyChannel Kind = 7
	KindCreateCQ       Kind = 8
	KindDestroyCQ      Kind = 9
	KindCreateSRQ      Kind = 10
	KindDestroySRQ     Kind = 11
	KindCreateQP       Kind = 12
	KindModifyQP       Kind = 13
	KindQueryQP        Kind = 14
	KindDestroyQP      Kind = 15
	KindListQPs        Kind = 16
	KindCounters       Kind = 17
	// KindDoorbell has no reply unless it is malformed (see Doorbell).
	KindDoorbell Kind = 18
	// 19 was lend_port, which handed a client a socket of the daemon's
	// UDP 4791 port: gone, for no client may hold the port (a member of
	// its SO_REUSEPORT group could read or re-steer every QP's packets).
	// It is never reused, so that an old client gets "unknown kind".
	// The CM agent's requests (cm.go), rdma_cm's calls: an event channel
	// (with a wake pipe), CM IDs on it, and the next event of a channel.
	KindCMCreateChannel  Kind = 20
	KindCMDestroyChannel Kind = 21
	KindCMCreateID       Kind = 22
	KindCMDestroyID      Kind = 23
	KindCMListen         Kind = 24
	KindCMConnect        Kind = 25
	KindCMAccept         Kind = 26
	KindCMReject         Kind = 27
	KindCMDisconnect     Kind = 28
	KindCMGetEvent       Kind = 29
	// KindListCMIDs lists every client's CM IDs (rdma res show cm_id).
	KindListCMIDs Kind = 30
	// KindRegMRShm registers memory of a System V shared memory
	// segment the client has attached (see RegMRShmReq).
	KindRegMRShm Kind = 31
	// KindAttachMcast and KindDetachMcast attach a UD QP to a multicast
	// group and detach it (ibv_attach_mcast, ibv_detach_mcast: McastReq).
	KindAttachMcast Kind = 32
	KindDetachMcast Kind = 33
	// KindAllocMW allocates a memory window (ibv_alloc_mw: AllocMWReq,
	// AllocMWReply); KindDeallocMW frees one (ibv_dealloc_mw: Handle).
	// A window is bound by a BIND_MW WQE on a QP's send ring.
	KindAllocMW   Kind = 44
	KindDeallocMW Kind = 45
)

// Header flags.
const (
	FlagReply uint16 = 1 << 0
)

// CM event codes, a CMEvent's Type: the values of rnic/cm's EventType
// (the daemon sends its agent's events as they are; a test holds the two
// equal), here so that a client (rdmacm, clib/rdmacm) maps them to
// rdma_cm's without importing the daemon's CM agent.
const (
	CMEventConnectRequest uint8 = 1 // RDMA_CM_EVENT_CONNECT_REQUEST
	CMEventEstablished    uint8 = 2 // RDMA_CM_EVENT_ESTABLISHED
	CMEventRejected       uint8 = 3 // RDMA_CM_EVENT_REJECTED
	CMEventUnreachable    uint8 = 4 // RDMA_CM_EVENT_UNREACHABLE
	CMEventConnectError   uint8 = 5 // RDMA_CM_EVENT_CONNECT_ERROR
	CMEventDisconnected   uint8 = 6 // RDMA_CM_EVENT_DISCONNECTED
	CMEventTimewaitExit   uint8 = 7 // RDMA_CM_EVENT_TIMEWAIT_EXIT
)

// HeaderLen is the size of the fixed header every message starts with:
//
//	offset 0  kind      uint16
//	offset 2  flags     uint16 (FlagReply)
//	offset 4  id        uint32 (the request's; a reply echoes it)
//	offset 8  length    uint32 (of the body that follows)
//	offset 12 reserved  uint32 (0)
//
// All integers are little-endian.
const HeaderLen = 16

// MaxMessage is the largest message, header included. Bigger answers
// (ListQPs) are paged.
const MaxMessage = 64 << 10

// MaxFDs is the most descriptors one message may carry.
const MaxFDs = 1

// Header is a message's fixed header.
type Header struct {
	Kind  Kind
	Flags uint16
	ID    uint32
	Len   uint32
}

// ParseHeader decodes the header of msg and checks that the body length it
// claims is the length that arrived.
func ParseHeader(msg []byte) (Header, error) {
	if len(msg) < HeaderLen {
		return Header{}, fmt.Errorf("hostif: message of %d bytes is shorter than a header", len(msg))
	}
	h := Header{
		Kind:  Kind(binary.LittleEndian.Uint16(msg[0:])),
		Flags: binary.LittleEndian.Uint16(msg[2:]),
		ID:    binary.LittleEndian.Uint32(msg[4:]),
		Len:   binary.LittleEndian.Uint32(msg[8:]),
	}
	if r := binary.LittleEndian.Uint32(msg[12:]); r != 0 {
		return h, fmt.Errorf("hostif: reserved header word is %#x, want 0", r)
	}
	if h.Flags&^FlagReply != 0 {
		return h, fmt.Errorf("hostif: unknown header flags %#x", h.Flags)
	}
	if uint64(h.Len) != uint64(len(msg)-HeaderLen) {
		return h, fmt.Errorf("hostif: header says %d body bytes, message has %d", h.Len, len(msg)-HeaderLen)
	}
	return h, nil
}

// appendHeader appends a header with a zero length, which finish fills.
func appendHeader(b []byte, k Kind, flags uint16, id uint32) []byte {
	b = binary.LittleEndian.AppendUint16(b, uint16(k))
	b = binary.LittleEndian.AppendUint16(b, flags)
	b = binary.LittleEndian.AppendUint32(b, id)
	b = binary.LittleEndian.AppendUint32(b, 0)
	return binary.LittleEndian.AppendUint32(b, 0)
}

// Code is the error code of a failed request's reply.
type Code uint32

const (
	CodeOK        Code = 0
	CodeInvalid   Code = 1 // a field's value is wrong (EINVAL)
	CodeNoHandle  Code = 2 // no such object of this client (ENOENT)
	CodeMalformed Code = 3 // the message does not decode (EPROTO)
	CodeUnknown   Code = 4 // unknown kind (ENOSYS)
	CodeBusy      Code = 5 // the object is still in use (EBUSY)
	CodeFailed    Code = 6 // the device refused (EIO)
	CodeLimit     Code = 7 // over a limit of the client or the daemon (ENOMEM, as ibv_create_qp past max_qp)
)

// Errno is the errno libibverbs returns for a request refused with c, as
// the comments above give it; 0 for CodeOK.
func (c Code) Errno() syscall.Errno {
	switch c {
	case CodeOK:
		return 0
	case CodeInvalid:
		return syscall.EINVAL
	case CodeNoHandle:
		return syscall.ENOENT
	case CodeMalformed:
		return syscall.EPROTO
	case CodeUnknown:
		return syscall.ENOSYS
	case CodeBusy:
		return syscall.EBUSY
	case CodeLimit:
		return syscall.ENOMEM
	}
	return syscall.EIO
}

var codeNames = map[Code]string{
	CodeOK: "ok", CodeInvalid: "invalid", CodeNoHandle: "no such handle", CodeMalformed: "malformed",
	CodeUnknown: "unknown request", CodeBusy: "busy", CodeFailed: "failed",
	CodeLimit: "over a limit",
}

func (c Code) String() string {
	if n, ok := codeNames[c]; ok {
		return n
	}
	return fmt.Sprintf("code(%d)", uint32(c))
}

// Error is a request the daemon refused: the code and message of its reply.
type Error struct {
	Kind Kind
	Code Code
	Msg  string
}

func (e *Error) Error() string { return fmt.Sprintf("rnicd: %v: %v: %s", e.Kind, e.Code, e.Msg) }

// MaxErrorMsg caps an error reply's message.
const MaxErrorMsg = 1024

// ErrMalformed is wrapped by every decoding error.
var ErrMalformed = errors.New("hostif: malformed message")

// Body is a message body: a request's or a reply's per-kind fields.
type Body interface {
	encode(e *encoder)
	decode(d *decoder)
}

// encoder appends little-endian fields.
type encoder struct{ b []byte }

func (e *encoder) u8(v uint8)   { e.b = append(e.b, v) }
func (e *encoder) u16(v uint16) { e.b = binary.LittleEndian.AppendUint16(e.b, v) }
func (e *encoder) u32(v uint32) { e.b = binary.LittleEndian.AppendUint32(e.b, v) }
func (e *encoder) u64(v uint64) { e.b = binary.LittleEndian.AppendUint64(e.b, v) }
func (e *encoder) bytes(v []byte) {
	e.b = append(e.b, v...)
}
func (e *encoder) str(s string) {
	if len(s) > 0xffff {
		s = s[:0xffff]
	}
	e.u16(uint16(len(s)))
	e.b = append(e.b, s...)
}

// decoder reads little-endian fields; the first short read sets err and
// every later read returns zero, so a body decodes in straight-line code
// and is checked once at the end.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) take(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n > len(d.b) {
		d.err = fmt.Errorf("%w: %d bytes needed, %d left", ErrMalformed, n, len(d.b))
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) u8() uint8 {
	if v := d.take(1); v != nil {
		return v[0]
	}
	return 0
}

func (d *decoder) u16() uint16 {
	if v := d.take(2); v != nil {
		return binary.LittleEndian.Uint16(v)
	}
	return 0
}

func (d *decoder) u32() uint32 {
	if v := d.take(4); v != nil {
		return binary.LittleEndian.Uint32(v)
	}
	return 0
}

func (d *decoder) u64() uint64 {
	if v := d.take(8); v != nil {
		return binary.LittleEndian.Uint64(v)
	}
	return 0
}

func (d *decoder) bytes(dst []byte) { copy(dst, d.take(len(dst))) }

func (d *decoder) str() string { return string(d.take(int(d.u16()))) }

// fail marks the body invalid (a count beyond its limit, say).
func (d *decoder) fail(format string, a ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: "+format, append([]any{ErrMalformed}, a...)...)
	}
}

// finish is the decoding's verdict: an error for a short body or for
// bytes left over.
func (d *decoder) finish() error {
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%w: %d bytes after the body", ErrMalformed, len(d.b))
	}
	return d.err
}

// Encode returns a message: header then body.
func Encode(k Kind, flags uint16, id uint32, b Body) []byte {
	e := encoder{b: appendHeader(make([]byte, 0, 128), k, flags, id)}
	if b != nil {
		b.encode(&e)
	}
	binary.LittleEndian.PutUint32(e.b[8:], uint32(len(e.b)-HeaderLen))
	return e.b
}

// DecodeBody decodes body into b, which must account for every byte.
func DecodeBody(body []byte, b Body) error {
	d := decoder{b: body}
	if b != nil {
		b.decode(&d)
	}
	return d.finish()
}

// EncodeError returns the reply of a failed request.
func EncodeError(k Kind, id uint32, code Code, msg string) []byte {
	if len(msg) > MaxErrorMsg {
		msg = msg[:MaxErrorMsg]
	}
	e := encoder{b: appendHeader(nil, k, FlagReply, id)}
	e.u32(uint32(code))
	e.str(msg)
	binary.LittleEndian.PutUint32(e.b[8:], uint32(len(e.b)-HeaderLen))
	return e.b
}

// EncodeReply returns the reply of a request that succeeded: code 0 then
// the kind's reply body.
func EncodeReply(k Kind, id uint32, b Body) []byte {
	e := encoder{b: appendHeader(nil, k, FlagReply, id)}
	e.u32(uint32(CodeOK))
	if b != nil {
		b.encode(&e)
	}
	binary.LittleEndian.PutUint32(e.b[8:], uint32(len(e.b)-HeaderLen))
	return e.b
}

// DecodeReply decodes a reply's body: an *Error if the request failed,
// else the kind's reply fields into b.
func DecodeReply(k Kind, body []byte, b Body) error {
	d := decoder{b: body}
	code := Code(d.u32())
	if d.err != nil {
		return d.err
	}
	if code != CodeOK {
		msg := d.str()
		if err := d.finish(); err != nil {
			return err
		}
		return &Error{Kind: k, Code: code, Msg: msg}
	}
	if b != nil {
		b.decode(&d)
	}
	return d.finish()
}

// kindNames are the requests' names: libibverbs' and librdmacm's calls
// (ibv_reg_mr is reg_mr), as the daemon's logs and errors give them.
var kindNames = map[Kind]string{
	KindQueryPort:        "query_port",
	KindAllocPD:          "alloc_pd",
	KindDeallocPD:        "dealloc_pd",
	KindRegMR:            "reg_mr",
	KindDeregMR:          "dereg_mr",
	KindRegMRShm:         "reg_mr_shm",
	KindCreateChannel:    "create_comp_channel",
	KindDestroyChannel:   "destroy_comp_channel",
	KindCreateCQ:         "create_cq",
	KindDestroyCQ:        "destroy_cq",
	KindCreateSRQ:        "create_srq",
	KindDestroySRQ:       "destroy_srq",
	KindCreateQP:         "create_qp",
	KindModifyQP:         "modify_qp",
	KindQueryQP:          "query_qp",
	KindDestroyQP:        "destroy_qp",
	KindListQPs:          "list_qps",
	KindCounters:         "counters",
	KindDoorbell:         "doorbell",
	KindCMCreateChannel:  "create_event_channel",
	KindCMDestroyChannel: "destroy_event_channel",
	KindCMCreateID:       "create_id",
	KindCMDestroyID:      "destroy_id",
	KindCMListen:         "listen",
	KindCMConnect:        "connect",
	KindCMAccept:         "accept",
	KindCMReject:         "reject",
	KindCMDisconnect:     "disconnect",
	KindCMGetEvent:       "get_cm_event",
	KindListCMIDs:        "list_cm_ids",
	KindAttachMcast:      "attach_mcast",
	KindDetachMcast:      "detach_mcast",
	KindAllocMW:          "alloc_mw",
	KindDeallocMW:        "dealloc_mw",
}

func (k Kind) String() string {
	if n, ok := kindNames[k]; ok {
		return n
	}
	return fmt.Sprintf("kind(%d)", uint16(k))
}
