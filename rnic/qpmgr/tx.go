package qpmgr

import "github.com/rnicd/rnicd/wire/ibudp"

// TX is where the engines put the packets they build: the device collects
// them into batches for the port. Alloc gives an empty buffer; Send queues
// a filled one (the TX owns it from then on).
type TX interface {
	Alloc() *ibudp.Buf
	Send(b *ibudp.Buf)
}
