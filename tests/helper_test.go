package tests

import (
	"bufio"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"github.com/rnicd/rnicd/verbs"
)

// runHelper is the test binary re-executed as a client process of its
// own, so that a test can kill a client. Role "target": open the device
// in RNICD_HELPER_DEV, make an RC QP with a registered buffer, print
// "qpn rkey addr gid", read the peer's "qpn gid" from stdin, connect,
// print "ready" and wait to be killed.
func runHelper(role string) error {
	if role == "hog" {
		return runHog()
	}
	if role == "wakehog" {
		return runWakeHog()
	}
	if role == "holder" {
		return runHolder()
	}
	if role == "bindroce" {
		return runBindRoCE()
	}
	if role != "target" {
		return fmt.Errorf("unknown role %q", role)
	}
	c, err := verbs.Open(os.Getenv("RNICD_HELPER_DEV"))
	if err != nil {
		return err
	}
	pd, err := c.AllocPD()
	if err != nil {
		return err
	}
	mem, err := c.Alloc(1 << 20)
	if err != nil {
		return err
	}
	mr, err := pd.RegMR(mem, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	if err != nil {
		return err
	}
	cq, err := c.CreateCQ(64, nil)
	if err != nil {
		return err
	}
	qp, err := pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return err
	}
	pa, err := c.QueryPort()
	if err != nil {
		return err
	}
	fmt.Printf("%d %d %d %s\n", qp.QPN, mr.RKey, mr.Addr, pa.Addr)
	in := bufio.NewScanner(os.Stdin)
	if !in.Scan() {
		return fmt.Errorf("no peer line")
	}
	f := strings.Fields(in.Text())
	if len(f) != 2 {
		return fmt.Errorf("peer line %q", in.Text())
	}
	pqpn, err := strconv.ParseUint(f[0], 10, 32)
	if err != nil {
		return err
	}
	paddr, err := netip.ParseAddr(f[1])
	if err != nil {
		return err
	}
	steps := []struct {
		a    verbs.QPAttr
		mask verbs.AttrMask
	}{
		{verbs.QPAttr{State: verbs.QPSInit, PortNum: 1, AccessFlags: verbs.AccessRemoteWrite},
			verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrAccessFlags},
		{verbs.QPAttr{State: verbs.QPSRTR, PathMTU: verbs.MTU1024, DestQPN: uint32(pqpn), RQPSN: 0x100,
			MaxDestRdAtomic: 1, MinRNRTimer: 1, AH: verbs.AH{DGID: paddr.As16(), HopLimit: 64}},
			verbs.AttrState | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN |
				verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer},
		{verbs.QPAttr{State: verbs.QPSRTS, SQPSN: 0x100, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
			verbs.AttrState | verbs.AttrSQPSN | verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry |
				verbs.AttrMaxQPRdAtomic},
	}
	for _, s := range steps {
		if err := qp.Modify(&s.a, s.mask); err != nil {
			return err
		}
	}
	fmt.Println("ready")
	select {}
}
