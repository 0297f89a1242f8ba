package interop

import (
	"fmt"
	"strings"
)

// mckeyCheck checks what mckey printed on both sides: each joined
// mckeyGroup under its IPv4-mapped MGID, the receiver (the server) took
// every datagram and the sender (the client) sent them, and each ended
// with status 0; the C library said nothing.
func mckeyCheck(rxeRole, hostOut, vmOut string) string {
	joined := "mckey: joined dgid: ::ffff:" + mckeyGroup + " mlid 0x0 sl 0\n"
	server := "mckey: starting server\nmckey: joining\n" + joined + "receiving data transfers\ndata transfers complete\ntest complete\nreturn status 0\n"
	client := "mckey: starting client\nmckey: joining\n" + joined + "initiating data transfers\ndata transfers complete\ntest complete\nreturn status 0\n"
	hostWant, vmWant, hostSide, vmSide := server, client, "rnic's receiver", "rxe's sender"
	if rxeRole == "server" {
		hostWant, vmWant, hostSide, vmSide = client, server, "rnic's sender", "rxe's receiver"
	}
	for _, s := range []struct{ side, out, want string }{{hostSide, hostOut, hostWant}, {vmSide, vmOut, vmWant}} {
		if !strings.Contains(s.out, s.want) {
			return fmt.Sprintf("%s did not print %q", s.side, s.want)
		}
	}
	if strings.Contains(hostOut, "librdmacm-rnicd") || strings.Contains(hostOut, "libibverbs-rnicd") {
		return "rnic's side: the C library printed to a run that works"
	}
	return ""
}
