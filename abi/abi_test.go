package abi

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/rnicd/rnicd/ib"
)

// cHeader is the C library's copy of the ABI.
const cHeader = "../clib/src/rnic.h"

// goABI is the ABI as the Go side has it, by the C header's names: the
// constants as they are, and every slot field's offset as the codecs
// write it (slotOffsets), so that the test compares what the Go code
// does, not a second table of numbers.
func goABI(t *testing.T) map[string]int64 {
	m := map[string]int64{
		"K_QUERY_PORT": int64(KindQueryPort), "K_ALLOC_PD": int64(KindAllocPD), "K_DEALLOC_PD": int64(KindDeallocPD),
		"K_REG_MR": int64(KindRegMR), "K_DEREG_MR": int64(KindDeregMR), "K_CREATE_CHANNEL": int64(KindCreateChannel),
		"K_DESTROY_CHANNEL": int64(KindDestroyChannel), "K_CREATE_CQ": int64(KindCreateCQ), "K_DESTROY_CQ": int64(KindDestroyCQ),
		"K_CREATE_SRQ": int64(KindCreateSRQ), "K_DESTROY_SRQ": int64(KindDestroySRQ), "K_CREATE_QP": int64(KindCreateQP),
		"K_MODIFY_QP": int64(KindModifyQP), "K_QUERY_QP": int64(KindQueryQP), "K_DESTROY_QP": int64(KindDestroyQP),
		"K_LIST_QPS": int64(KindListQPs), "K_COUNTERS": int64(KindCounters), "K_DOORBELL": int64(KindDoorbell),
		"K_CM_CREATE_CHANNEL": int64(KindCMCreateChannel), "K_CM_DESTROY_CHANNEL": int64(KindCMDestroyChannel),
		"K_CM_CREATE_ID": int64(KindCMCreateID), "K_CM_DESTROY_ID": int64(KindCMDestroyID), "K_CM_LISTEN": int64(KindCMListen),
		"K_CM_CONNECT": int64(KindCMConnect), "K_CM_ACCEPT": int64(KindCMAccept), "K_CM_REJECT": int64(KindCMReject),
		"K_CM_DISCONNECT": int64(KindCMDisconnect), "K_CM_GET_EVENT": int64(KindCMGetEvent), "K_LIST_CM_IDS": int64(KindListCMIDs),
		"K_REG_MR_SHM": int64(KindRegMRShm), "K_ATTACH_MCAST": int64(KindAttachMcast), "K_DETACH_MCAST": int64(KindDetachMcast),
		"K_OPEN_ASYNC": int64(KindOpenAsync), "K_GET_ASYNC_EVENT": int64(KindGetAsyncEvent),
		"K_MODIFY_SRQ": int64(KindModifySRQ), "K_QUERY_SRQ": int64(KindQuerySRQ),
		"PORT_DOWN": int64(PortDown), "PORT_ACTIVE": int64(PortActive),
		"K_ALLOC_MW": int64(KindAllocMW), "K_DEALLOC_MW": int64(KindDeallocMW),
		"K_RESIZE_CQ": int64(KindResizeCQ),

		"HDR_LEN": HeaderLen, "MAX_MSG": MaxMessage, "FLAG_REPLY": int64(FlagReply),

		"CODE_OK": int64(CodeOK), "CODE_INVALID": int64(CodeInvalid), "CODE_NO_HANDLE": int64(CodeNoHandle),
		"CODE_MALFORMED": int64(CodeMalformed), "CODE_UNKNOWN": int64(CodeUnknown), "CODE_BUSY": int64(CodeBusy),
		"CODE_FAILED": int64(CodeFailed), "CODE_LIMIT": int64(CodeLimit),

		"DOORBELL_SEND": int64(DoorbellSend), "DOORBELL_RECV": int64(DoorbellRecv),

		"CM_EV_CONNECT_REQUEST": int64(CMEventConnectRequest), "CM_EV_ESTABLISHED": int64(CMEventEstablished),
		"CM_EV_REJECTED": int64(CMEventRejected), "CM_EV_UNREACHABLE": int64(CMEventUnreachable),
		"CM_EV_CONNECT_ERROR": int64(CMEventConnectError), "CM_EV_DISCONNECTED": int64(CMEventDisconnected),
		"CM_EV_TIMEWAIT_EXIT": int64(CMEventTimewaitExit),

		"RING_PRODUCER": RingProducer, "RING_DEPTH": RingDepth, "RING_SLOT_SIZE": RingSlotSize,
		"RING_ARMED": RingArmed, "RING_FLAGS": RingFlags, "RING_EVENTS": RingEvents, "RING_WAITING": RingWaiting,
		"RING_BELL": RingBell, "RING_ASLEEP": RingAsleep, "RING_CONSUMER": RingConsumer, "RING_HEADER": RingHeader,
		"ARM_ANY": int64(ArmAny), "ARM_SOLICITED": int64(ArmSolicited), "FLAG_OVERRUN": int64(FlagOverrun),

		"SEND_FIXED": sendFixed, "SGE_BYTES": sgeBytes, "CQE_BYTES": CQESlotBytes,
	}
	for k, v := range slotOffsets(t) {
		m[k] = v
	}
	for k, v := range xrcABI {
		m[k] = v
	}
	for k, v := range mappedABI {
		m[k] = v
	}
	return m
}

// slotOffsets finds where the Go codecs put each field of a slot: the
// first byte that changes when the field alone changes.
func slotOffsets(t *testing.T) map[string]int64 {
	m := map[string]int64{}
	diff := func(name string, a, b []byte) int64 {
		for i := range a {
			if a[i] != b[i] {
				return int64(i)
			}
		}
		t.Fatalf("%s: the codec wrote no byte of it", name)
		return 0
	}
	const ones = ^uint64(0)
	send := func(wr ib.SendWR) []byte {
		slot := make([]byte, SendSlotBytes(1, 64))
		if err := EncodeSendWQE(slot, &wr); err != nil {
			t.Fatal(err)
		}
		return slot
	}
	base := ib.SendWR{SGL: []ib.SGE{{}}}
	baseSlot := send(base)
	for name, set := range map[string]func(*ib.SendWR){
		"SWQE_WR_ID":       func(w *ib.SendWR) { w.WRID = ones },
		"SWQE_OPCODE":      func(w *ib.SendWR) { w.Opcode = ib.WRRDMARead },
		"SWQE_SEND_FLAGS":  func(w *ib.SendWR) { w.Flags = ib.SendSignaled },
		"SWQE_HAS_AH":      func(w *ib.SendWR) { w.AH = &ib.AH{} },
		"SWQE_IMM":         func(w *ib.SendWR) { w.Imm = 1 },
		"SWQE_INV_RKEY":    func(w *ib.SendWR) { w.InvRKey = 1 },
		"SWQE_REMOTE_ADDR": func(w *ib.SendWR) { w.RemoteAddr = 1 },
		"SWQE_RKEY":        func(w *ib.SendWR) { w.RKey = 1 },
		"SWQE_REMOTE_QPN":  func(w *ib.SendWR) { w.RemoteQPN = 1 },
		"SWQE_REMOTE_QKEY": func(w *ib.SendWR) { w.RemoteQKey = 1 },
		"SWQE_REMOTE_SRQN": func(w *ib.SendWR) { w.RemoteSRQN = 1 },
		"SWQE_COMPARE_ADD": func(w *ib.SendWR) { w.CompareAdd = 1 },
		"SWQE_SWAP":        func(w *ib.SendWR) { w.Swap = 1 },
	} {
		wr := base
		set(&wr)
		m[name] = diff(name, baseSlot, send(wr))
	}
	sgeAt := func(name string, sge ib.SGE) int64 {
		wr := base
		wr.SGL = []ib.SGE{sge}
		return diff(name, baseSlot, send(wr)) - sendFixed
	}
	m["SGE_ADDR"] = sgeAt("SGE_ADDR", ib.SGE{Addr: 1})
	m["SGE_LENGTH"] = sgeAt("SGE_LENGTH", ib.SGE{Length: 1})
	m["SGE_LKEY"] = sgeAt("SGE_LKEY", ib.SGE{LKey: 1})
	// The AH's fields, against a WR with a zero AH; the SGE count against
	// a WR with none; the inline length against empty inline data.
	ahBase := ib.SendWR{AH: &ib.AH{}}
	for name, set := range map[string]func(*ib.AH){
		"SWQE_HOP_LIMIT":     func(a *ib.AH) { a.HopLimit = 1 },
		"SWQE_TRAFFIC_CLASS": func(a *ib.AH) { a.TrafficClass = 1 },
		"SWQE_SGID_INDEX":    func(a *ib.AH) { a.SGIDIndex = 1 },
		"SWQE_FLOW_LABEL":    func(a *ib.AH) { a.FlowLabel = 1 },
		"SWQE_DGID":          func(a *ib.AH) { a.DGID[0] = 1 },
	} {
		wr := ahBase
		wr.AH = &ib.AH{}
		set(wr.AH)
		m[name] = diff(name, send(ahBase), send(wr))
	}
	m["SWQE_NUM_SGE"] = diff("SWQE_NUM_SGE", send(ib.SendWR{}), baseSlot)
	inl := ib.SendWR{Flags: ib.SendInline}
	withData := inl
	withData.InlineData = []byte{1}
	m["SWQE_INLINE_LEN"] = diff("SWQE_INLINE_LEN", send(inl), send(withData))

	recv := func(wr ib.RecvWR) []byte {
		slot := make([]byte, RecvSlotBytes(1))
		if err := EncodeRecvWQE(slot, &wr); err != nil {
			t.Fatal(err)
		}
		return slot
	}
	rBase := recv(ib.RecvWR{SGL: []ib.SGE{{}}})
	m["RWQE_WR_ID"] = diff("RWQE_WR_ID", rBase, recv(ib.RecvWR{WRID: ones, SGL: []ib.SGE{{}}}))
	m["RWQE_NUM_SGE"] = diff("RWQE_NUM_SGE", recv(ib.RecvWR{}), rBase)
	m["RECV_FIXED"] = diff("RECV_FIXED", rBase, recv(ib.RecvWR{SGL: []ib.SGE{{Addr: 1}}})) - m["SGE_ADDR"]

	cqe := func(wc ib.WC) []byte {
		slot := make([]byte, CQESlotBytes)
		PutCQE(slot, &wc)
		return slot
	}
	cBase := cqe(ib.WC{})
	for name, wc := range map[string]ib.WC{
		"CQE_WR_ID": {WRID: ones}, "CQE_STATUS": {Status: ib.WCRemOpErr}, "CQE_OPCODE": {Opcode: ib.WCRecv},
		"CQE_WC_FLAGS": {WCFlags: ib.WCFlagGRH}, "CQE_BYTE_LEN": {ByteLen: 1}, "CQE_IMM": {Imm: 1},
		"CQE_QP_NUM": {QPNum: 1}, "CQE_SRC_QP": {SrcQP: 1}, "CQE_PKEY_INDEX": {PKeyIndex: 1},
	} {
		m[name] = diff(name, cBase, cqe(wc))
	}
	return m
}

var (
	cDefine = regexp.MustCompile(`(?m)^#define ([A-Z][A-Z0-9_]*)[ \t]+[0-9(]`)
	cEnum   = regexp.MustCompile(`(?m)^\t([A-Z][A-Z0-9_]*) = `)
)

// abiMismatches compiles a program printing every name of want from the
// header in dir and returns each disagreement: a name the header gives
// another value, and a number the header defines that the Go side lacks.
func abiMismatches(t *testing.T, dir string, want map[string]int64) []string {
	hdr, err := os.ReadFile(filepath.Join(dir, "rnic.h"))
	if err != nil {
		t.Fatal(err)
	}
	var bad []string
	for _, re := range []*regexp.Regexp{cDefine, cEnum} {
		for _, m := range re.FindAllSubmatch(hdr, -1) {
			if _, ok := want[string(m[1])]; !ok {
				bad = append(bad, fmt.Sprintf("%s: in the C header, not in the Go ABI", m[1]))
			}
		}
	}
	names := make([]string, 0, len(want))
	for n := range want {
		names = append(names, n)
	}
	slices.Sort(names)
	var prog strings.Builder
	prog.WriteString("#include <stdio.h>\n#include \"rnic.h\"\nint main(void)\n{\n")
	for _, n := range names {
		fmt.Fprintf(&prog, "\tprintf(\"%s %%lld\\n\", (long long)(%s));\n", n, n)
	}
	prog.WriteString("\treturn 0;\n}\n")
	tmp := t.TempDir()
	src, bin := filepath.Join(tmp, "abi.c"), filepath.Join(tmp, "abi")
	if err := os.WriteFile(src, []byte(prog.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("gcc", "-std=gnu11", "-Wall", "-Werror", "-I", dir, "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v (a name the Go ABI has and the header lacks fails here)\n%s", err, out)
	}
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatalf("%s: %v", bin, err)
	}
	got := map[string]int64{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		v, err := strconv.ParseInt(f[1], 10, 64)
		if len(f) != 2 || err != nil {
			t.Fatalf("program printed %q", line)
		}
		got[f[0]] = v
	}
	for _, n := range names {
		if got[n] != want[n] {
			bad = append(bad, fmt.Sprintf("%s: C header %d, Go %d", n, got[n], want[n]))
		}
	}
	return bad
}

func needGCC(t *testing.T) {
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("no gcc to compile the C header with (.ci/run installs it)")
	}
}

// TestCHeaderABI holds clib's copy of the host interface (rnic.h: request
// kinds, reply codes, CM event codes, ring header words, slot layouts)
// equal to this package's: a C program prints every value the header
// defines, and each must be the Go side's, offsets as the Go codecs write
// them. Without it only the end-to-end tests would notice a drift, and
// only for the fields they happen to use.
func TestCHeaderABI(t *testing.T) {
	needGCC(t)
	want := goABI(t)
	if len(want) < 100 {
		t.Fatalf("the Go ABI lists %d values; the comparison would check little", len(want))
	}
	for _, b := range abiMismatches(t, filepath.Dir(cHeader), want) {
		t.Error(b)
	}
}

// TestCHeaderABIBroken shows TestCHeaderABI fails when the header
// drifts: a copy with a ring offset, a slot offset and a CM event code
// changed and a number the Go side lacks added is caught on each.
func TestCHeaderABIBroken(t *testing.T) {
	needGCC(t)
	hdr, err := os.ReadFile(cHeader)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, r := range [][2]string{
		{"#define RING_CONSUMER 64\n", "#define RING_CONSUMER 60\n"},
		{"#define SWQE_IMM 16 ", "#define SWQE_IMM 20 "},
		{"CM_EV_REJECTED = 3,", "CM_EV_REJECTED = 4,"},
		{"#define CQE_BYTES 32\n", "#define CQE_BYTES 32\n#define CQE_EXTRA 32\n"},
	} {
		if !bytes.Contains(hdr, []byte(r[0])) {
			t.Fatalf("the header has no %q to change", r[0])
		}
		hdr = bytes.Replace(hdr, []byte(r[0]), []byte(r[1]), 1)
	}
	if err := os.WriteFile(filepath.Join(dir, "rnic.h"), hdr, 0o644); err != nil {
		t.Fatal(err)
	}
	bad := abiMismatches(t, dir, goABI(t))
	for _, want := range []string{"RING_CONSUMER: C header 60, Go 64", "SWQE_IMM: C header 20, Go 16",
		"CM_EV_REJECTED: C header 4, Go 3", "CQE_EXTRA: in the C header, not in the Go ABI"} {
		if !slices.Contains(bad, want) {
			t.Errorf("altered header: %q not reported; got %q", want, bad)
		}
	}
	if len(bad) != 4 {
		t.Errorf("altered header: %d mismatches reported, want 4: %q", len(bad), bad)
	}
}

// PutSendCQE writes the same bytes as PutCQE of the send completion with
// the same fields, over a slot that held anything: what a send
// completion lacks (imm, src_qp, pkey_index, pads) is 0.
func TestPutSendCQE(t *testing.T) {
	wc := ib.WC{WRID: 0x0123456789abcdef, Status: ib.WCRemAccessErr, Opcode: ib.WCRDMAWrite, WCFlags: ib.WCFlagWithImm, ByteLen: 4096, QPNum: 0xabcdef}
	want := make([]byte, CQESlotBytes)
	PutCQE(want, &wc)
	got := make([]byte, CQESlotBytes)
	for i := range got {
		got[i] = 0xa5
	}
	PutSendCQE(got, wc.WRID, wc.Status, wc.Opcode, wc.WCFlags, wc.ByteLen, wc.QPNum)
	if !bytes.Equal(got, want) {
		t.Fatalf("PutSendCQE wrote % x\nPutCQE wrote     % x", got, want)
	}
}

// PutRecvCQE writes the same bytes as PutCQE of the receive completion
// with the same fields, over a slot that held anything: pkey_index and
// the pad are 0.
func TestPutRecvCQE(t *testing.T) {
	wc := ib.WC{WRID: 0xfedcba9876543210, Status: ib.WCLocLenErr, Opcode: ib.WCRecvRDMAWithImm,
		WCFlags: ib.WCFlagGRH | ib.WCFlagWithImm, ByteLen: 65536, Imm: 0x11223344, QPNum: 0x123456, SrcQP: 0xfedcba}
	want := make([]byte, CQESlotBytes)
	PutCQE(want, &wc)
	got := make([]byte, CQESlotBytes)
	for i := range got {
		got[i] = 0x5a
	}
	PutRecvCQE(got, wc.WRID, wc.Status, wc.Opcode, wc.WCFlags, wc.ByteLen, wc.Imm, wc.QPNum, wc.SrcQP)
	if !bytes.Equal(got, want) {
		t.Fatalf("PutRecvCQE wrote % x\nPutCQE wrote     % x", got, want)
	}
	var back ib.WC
	GetCQE(got, &back)
	if back != wc {
		t.Fatalf("GetCQE read %+v, want %+v", back, wc)
	}
}
