package verbs

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rnicd/rnicd/hostif"
	"github.com/rnicd/rnicd/internal/looptest"
	"github.com/rnicd/rnicd/rnic"
	"github.com/rnicd/rnicd/wire/ibudp"
)

// When the daemon goes away (here: the in-process server's end of the
// connection closes, as a killed rnicd's does), a waiter on a CQ or a
// completion channel gets ErrDeviceFatal instead of waiting forever.
func TestDaemonGoneIsFatal(t *testing.T) {
	c, err := OpenLocal(LocalConfig{Addr: looptest.Get(t), MTU: 1024})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ch, err := c.CreateCompChannel()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := c.CreateCQ(16, nil)
	if err != nil {
		t.Fatal(err)
	}
	evcq, err := c.CreateCQ(16, ch)
	if err != nil {
		t.Fatal(err)
	}
	if err := evcq.ReqNotify(false); err != nil {
		t.Fatal(err)
	}
	// While the daemon is there, a wait just ends with its context.
	short, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
	if err := cq.Wait(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait with the daemon up: %v", err)
	}
	cancel()

	c.local.conn.Close()
	// The deadline only guards against the hang this test is about.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cq.Wait(ctx); !errors.Is(err, ErrDeviceFatal) {
		t.Fatalf("CQ.Wait after the daemon went: %v", err)
	}
	if _, err := ch.GetCQEvent(ctx); !errors.Is(err, ErrDeviceFatal) {
		t.Fatalf("GetCQEvent after the daemon went: %v", err)
	}
}

// Devices lists the sockets a daemon listens on, and not one left by a
// daemon that was killed.
func TestDevicesSkipsStaleSockets(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("RNICD_DIR", dir)
	live, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: SocketPath("rnicB"), Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	dead, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: SocketPath("rnicA"), Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	dead.SetUnlinkOnClose(false) // as a SIGKILL leaves it
	dead.Close()
	if err := os.WriteFile(filepath.Join(dir, "notes.sock"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	names, err := Devices()
	if err != nil || len(names) != 1 || names[0] != "rnicB" {
		t.Fatalf("Devices() = %q, %v; want [rnicB]", names, err)
	}
}

// A wait whose context ends just as its event arrives must leave nothing
// behind that makes the next wait fail: an event is there, it is taken.
func TestEventFDWaitAfterRacingCancel(t *testing.T) {
	e, write := wakePipe(t)
	defer e.close()
	done, cancel := context.WithCancel(context.Background())
	cancel()
	for i := 0; i < 200; i++ {
		// An event, and a context already over: the read and the
		// deadline race, either may win.
		write()
		if err := e.wait(done); err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("round %d: wait with a cancelled context: %v", i, err)
		}
		// Whatever won, an event is there now and the next wait takes it.
		write()
		if err := e.wait(context.Background()); err != nil {
			t.Fatalf("round %d: wait with an event pending: %v", i, err)
		}
	}
}

// A post or a request to a daemon that has gone gets ErrDeviceFatal too,
// not the socket's broken pipe: a killed rnicd looks the same to an
// application whether it was waiting or posting.
func TestPostToGoneDaemonIsFatal(t *testing.T) {
	port, err := ibudp.Open(ibudp.Config{Addr: looptest.Get(t), MTU: 1024})
	if err != nil {
		t.Fatal(err)
	}
	dev, err := rnic.Open(rnic.Config{Port: port})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	srvEnd, cliEnd, err := hostif.Socketpair()
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { hostif.NewServer(hostif.Config{Device: dev}).ServeConn(srvEnd); close(served) }()
	c := &Context{name: "gone", cl: hostif.NewClient(cliEnd)} // a daemon's client: doorbells are messages
	defer c.Close()
	pd, err := c.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := c.CreateCQ(16, nil)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := pd.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: cq, RecvCQ: cq,
		Cap: QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if err := qp.Modify(&QPAttr{State: QPSInit, PortNum: 1}, AttrState|AttrPKeyIndex|AttrPort|AttrAccessFlags); err != nil {
		t.Fatal(err)
	}
	if err := qp.PostRecv([]RecvWR{{WRID: 1}}); err != nil {
		t.Fatalf("PostRecv with the daemon up: %v", err)
	}

	srvEnd.Close()
	<-served
	for deadline := time.Now().Add(10 * time.Second); !c.cl.HungUp(); {
		if time.Now().After(deadline) {
			t.Fatal("the client never saw the hang-up")
		}
		time.Sleep(time.Millisecond)
	}
	if err := qp.PostRecv([]RecvWR{{WRID: 2}}); !errors.Is(err, ErrDeviceFatal) {
		t.Fatalf("PostRecv after the daemon went: %v, want ErrDeviceFatal", err)
	}
	if _, err := c.AllocPD(); !errors.Is(err, ErrDeviceFatal) {
		t.Fatalf("AllocPD after the daemon went: %v, want ErrDeviceFatal", err)
	}
}

// CQ.Err, what a program spinning on Poll looks at now and then, is nil
// for a live CQ and ErrClosed once the CQ is destroyed, so that the spin
// ends instead of polling an empty CQ forever.
func TestCQErrAfterDestroy(t *testing.T) {
	c, err := OpenLocal(LocalConfig{Addr: looptest.Get(t), MTU: 1024})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cq, err := c.CreateCQ(4, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := cq.Err(); err != nil {
		t.Fatalf("Err of a live CQ: %v", err)
	}
	if err := cq.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := cq.Err(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Err of a destroyed CQ: %v, want ErrClosed", err)
	}
	var wcs [1]WC
	if n := cq.Poll(wcs[:]); n != 0 {
		t.Fatalf("Poll of a destroyed CQ took %d completions", n)
	}
}
