package hostif

import (
	"testing"

	"github.com/rnicd/rnicd/abi"
)

// A client sees its daemon hang up without sending a request, and not
// before: a reply waiting to be read is no hang-up.
func TestClientHungUp(t *testing.T) {
	srv, cl, err := Socketpair()
	if err != nil {
		t.Fatal(err)
	}
	c := NewClient(cl)
	defer c.Close()
	if c.HungUp() {
		t.Fatal("hung up while the daemon's end is open")
	}
	if _, err := srv.Write(abi.Encode(abi.KindQueryPort, 0, 1, &abi.Empty{})); err != nil {
		t.Fatal(err)
	}
	if c.HungUp() {
		t.Fatal("a message waiting to be read counted as a hang-up")
	}
	srv.Close()
	if !c.HungUp() {
		t.Fatal("no hang-up after the daemon's end closed")
	}
	c.Close()
	if !c.HungUp() {
		t.Fatal("a closed client is not hung up")
	}
}
