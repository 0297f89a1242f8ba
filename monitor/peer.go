package monitor

import (
	"context"
	"net"

	"golang.org/x/sys/unix"
)

// peerKey is the context key of a request's peer credentials.
type peerKey struct{}

// ConnContext is an http.Server's ConnContext that records the peer
// credentials (SO_PEERCRED: pid, uid, gid at connect) of a unix socket
// connection, for PeerCred; other connections have none.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return ctx
	}
	rc, err := uc.SyscallConn()
	if err != nil {
		return ctx
	}
	var cred *unix.Ucred
	rc.Control(func(fd uintptr) { cred, err = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) })
	if err != nil || cred == nil {
		return ctx
	}
	return context.WithValue(ctx, peerKey{}, *cred)
}

// PeerCred returns the credentials ConnContext recorded for the
// connection a request came on; ok is false for a TCP connection.
func PeerCred(ctx context.Context) (cred unix.Ucred, ok bool) {
	cred, ok = ctx.Value(peerKey{}).(unix.Ucred)
	return cred, ok
}
