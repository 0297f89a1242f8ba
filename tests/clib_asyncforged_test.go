package tests

import (
	"encoding/binary"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/rnicd/rnicd/abi"
	"github.com/rnicd/rnicd/ib"
)

// TestCLibAsyncForgedEvents runs clib/test/asyncforged.c through a proxy
// that forges the daemon's first answers to ibv_get_async_event: events
// whose type does not fit the object they name, which a daemon's bug
// could send. The library must return none of them (ibv_ack_async_event
// would write an ibv_qp's counter into an ibv_cq, or through a null
// element) nor count them against the object (ibv_destroy_qp would wait
// for their acks for ever): only the event that fits, QP_FATAL naming
// the QP, comes back.
func TestCLibAsyncForgedEvents(t *testing.T) {
	lib := clibDir(t)
	dir, pdir := t.TempDir(), t.TempDir()
	d, err := startDaemon(dir, "rnicF", ownAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	defer d.cmd.Process.Kill()
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: filepath.Join(pdir, "rnicF.sock"), Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	defer wg.Wait() // after ln.Close: deferred calls run last first
	defer ln.Close()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.AcceptUnix()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				forgeEvents(t, c, filepath.Join(dir, "rnicF.sock"))
			}()
		}
	}()
	cmd := exec.Command(filepath.Join(lib, "asyncforged"), "rnicF")
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+lib, "RNICD_DIR="+pdir)
	want := `the one event that fits its object: QP_FATAL, element.qp the QP: ok
ibv_destroy_qp returns: it waits for no event it was never given: ok
nothing more: EAGAIN: ok
every object destroyed: ok
PASS
`
	if out := runOut(t, cmd); out != want {
		t.Fatalf("asyncforged printed\n%s\nwant\n%s", out, want)
	}
}

// forgeEvents relays one client connection c to the daemon's socket at
// sock, messages and descriptors both, but answers the client's first
// get_async_event requests itself with events that do not fit their
// objects, then one that does, learning the handles of its CQ, SRQ and
// QP from the daemon's replies.
func forgeEvents(t *testing.T, c *net.UnixConn, sock string) {
	defer c.Close()
	dc, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: sock, Net: "unixpacket"})
	if err != nil {
		t.Error(err)
		return
	}
	defer dc.Close()
	var mu sync.Mutex
	handles := map[abi.Kind]uint32{}
	var forged []abi.AsyncEvent
	started := false
	done := make(chan struct{})
	go func() { // the daemon's messages to the client
		defer close(done)
		defer c.CloseWrite()
		relay(dc, c, func(h abi.Header, msg []byte) []byte {
			if h.Flags&abi.FlagReply != 0 && len(msg) >= abi.HeaderLen+8 && binary.LittleEndian.Uint32(msg[abi.HeaderLen:]) == 0 {
				mu.Lock()
				handles[h.Kind] = binary.LittleEndian.Uint32(msg[abi.HeaderLen+4:])
				mu.Unlock()
			}
			return msg
		})
	}()
	relay(c, dc, func(h abi.Header, msg []byte) []byte {
		if h.Kind != abi.KindGetAsyncEvent {
			return msg
		}
		mu.Lock()
		defer mu.Unlock()
		if !started {
			started = true
			cq, srq, qp := handles[abi.KindCreateCQ], handles[abi.KindCreateSRQ], handles[abi.KindCreateQP]
			forged = []abi.AsyncEvent{
				{Have: true, Type: ib.EventQPFatal, H: cq},
				{Have: true, Type: ib.EventCQErr, H: qp},
				{Have: true, Type: ib.EventSRQLimitReached, H: qp},
				{Have: true, Type: ib.EventQPLastWQEReached, H: srq},
				{Have: true, Type: ib.EventQPFatal, Port: 1},
				{Have: true, Type: ib.EventDeviceFatal, H: qp},
				{Have: true, Type: ib.EventQPFatal, H: qp},
			}
		}
		if len(forged) == 0 {
			return msg
		}
		rep := abi.EncodeReply(abi.KindGetAsyncEvent, h.ID, &forged[0])
		forged = forged[1:]
		if _, _, err := c.WriteMsgUnix(rep, nil, nil); err != nil {
			t.Error(err)
		}
		return nil
	})
	dc.CloseWrite()
	<-done
}

// relay copies messages with their descriptors from one socket to the
// other until from ends, each through edit (nil: not sent).
func relay(from, to *net.UnixConn, edit func(abi.Header, []byte) []byte) {
	buf, oob := make([]byte, abi.MaxMessage), make([]byte, unix.CmsgSpace(4*16))
	for {
		n, oobn, _, _, err := from.ReadMsgUnix(buf, oob)
		if err != nil || n == 0 {
			return
		}
		msg := buf[:n]
		if h, err := abi.ParseHeader(msg); err == nil {
			msg = edit(h, msg)
		}
		var fds []int
		if oobn > 0 {
			if cms, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
				for _, cm := range cms {
					if f, err := unix.ParseUnixRights(&cm); err == nil {
						fds = append(fds, f...)
					}
				}
			}
		}
		if msg != nil {
			var rights []byte
			if len(fds) > 0 {
				rights = unix.UnixRights(fds...)
			}
			if _, _, err := to.WriteMsgUnix(msg, rights, nil); err != nil && !errors.Is(err, net.ErrClosed) {
				return
			}
		}
		for _, f := range fds {
			unix.Close(f)
		}
	}
}
