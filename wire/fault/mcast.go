package fault

import (
	"net/netip"

	"github.com/rnicd/rnicd/wire/ibudp"
)

// The injector passes multicast straight to its port (ibudp.Multicaster):
// the groups' datagrams are UD, which loses them anyway, and no test of
// the injector's needs them impaired. A port that cannot join groups
// answers ibudp.ErrNoMulticast.

// JoinMulticast joins group on the port.
func (f *Injector) JoinMulticast(group netip.Addr) error {
	m, ok := f.port.(ibudp.Multicaster)
	if !ok {
		return ibudp.ErrNoMulticast
	}
	return m.JoinMulticast(group)
}

// LeaveMulticast leaves group on the port.
func (f *Injector) LeaveMulticast(group netip.Addr) error {
	m, ok := f.port.(ibudp.Multicaster)
	if !ok {
		return ibudp.ErrNoMulticast
	}
	return m.LeaveMulticast(group)
}

// RecvMulticast receives the groups' datagrams from the port.
func (f *Injector) RecvMulticast(bufs []*ibudp.Buf) (int, error) {
	m, ok := f.port.(ibudp.Multicaster)
	if !ok {
		return 0, ibudp.ErrNoMulticast
	}
	return m.RecvMulticast(bufs)
}

var _ ibudp.Multicaster = (*Injector)(nil)
