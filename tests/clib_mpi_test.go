package tests

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rnicd/rnicd/internal/debtest"
)

// TestCLibOpenMPI runs an MPI program (clib/test/mpipingpong.c, built
// with Debian's Open MPI 4.1 mpicc) as two ranks on two rnicd, started by
// Debian's mpirun with pml ucx and only clib on LD_LIBRARY_PATH: each
// rank sees one rnicd (the daemons' sockets are in two directories, rank
// 1 and its rnicd in an IPC namespace of their own, as on a second host)
// and UCX is told its device (UCX_NET_DEVICES), once with the verbs
// transports named (UCX_TLS=rc_verbs,ud_verbs,self) and once with UCX's
// default selection, which registers System V shared memory. 100 round
// trips of 64 KiB, every byte checked on both ranks, and an allreduce;
// both rnicd's counters show the data went through them.
func TestCLibOpenMPI(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("UCX lists a device only with its /dev/infiniband node, which rnicd makes as root (CAP_MKNOD)")
	}
	lib := clibDir(t)
	mpirun := debianTool(t, "mpirun", "openmpi-bin")
	mpicc := debtest.Ensure(t, "mpicc", "libopenmpi-dev")
	debianTool(t, "ucx_info", "ucx-utils") // pml ucx's libraries
	prog := filepath.Join(t.TempDir(), "mpipingpong")
	if out, err := exec.Command(mpicc, "-O2", "-o", prog, "../clib/test/mpipingpong.c").CombinedOutput(); err != nil {
		t.Fatalf("mpicc: %v\n%s", err, out)
	}

	// Rank 1 and its rnicd in an IPC namespace of their own, as on a
	// second host: UCX then finds no shared memory between the ranks.
	debtest.Ensure(t, "unshare", "util-linux")
	debtest.Ensure(t, "nsenter", "util-linux")
	p := startApart(t, "mp", []string{"unshare", "--ipc", "--"})
	ipcB := fmt.Sprintf("--ipc=/proc/%d/ns/ipc", p.b.cmd.Process.Pid)

	for _, tls := range []string{
		"rc_verbs,ud_verbs,self",
		"all", // UCX's default selection (ucx_info -c)
	} {
		beforeA, beforeB := must[map[string]uint64](t)(p.ca.Counters()), must[map[string]uint64](t)(p.cb.Counters())
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		args := []string{
			"--allow-run-as-root", "--oversubscribe",
			// pml ucx, and nothing else that opens the devices: the
			// openib BTL and the ofi MTL and UCX's one-sided component.
			"--mca", "pml", "ucx", "--mca", "btl", "self,tcp", "--mca", "mtl", "^ofi", "--mca", "osc", "^ucx",
			"-x", "LD_LIBRARY_PATH=" + lib, "-x", "UCX_TLS=" + tls,
			"-np", "1", "-x", "RNICD_DIR=" + p.dirA, "-x", "UCX_NET_DEVICES=" + p.nameA + ":1", prog, ":",
			"-np", "1", "-x", "RNICD_DIR=" + p.dirB, "-x", "UCX_NET_DEVICES=" + p.nameB + ":1", "nsenter", ipcB, "--", prog,
		}
		out, err := mpirun(ctx, "", args...).CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("mpirun with UCX_TLS=%s: %v\n%s", tls, err, out)
		}
		for r := 0; r < 2; r++ {
			want := fmt.Sprintf("rank %d: 100 round trips of 65536 bytes, 0 bad bytes; allreduce 3 30 200 -1\n", r)
			if !strings.Contains(string(out), want) {
				t.Errorf("mpirun with UCX_TLS=%s printed no %q:\n%s", tls, want, out)
			}
		}
		// 100 messages of 64 KiB went each way between the two rnicd:
		// 64 packets each at their MTU of 1024, whichever side's
		// daemon sends them (a READ's responses or a SEND's or
		// WRITE's requests), so at least 6400 left and reached each.
		afterA, afterB := must[map[string]uint64](t)(p.ca.Counters()), must[map[string]uint64](t)(p.cb.Counters())
		for _, d := range []struct {
			who           string
			before, after map[string]uint64
		}{{"rank 0's", beforeA, afterA}, {"rank 1's", beforeB, afterB}} {
			for _, k := range []string{"sent_pkts", "rcvd_pkts"} {
				got := d.after[k] - d.before[k]
				if got < 100*64 {
					t.Errorf("UCX_TLS=%s: the %s rnicd counts %s %d, want at least %d", tls, d.who, k, got, 100*64)
				}
				t.Logf("UCX_TLS=%s: the %s rnicd: %s %d", tls, d.who, k, got)
			}
		}
	}
}
