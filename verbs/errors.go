package verbs

import (
	"errors"
	"fmt"

	"syscall"

	"github.com/rnicd/rnicd/ib"
)

// The verbs' own errors, of the application's side.
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
)

// The NIC's errors under the names an application uses: each is defined
// once, in ib (whose doc says when it is returned), so errors.Is holds
// whichever side refused.
var ErrQPState, ErrQueueFull = ib.ErrQPState, ib.ErrQueueFull

// WRError is ib.WRError: which WR of a post was refused and why (bad_wr).
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
