package ib

import (
	"errors"
	"fmt"
)

// The verbs' errors, one value each, so that errors.Is finds them whether
// the NIC (rnic, qpmgr) or the application's side (verbs) refused the
// call: an application that posts through a daemon and a test that posts
// to a Device directly test for the same values.
var (
	// ErrQPState is returned by a post to a QP whose state does not
	// allow it: a send before RTS, a receive in RESET.
	ErrQPState = errors.New("QP state does not allow this")
	// ErrQueueFull is returned (in a *WRError) by a post to a queue that
	// holds as many WRs as it can: poll completions first.
	ErrQueueFull = errors.New("work queue full")
	// ErrCQOverrun is returned once a completion did not fit in its CQ
	// (and was lost): the CQ was too small for its QPs.
	ErrCQOverrun = errors.New("completion queue overrun")
)

// WRError says which work request of a post was refused and why (what
// libibverbs returns in bad_wr). The WRs before it were posted, it and
// the ones after it were not. Unwrap gives the reason, e.g. ErrQueueFull.
type WRError struct {
	Index int    // position of the refused WR in the posted slice
	WRID  uint64 // its WRID
	Err   error
}

func (e *WRError) Error() string {
	return fmt.Sprintf("work request %d (wr_id %d): %v", e.Index, e.WRID, e.Err)
}

func (e *WRError) Unwrap() error { return e.Err }
