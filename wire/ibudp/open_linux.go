package ibudp

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/rnicd/rnicd/wire/netif"
)

func open(cfg Config) (Port, error) {
	ifc, err := netif.InterfaceOf(cfg.Addr)
	if err != nil {
		// A UDP socket does not need the interface; only its MTU, which the
		// configuration can give instead.
		if cfg.Mode == ModePacket || cfg.MTU == 0 {
			if cfg.SocketFD > 0 {
				unix.Close(cfg.SocketFD)
			}
			return nil, fmt.Errorf("ibudp: opening %v port on %v: %w", cfg.Mode, cfg.Addr, err)
		}
	}
	if err == nil && cfg.Addr.Is6() && cfg.Addr.IsLinkLocalUnicast() && cfg.Addr.Zone() == "" {
		cfg.Addr = cfg.Addr.WithZone(ifc.Name) // a link-local bind needs its interface
	}
	mtu := cfg.MTU
	if err == nil && (mtu == 0 || ifc.ActiveMTU() < mtu) {
		mtu = ifc.ActiveMTU()
	}
	switch cfg.Mode {
	case ModePacket:
		return openPacket(cfg, ifc, mtu)
	default:
		return openUDP(cfg, ifc, mtu)
	}
}
