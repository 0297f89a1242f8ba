module github.com/rnicd/rnicd

go 1.26.0

require (
	github.com/gopacket/gopacket v1.7.7 // indirect
	github.com/vishvananda/netlink v1.3.1 // indirect
	github.com/vishvananda/netns v0.0.5 // indirect
	golang.org/x/net v0.55.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
)
