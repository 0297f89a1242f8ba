package verbs

import (
	"errors"
	"fmt"

	"syscall"

	"github.com/rnicd/rnicd/ib"
)

// Errors common to both paths.
var (
	// ErrClosed is returned by any call on a closed Context or object.
	ErrClosed = errors.New("verbs: closed")
	// ErrNotShared is returned by RegMR for memory that does not come
	// from Context.Alloc.
	ErrNotShared = errors.New("verbs: buffer was not allocated by Context.Alloc")
	// ErrDeviceFatal is returned by CQ.Wait and CompChannel.GetCQEvent
	// once the daemon is gone (IBV_EVENT_DEVICE_FATAL): no completion
	// will come any more.
	ErrDeviceFatal = errors.New("verbs: device fatal error")
	// ErrQPState is returned by a post to a QP whose state does not
	// allow it: a send before RTS, a receive in RESET. It is the NIC's
	// own (ib.ErrQPState), as are ErrQueueFull and ErrCQOverrun.
	ErrQPState = ib.ErrQPState
	// ErrQueueFull is returned (in a *WRError) by a post to a queue that
	// holds as many WRs as it can: poll completions first.
	ErrQueueFull = ib.ErrQueueFull
)

// WRError says which work request of a post was refused and why (what
// libibverbs returns in bad_wr). The WRs before it were posted, it and
// the ones after it were not. Unwrap gives the reason, e.g. ErrQueueFull.
type WRError = ib.WRError

// RequestError is a verb the NIC refused (a create, a modify, a
// registration...), with the errno libibverbs would return:
// errors.Is(err, syscall.EINVAL) works on it.
type RequestError struct {
	Verb  string        // the request, e.g. "modify_qp"
	Errno syscall.Errno // EINVAL, ENOENT, EBUSY, EIO, ...
	Msg   string        // the NIC's reason
}

func (e *RequestError) Error() string {
	return fmt.Sprintf("rnicd: %s: %v: %s", e.Verb, e.Errno, e.Msg)
}

func (e *RequestError) Unwrap() error { return e.Errno }
