package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/rnicd/rnicd/verbs"
)

// TestCLibMemoryWindows runs the C program mw between two rnicd: type 1
// (ibv_bind_mw) and type 2 (IBV_WR_BIND_MW, ibv_wr_bind_mw) windows over
// the middle of a region, WRITEs and READs through the window's rkey
// landing byte for byte, accesses one byte outside the window (inside
// the region) and after a remote (SEND_WITH_INV) and a local
// (ibv_wr_local_inv) invalidation failing with REM_ACCESS_ERR and the
// bytes around unchanged, and binds to a region without MW_BIND, of
// another PD's window and to another client's region failing with
// MW_BIND_ERR, every completion checked field by field by the program.
func TestCLibMemoryWindows(t *testing.T) {
	tb := newToolBench(t)
	lib := clibDir(t)
	cmd := exec.Command(filepath.Join(lib, "mw"), "rnicA", "rnicB")
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+lib)
	out := runOut(t, cmd)
	want := "ibv_query_device: max_mw 65536, MEM_WINDOW and MEM_WINDOW_TYPE_2B\n" +
		"type 1: ibv_bind_mw, a WRITE and a READ of 5000 bytes through the window: success, data checked\n" +
		"type 1: a WRITE one byte past the window and a READ one byte before it: remote access error, guards unchanged\n" +
		"ibv_dereg_mr with a window bound: EINVAL; LOCAL_INV of a type 1 window: local QP operation error\n" +
		"type 2: BIND_MW zero-based, a WRITE landed; SEND_WITH_INV invalidated it (IBV_WC_WITH_INV), then a WRITE: remote access error, bytes unchanged\n" +
		"type 2: ibv_wr_bind_mw, a READ landed; ibv_wr_local_inv, then a READ: remote access error\n" +
		"binds to a region without MW_BIND, of another PD's window and to another client's region: memory bind error; ibv_bind_mw to another PD's region: EPERM\n" +
		"PASS\n"
	if out != want {
		t.Fatalf("mw printed\n%s\nwant\n%s", out, want)
	}
	// What tb.idle checks, but for the one refusal the program asked
	// for (the dereg of a region with a window bound) on the target's
	// daemon, which also counts a NAK for each of the four accesses it
	// refused (one past and one before the window, after the remote and
	// after the local invalidation).
	for i, c := range []*verbs.Context{tb.ca, tb.cb} {
		for deadline := time.Now().Add(30 * time.Second); leftover(objects(t, c)) != ""; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s still holds %s", c.Name(), leftover(objects(t, c)))
			}
		}
		m := must[map[string]uint64](t)(c.Counters())
		bad, naks := uint64(1), m["naks_sent"] >= 4
		if i == 1 {
			bad, naks = 0, true
		}
		if m["hostif_bad_request"] != bad || m["hostif_bad_wqe"] != 0 || m["hostif_cq_overrun"] != 0 || !naks {
			t.Fatalf("%s counts hostif_bad_request %d (want %d), hostif_bad_wqe %d, hostif_cq_overrun %d, naks_sent %d",
				c.Name(), m["hostif_bad_request"], bad, m["hostif_bad_wqe"], m["hostif_cq_overrun"], m["naks_sent"])
		}
	}
}
