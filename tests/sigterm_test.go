package tests

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/rnicd/rnicd/internal/looptest"
	"github.com/rnicd/rnicd/verbs"
)

// TestSIGTERMFlushes: a daemon stopped with SIGTERM moves every QP to
// ERR first, so its client finds every outstanding WQE completed with
// WR_FLUSH_ERR in its CQ; the daemon exits 0 and removes its socket.
func TestSIGTERMFlushes(t *testing.T) {
	dir := t.TempDir()
	d, err := startDaemon(dir, "rnicT", ownAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	defer d.cmd.Process.Kill()
	t.Setenv("RNICD_DIR", dir)
	c := must[*verbs.Context](t)(verbs.Open("rnicT"))
	defer c.Close()
	e := newEnd(t, c, endOpts{typ: verbs.QPTypeRC})
	// Nobody answers at an address of this test's own that no NIC binds,
	// and retry_cnt 7 retries forever: the WRITEs stay outstanding until
	// the daemon stops.
	connectTo(t, e, 0x99, looptest.Get(t), 7, 10)
	for id := range uint64(3) {
		postRecv(t, e, 100+id, int(id)*64, 64)
	}
	for id := range uint64(5) {
		post(t, e, verbs.SendWR{WRID: id, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{e.mr.SGE(0, 4096)}, RemoteAddr: 0x1000, RKey: 1})
	}
	if err := d.stop(); err != nil {
		t.Fatalf("rnicd exit: %v\n%s", err, d.errb.String())
	}
	wcs := pollN(t, e.cq, 8)
	sends, recvs := 0, 0
	for _, wc := range wcs {
		if wc.Status != verbs.WCWRFlushErr || wc.QPNum != e.qp.QPN {
			t.Fatalf("completion %v, want WR_FLUSH_ERR on QP %#x", &wc, e.qp.QPN)
		}
		switch {
		case wc.WRID < 100 && wc.WRID == uint64(sends) && wc.Opcode == verbs.WCRDMAWrite:
			sends++
		case wc.WRID >= 100 && wc.WRID == uint64(100+recvs) && wc.Opcode == verbs.WCRecv:
			recvs++
		default:
			t.Fatalf("completion %v out of order", &wc)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "rnicT.sock")); !os.IsNotExist(err) {
		t.Fatalf("socket left behind: %v", err)
	}
}
