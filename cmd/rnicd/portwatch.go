package main

import (
	"log/slog"

	"github.com/rnicd/rnicd/hostif"
	"github.com/rnicd/rnicd/rnic"
	"github.com/rnicd/rnicd/wire/netif"
)

// watchPort tells srv's clients when the link of the interface under the
// device's address goes down or up (PORT_ERR, PORT_ACTIVE), as rxe tells
// them of its netdev's, until stop closes. A port whose interface cannot
// be watched runs without port events, said in the log.
func watchPort(log *slog.Logger, dev *rnic.Device, srv *hostif.Server, stop <-chan struct{}) {
	ifc, err := netif.InterfaceOf(dev.QueryPort().Addr)
	if err != nil {
		log.Warn("no port events: the port's interface is unknown", "err", err)
		return
	}
	change := func(up bool) {
		log.Info("port link changed", "interface", ifc.Name, "active", up)
		srv.PortEvent(up)
	}
	logf := func(err error) { log.Warn("port events: netlink", "interface", ifc.Name, "err", err) }
	if err := netif.WatchLink(ifc.Index, srv.SetPortState, change, logf, stop); err != nil {
		log.Warn("no port events", "interface", ifc.Name, "err", err)
	}
}
