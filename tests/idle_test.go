package tests

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rnicd/rnicd/verbs"
)

// cpuTicks is a process's user and system time so far, in clock ticks
// (/proc/PID/stat's utime and stime).
func cpuTicks(t *testing.T, pid int) uint64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// The command name may hold spaces: fields count from its ')'.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		t.Fatalf("/proc/%d/stat: %q", pid, b)
	}
	utime, err1 := strconv.ParseUint(f[11], 10, 64)
	stime, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("/proc/%d/stat: %q", pid, b)
	}
	return utime + stime
}

// TestIdleDaemonSleeps: the daemons' polling engines spin only while
// there is work. After a burst of WRITEs between two clients that stay
// connected, with their QPs in RTS and their rings watched, neither
// daemon uses more than 5% of a core over two idle seconds. An idle one
// used 0 ticks (USER_HZ 100) on 2 cores at load 20; an engine left
// polling (-poll-idle 1s, so that it spun through most of the window)
// used 21 there, where spinning, it yields to 30 runnable threads, and
// would take 200 on an idle core.
func TestIdleDaemonSleeps(t *testing.T) {
	da, db := daemons(t)
	a := newEnd(t, open(t, "rnicA"), endOpts{typ: verbs.QPTypeRC})
	b := newEnd(t, open(t, "rnicB"), endOpts{typ: verbs.QPTypeRC})
	connect(t, a, b, verbs.QPTypeRC, 7, 14)
	connect(t, b, a, verbs.QPTypeRC, 7, 14)
	data := pattern(4096, 9)
	copy(a.mr.Buf, data)
	for i := range 200 {
		post(t, a, verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{a.mr.SGE(0, 4096)}, RemoteAddr: b.mr.Addr, RKey: b.mr.RKey})
		wantWC(t, pollN(t, a.cq, 1)[0], verbs.WC{WRID: uint64(i), Opcode: verbs.WCRDMAWrite, ByteLen: 4096, QPNum: a.qp.QPN})
	}
	if !bytes.Equal(b.mr.Buf[:4096], data) {
		t.Fatal("WRITEs did not land")
	}
	time.Sleep(200 * time.Millisecond) // past every engine's idle interval and held ACK
	const bound = 10                   // ticks in 2 s: 5% of a core
	before := []uint64{cpuTicks(t, da.cmd.Process.Pid), cpuTicks(t, db.cmd.Process.Pid)}
	time.Sleep(2 * time.Second)
	for i, d := range []*daemon{da, db} {
		used := cpuTicks(t, d.cmd.Process.Pid) - before[i]
		if used > bound {
			t.Errorf("idle rnicd %s used %d clock ticks of CPU in 2 s, want at most %d", d.name, used, bound)
		}
		t.Logf("idle rnicd %s: %d clock ticks of CPU in 2 s", d.name, used)
	}
}
