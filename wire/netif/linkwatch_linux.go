package netif

import (
	"fmt"
	"net"
	"time"

	"github.com/vishvananda/netlink"
)

// LinkUp is the port state rxe derives from its netdev (rxe_set_port_state):
// active while the interface is up and has carrier (netif_running and
// netif_carrier_ok: IFF_UP and IFF_RUNNING), down otherwise.
func LinkUp(flags net.Flags) bool { return flags&net.FlagUp != 0 && flags&net.FlagRunning != 0 }

// WatchLink follows the interface with the given index over netlink
// (RTNLGRP_LINK) and calls change with its new state each time it turns
// up or down (LinkUp), as rxe's netdev notifier turns NETDEV_UP,
// NETDEV_DOWN and NETDEV_CHANGE into PORT_ACTIVE and PORT_ERR; a message
// that repeats the state (an MTU change, say) calls nothing. Before any
// change it calls initial with the state read once subscribed, so that
// no change between the two is missed and none is overwritten by the
// state it follows (the caller setting a state WatchLink returned could
// land after the first change); stop ends the watch. A subscription that
// fails later (its socket overran, ENOBUFS) is made again after a
// second, the state re-read and any change told, and logf told why.
func WatchLink(index int, initial, change func(up bool), logf func(error), stop <-chan struct{}) error {
	// The subscription's socket fails its receive when stop closes it:
	// no news then.
	onErr := func(err error) {
		select {
		case <-stop:
		default:
			logf(err)
		}
	}
	sub := func() (chan netlink.LinkUpdate, chan struct{}, bool, error) {
		ch, done := make(chan netlink.LinkUpdate, 64), make(chan struct{})
		if err := netlink.LinkSubscribeWithOptions(ch, done, netlink.LinkSubscribeOptions{ErrorCallback: onErr}); err != nil {
			return nil, nil, false, fmt.Errorf("netif: watching link %d: %w", index, err)
		}
		l, err := netlink.LinkByIndex(index)
		if err != nil {
			close(done)
			return nil, nil, false, fmt.Errorf("netif: link %d: %w", index, err)
		}
		return ch, done, LinkUp(l.Attrs().Flags), nil
	}
	ch, done, up, err := sub()
	if err != nil {
		return err
	}
	initial(up)
	go func() {
		for {
			select {
			case <-stop:
				close(done)
				return
			case u, ok := <-ch:
				if !ok {
					close(done)
					var now bool
					for {
						select {
						case <-stop:
							return
						case <-time.After(time.Second):
						}
						if ch, done, now, err = sub(); err == nil {
							break
						}
						logf(err)
					}
					if now != up {
						up = now
						change(up)
					}
					continue
				}
				if int(u.Index) != index {
					continue
				}
				if now := LinkUp(u.Attrs().Flags); now != up {
					up = now
					change(up)
				}
			}
		}
	}()
	return nil
}
