package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"sort"
	"strconv"
	"strings"

	"github.com/rnicd/rnicd/verbs"
	"github.com/rnicd/rnicd/wire/mad"
)

// ibvCommands are rdma-core's ibv_* tools, rdma res and the demo.
func ibvCommands() []command {
	return []command{
		{"ibv_rc_pingpong", "RC SEND ping-pong, pairs with rdma-core's ibv_rc_pingpong", pingpongCommand(ppRC)},
		{"ibv_uc_pingpong", "UC SEND ping-pong, pairs with rdma-core's ibv_uc_pingpong", pingpongCommand(ppUC)},
		{"ibv_ud_pingpong", "UD SEND ping-pong, pairs with rdma-core's ibv_ud_pingpong", pingpongCommand(ppUD)},
		{"ibv_srq_pingpong", "RC ping-pong on several QPs sharing an SRQ (ibv_srq_pingpong)", pingpongCommand(ppSRQ)},
		{"ibv_devices", "list the devices and their node GUIDs", runDevices},
		{"ibv_devinfo", "print a device's attributes and its port (-v: limits, GID table)", runDevinfo},
		{"ibv_asyncwatch", "print the device's asynchronous events as they come (rdma-core's ibv_asyncwatch)", runAsyncWatch},
		{"show_gids", "the port's GID table, one line per GID with its index (the -x/-g to give)", runShowGIDs},
		{"res", "the device's QPs (res show qp) or CM IDs (res show cm_id) as `rdma res` prints them", runRes},
		{"demo", "two in-process NICs: WRITE, READ, SEND, FETCH_AND_ADD, and what each block did", runDemo},
	}
}

// devFlags are how every tool of this family finds its NIC: -d names an
// rnicd device, --local starts one inside the tool instead.
type devFlags struct {
	name   string
	local  string
	daemon bool // --daemon: accepted, and ignored, for old scripts
}

// register adds --local to fs; -d is added by each tool because its help
// text and long name differ between rdma-core's tools.
func (d *devFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&d.local, "local", "", "run an in-process NIC on this IP address instead of using rnicd")
	fs.BoolVar(&d.daemon, "daemon", false, "ignored: the QPs always run in rnicd (accepted for old scripts)")
}

// open returns the one device a tool runs on.
func (d *devFlags) open() (*verbs.Context, error) {
	local, err := d.localAddr()
	if err != nil {
		return nil, err
	}
	return openDevice(d.name, local)
}

func (d *devFlags) localAddr() (netip.Addr, error) {
	if d.local == "" {
		return netip.Addr{}, nil
	}
	a, err := netip.ParseAddr(d.local)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("--local %q: %w", d.local, err)
	}
	return a, nil
}

// openDevice opens the NIC a tool runs on: with local, an in-process NIC
// on that address; else the rnicd serving name; else the first rnicd
// running, as rdma-core's tools take the first device of
// ibv_get_device_list.
func openDevice(name string, local netip.Addr) (*verbs.Context, error) {
	if local.IsValid() {
		c, err := verbs.OpenLocal(verbs.LocalConfig{Name: name, Addr: local})
		if err != nil {
			return nil, fmt.Errorf("open in-process NIC on %v: %w", local, err)
		}
		return c, nil
	}
	if name == "" {
		names, err := daemonNames()
		if err != nil {
			return nil, err
		}
		name = names[0]
	} else if err := deviceExists(name); err != nil {
		return nil, err
	}
	// With no daemon, the error says how to start one.
	return verbs.Open(name)
}

// daemonNames lists the running rnicd devices, or says how to start one.
func daemonNames() ([]string, error) {
	names, err := verbs.Devices()
	if err != nil {
		return nil, err
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("no rnicd running: start one with `rnicd -d rnic0` (no control socket in %s; $RNICD_DIR sets the directory)", verbs.SocketDir())
	}
	return names, nil
}

// deviceExists says, in rdma-core's words, that no rnicd serves name in
// this network namespace, and which ones do.
func deviceExists(name string) error {
	names, err := verbs.Devices()
	if err != nil {
		return err
	}
	for _, n := range names {
		if n == name {
			return nil
		}
	}
	if len(names) == 0 {
		return fmt.Errorf("IB device '%s' wasn't found: no rnicd runs; start one with `rnicd -d %s` (no control socket in %s; $RNICD_DIR sets the directory)", name, name, verbs.SocketDir())
	}
	return fmt.Errorf("IB device '%s' wasn't found; the devices are %s", name, strings.Join(names, ", "))
}

// deviceList opens the devices a listing tool shows: --local's, -d's, or
// every running rnicd (ibv_get_device_list).
func (d *devFlags) deviceList() ([]*verbs.Context, error) {
	local, err := d.localAddr()
	if err != nil {
		return nil, err
	}
	names := []string{d.name}
	if !local.IsValid() && d.name == "" {
		if names, err = daemonNames(); err != nil {
			return nil, err
		}
	}
	var ctxs []*verbs.Context
	for _, n := range names {
		c, err := openDevice(n, local)
		if err != nil {
			ibvCloseAll(ctxs)
			return nil, err
		}
		ctxs = append(ctxs, c)
	}
	return ctxs, nil
}

// runDevices is ibv_devices: one line per device with its node GUID.
func runDevices(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("ibv_devices", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var dev devFlags
	dev.register(fs)
	if pos, err := parseAnywhere(fs, args); err != nil || len(pos) != 0 {
		if err == nil {
			fmt.Fprintf(stderr, "ibv_devices: unexpected arguments %q\n", pos)
		}
		return parseExit(err)
	}
	ctxs, err := dev.deviceList()
	if err != nil {
		fmt.Fprintf(stderr, "Failed to get IB devices list: %v\n", err)
		return 1
	}
	defer ibvCloseAll(ctxs)
	fmt.Fprintf(stdout, "    %-16s\t   node GUID\n", "device")
	fmt.Fprintf(stdout, "    %-16s\t----------------\n", "------")
	for _, c := range ctxs {
		a, err := c.QueryDevice()
		if err != nil {
			fmt.Fprintf(stderr, "ibv_devices: %s: %v\n", c.Name(), err)
			return 1
		}
		fmt.Fprintf(stdout, "    %-16s\t%016x\n", c.Name(), a.NodeGUID)
	}
	return 0
}

func ibvCloseAll(ctxs []*verbs.Context) {
	for _, c := range ctxs {
		c.Close()
	}
}

// runDevinfo is ibv_devinfo: the device's attributes, its one port, and
// with -v the device limits and the port's GID table.
func runDevinfo(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("ibv_devinfo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var dev devFlags
	dev.register(fs)
	var verbose, list bool
	var port int
	for _, n := range []string{"d", "ib-dev"} {
		fs.StringVar(&dev.name, n, "", "use IB device `dev` (default first device found)")
	}
	for _, n := range []string{"i", "ib-port"} {
		fs.IntVar(&port, n, 0, "use `port` of the device (default all ports)")
	}
	for _, n := range []string{"v", "verbose"} {
		fs.BoolVar(&verbose, n, false, "print all the attributes of the device(s)")
	}
	for _, n := range []string{"l", "list"} {
		fs.BoolVar(&list, n, false, "print only the device names")
	}
	pos, err := parseAnywhere(fs, args)
	if err != nil {
		return parseExit(err)
	}
	if len(pos) > 0 || port < 0 {
		fs.Usage()
		return 2
	}
	ctxs, err := dev.deviceList()
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	defer ibvCloseAll(ctxs)
	if list {
		s := "s"
		if len(ctxs) == 1 {
			s = ""
		}
		fmt.Fprintf(stdout, "%d HCA%s found:\n", len(ctxs), s)
		for _, c := range ctxs {
			fmt.Fprintf(stdout, "\t%s\n", c.Name())
		}
		fmt.Fprintln(stdout)
		return 0
	}
	if port > 1 {
		fmt.Fprintln(stderr, "Invalid port requested for device")
		return 4
	}
	for _, c := range ctxs {
		if err := printDevinfo(stdout, c, verbose); err != nil {
			fmt.Fprintf(stderr, "ibv_devinfo: %s: %v\n", c.Name(), err)
			return 1
		}
	}
	return 0
}

// guidString formats a node GUID as ibv_devinfo does: four groups of four
// hex digits.
func guidString(g uint64) string {
	return fmt.Sprintf("%04x:%04x:%04x:%04x", g>>48&0xffff, g>>32&0xffff, g>>16&0xffff, g&0xffff)
}

// mtuEnumString is "1024 (3)": the MTU and its ibv_mtu value.
func mtuEnumString(m verbs.MTU) string {
	if m.Bytes() == 0 {
		return fmt.Sprintf("invalid MTU (%d)", uint8(m))
	}
	return fmt.Sprintf("%d (%d)", m.Bytes(), uint8(m))
}

// printDevinfo prints one device in ibv_devinfo's layout. The values that
// rnicd has no notion of (end-to-end contexts, multicast, memory windows,
// raw QPs) are 0, as on a device without the feature; the port's fixed
// values (LIDs, LMC, port_cap_flags, pkey table) are rxe's.
func printDevinfo(w io.Writer, c *verbs.Context, verbose bool) error {
	a, err := c.QueryDevice()
	if err != nil {
		return err
	}
	p, err := c.QueryPort()
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "hca_id:\t%s\n", c.Name())
	// RoCE devices report the InfiniBand transport (IBV_TRANSPORT_IB = 0).
	fmt.Fprintf(w, "\ttransport:\t\t\tInfiniBand (0)\n")
	if a.FWVer != "" {
		fmt.Fprintf(w, "\tfw_ver:\t\t\t\t%s\n", a.FWVer)
	}
	fmt.Fprintf(w, "\tnode_guid:\t\t\t%s\n", guidString(a.NodeGUID))
	fmt.Fprintf(w, "\tsys_image_guid:\t\t\t%s\n", guidString(a.NodeGUID))
	fmt.Fprintf(w, "\tvendor_id:\t\t\t0x%04x\n", 0xffffff) // rxe's RXE_VENDOR_ID: no vendor
	fmt.Fprintf(w, "\tvendor_part_id:\t\t\t%d\n", 0)
	fmt.Fprintf(w, "\thw_ver:\t\t\t\t0x%X\n", 0)
	fmt.Fprintf(w, "\tphys_port_cnt:\t\t\t%d\n", 1)
	if verbose {
		rows := []struct {
			name string
			v    any
		}{
			{"max_mr_size:\t\t\t", fmt.Sprintf("0x%x", a.MaxMRSize)},
			{"page_size_cap:\t\t\t", "0xfffff000"},
			{"max_qp:\t\t\t\t", a.MaxQP},
			{"max_qp_wr:\t\t\t", a.MaxQPWR},
			// MEM_WINDOW, IBV_DEVICE_XRC and MEM_WINDOW_TYPE_2B, each
			// name on a line of its own as ibv_devinfo prints them: windows
			// and XRC are the C library's (clib/src/mw.c, xrc.c).
			{"device_cap_flags:\t\t", "0x01120000\n\t\t\t\t\tMEM_WINDOW\n\t\t\t\t\tXRC\n\t\t\t\t\tMEM_WINDOW_TYPE_2B"},
			{"max_sge:\t\t\t", a.MaxSGE},
			{"max_sge_rd:\t\t\t", a.MaxSGE},
			{"max_cq:\t\t\t\t", a.MaxCQ},
			{"max_cqe:\t\t\t", a.MaxCQE},
			{"max_mr:\t\t\t\t", a.MaxMR},
			{"max_pd:\t\t\t\t", a.MaxPD},
			{"max_qp_rd_atom:\t\t\t", a.MaxQPRdAtom},
			{"max_ee_rd_atom:\t\t\t", 0},
			{"max_res_rd_atom:\t\t", a.MaxQPRdAtom * a.MaxQP},
			{"max_qp_init_rd_atom:\t\t", a.MaxQPInitRdAtom},
			{"max_ee_init_rd_atom:\t\t", 0},
			{"atomic_cap:\t\t\t", atomicCapString(a.AtomicCap)},
			{"max_ee:\t\t\t\t", 0},
			{"max_rdd:\t\t\t", 0},
			{"max_mw:\t\t\t\t", a.MaxMW},
			{"max_raw_ipv6_qp:\t\t", 0},
			{"max_raw_ethy_qp:\t\t", 0},
			{"max_mcast_grp:\t\t\t", a.MaxMcastGrp},
			{"max_mcast_qp_attach:\t\t", a.MaxMcastQPAttach},
			{"max_total_mcast_qp_attach:\t", a.MaxTotalMcastQPAttach},
			{"max_ah:\t\t\t\t", a.MaxQP},
			{"max_fmr:\t\t\t", 0},
			{"max_srq:\t\t\t", a.MaxSRQ},
			{"max_srq_wr:\t\t\t", a.MaxSRQWR},
			{"max_srq_sge:\t\t\t", a.MaxSGE},
			{"max_pkeys:\t\t\t", 1},
			{"local_ca_ack_delay:\t\t", 15},
		}
		for _, r := range rows {
			fmt.Fprintf(w, "\t%s%v\n", r.name, r.v)
		}
	}
	fmt.Fprintf(w, "\t\tport:\t%d\n", 1)
	state := p.State
	switch state {
	case "PORT_ACTIVE":
		state += " (4)"
	case "PORT_DOWN":
		state += " (1)"
	}
	fmt.Fprintf(w, "\t\t\tstate:\t\t\t%s\n", state)
	fmt.Fprintf(w, "\t\t\tmax_mtu:\t\t%s\n", mtuEnumString(p.MaxMTU))
	fmt.Fprintf(w, "\t\t\tactive_mtu:\t\t%s\n", mtuEnumString(p.ActiveMTU))
	fmt.Fprintf(w, "\t\t\tsm_lid:\t\t\t0\n")
	fmt.Fprintf(w, "\t\t\tport_lid:\t\t0\n")
	fmt.Fprintf(w, "\t\t\tport_lmc:\t\t0x00\n")
	fmt.Fprintf(w, "\t\t\tlink_layer:\t\t%s\n", p.LinkLayer)
	if verbose {
		fmt.Fprintf(w, "\t\t\tmax_msg_sz:\t\t0x%x\n", 1<<31)
		fmt.Fprintf(w, "\t\t\tport_cap_flags:\t\t0x%08x\n", 0x00010000) // IB_PORT_CM_SUP, as rxe
		fmt.Fprintf(w, "\t\t\tport_cap_flags2:\t0x%04x\n", 0)
		fmt.Fprintf(w, "\t\t\tmax_vl_num:\t\t1 (1)\n")
		fmt.Fprintf(w, "\t\t\tbad_pkey_cntr:\t\t0x0\n")
		fmt.Fprintf(w, "\t\t\tqkey_viol_cntr:\t\t0x0\n")
		fmt.Fprintf(w, "\t\t\tsm_sl:\t\t\t0\n")
		fmt.Fprintf(w, "\t\t\tpkey_tbl_len:\t\t1\n")
		fmt.Fprintf(w, "\t\t\tgid_tbl_len:\t\t%d\n", len(p.GIDs))
		fmt.Fprintf(w, "\t\t\tsubnet_timeout:\t\t0\n")
		fmt.Fprintf(w, "\t\t\tinit_type_reply:\t0\n")
		fmt.Fprintf(w, "\t\t\tactive_width:\t\t4X (2)\n")
		fmt.Fprintf(w, "\t\t\tactive_speed:\t\t10.0 Gbps (8)\n")
		// As Debian's ibv_devinfo prints it from the port's attributes
		// (clib answers phys_state 5 for a running daemon, 3 while
		// its link is down, as rxe). The congestion control the
		// daemon runs is no libibverbs attribute: rnic stat says it
		// ("cc rnicA dcqcn ...").
		phys := "LINK_UP (5)"
		if p.State == "PORT_DOWN" {
			phys = "DISABLED (3)"
		}
		fmt.Fprintf(w, "\t\t\tphys_state:\t\t%s\n", phys)
		for i, g := range p.GIDs {
			if g.IsZero() {
				continue
			}
			// RoCE v2 GIDs are printed as IPv6 text (inet_ntop).
			fmt.Fprintf(w, "\t\t\tGID[%3d]:\t\t%s, RoCE v2\n", i, gidText(g))
		}
	}
	fmt.Fprintln(w)
	return nil
}

func atomicCapString(s string) string {
	switch s {
	case "ATOMIC_NONE":
		return s + " (0)"
	case "ATOMIC_HCA":
		return s + " (1)"
	case "ATOMIC_GLOB":
		return s + " (2)"
	}
	return "invalid atomic capability"
}

// gidText is a GID as inet_ntop prints it: ::ffff:198.18.0.2, fe80::1, ::.
func gidText(g verbs.GID) string { return netip.AddrFrom16(g).String() }

// runRes is `rdma res show qp`: one line per QP of the device (-d), or of
// every running rnicd as rdma shows every device's. -v adds
// what rnicd knows beyond rdma's fields: the peer, the path MTU and the
// ring depths; -j prints rdma -j's JSON.
func runRes(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("res", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: rnic res [show qp|cm_id] [-d NAME] [-v] [-j]")
		fs.PrintDefaults()
	}
	// No data-path flags: a listing asks the daemon, whose table holds
	// every QP.
	var dev devFlags
	var verbose, asJSON bool
	fs.StringVar(&dev.name, "d", "", "device `name` (default every rnicd running)")
	fs.BoolVar(&verbose, "v", false, "add the peer's address, the path MTU and the ring depths")
	fs.BoolVar(&asJSON, "j", false, "print JSON, as rdma -j does: one array of objects")
	// `rdma res show qp` and `rdma res` are both accepted, as rdma takes
	// them, with the options anywhere.
	rest, err := parseAnywhere(fs, args)
	if err != nil {
		return parseExit(err)
	}
	if len(rest) > 0 && rest[0] == "show" {
		rest = rest[1:]
	}
	cmIDs := false
	if len(rest) > 0 && (rest[0] == "qp" || rest[0] == "cm_id") {
		cmIDs = rest[0] == "cm_id"
		rest = rest[1:]
	}
	if len(rest) > 0 {
		fmt.Fprintf(stderr, "res: unknown argument %q (only `res [show qp|cm_id]`)\n", rest[0])
		return 2
	}
	ctxs, err := dev.deviceList()
	if err != nil {
		fmt.Fprintf(stderr, "res: %v\n", err)
		return 1
	}
	defer ibvCloseAll(ctxs)
	var rows []map[string]any // -j: every device's, one array
	for i, c := range ctxs {
		if cmIDs {
			ids, err := c.CMIDs()
			if err != nil {
				fmt.Fprintf(stderr, "res: %s: %v\n", c.Name(), err)
				return 1
			}
			if asJSON {
				rows = append(rows, cmIDRows(i, c.Name(), ids)...)
			} else {
				printCMIDs(stdout, c.Name(), ids)
			}
			continue
		}
		qps, err := c.QPs()
		if err != nil {
			fmt.Fprintf(stderr, "res: %s: %v\n", c.Name(), err)
			return 1
		}
		if asJSON {
			rows = append(rows, qpRows(i, c.Name(), qps, verbose)...)
		} else {
			printRes(stdout, c.Name(), qps, verbose)
		}
	}
	if asJSON {
		return printJSON(stdout, stderr, rows)
	}
	return 0
}

// printJSON prints rows as rdma -j does: one array, one line ([] for
// none).
func printJSON(stdout, stderr io.Writer, rows []map[string]any) int {
	if rows == nil {
		rows = []map[string]any{}
	}
	b, err := json.Marshal(rows)
	if err != nil {
		fmt.Fprintln(stderr, "rnic:", err)
		return 1
	}
	fmt.Fprintf(stdout, "%s\n", b)
	return 0
}

// qpRows are qps as rdma -j res show qp prints them (iproute2's
// rdma/res-qp.c names); ifindex is the device's place in the listing.
func qpRows(ifindex int, dev string, qps []verbs.QPInfo, verbose bool) []map[string]any {
	var rows []map[string]any
	for _, q := range qps {
		comm, pid := ownerFields(q.Owner)
		r := map[string]any{"ifindex": ifindex, "ifname": dev, "port": 1, "lqpn": q.QPN,
			"type": q.Type.String(), "state": q.State.String(), "sq-psn": q.SQPSN, "pid": pid, "comm": comm}
		if q.Type == verbs.QPTypeRC || q.Type == verbs.QPTypeUC {
			r["rqpn"], r["rq-psn"], r["path-mig-state"] = q.DestQPN, q.RQPSN, "MIGRATED"
		}
		if verbose {
			if q.Dest.IsValid() {
				r["dest"] = q.Dest.String()
			}
			if q.PathMTU != 0 {
				r["mtu"] = q.PathMTU.Bytes()
			}
			r["sq-depth"], r["rq-depth"] = q.SQDepth, q.RQDepth
		}
		rows = append(rows, r)
	}
	return rows
}

// cmIDRows are ids as rdma -j res show cm_id prints them.
func cmIDRows(ifindex int, dev string, ids []verbs.CMIDInfo) []map[string]any {
	var rows []map[string]any
	for _, id := range ids {
		r := map[string]any{"ifindex": ifindex, "ifname": dev, "port": 1, "state": id.State,
			"ps": psName(mad.PortSpace(id.PS)), "pid": id.PID, "comm": id.Comm, "cm-idn": id.IDN}
		if id.QPN != 0 {
			typ := "RC"
			if mad.PortSpace(id.PS) == mad.PSUDP {
				typ = "UD"
			}
			r["lqpn"], r["qp-type"] = id.QPN, typ
		}
		if id.Src.IsValid() {
			r["src-addr"], r["src-port"] = id.Src.Addr().String(), id.Src.Port()
		}
		if id.Dst.IsValid() {
			r["dst-addr"], r["dst-port"] = id.Dst.Addr().String(), id.Dst.Port()
		}
		rows = append(rows, r)
	}
	return rows
}

// printCMIDs prints ids in rdma res show cm_id's order of fields (as
// iproute2's rdma/res-cmid.c prints them): lqpn and qp-type only with a
// QP bound, an address only if the daemon knows it.
func printCMIDs(w io.Writer, dev string, ids []verbs.CMIDInfo) {
	for _, id := range ids {
		fmt.Fprintf(w, "link %s/1 ", dev)
		if id.QPN != 0 {
			typ := "RC"
			if mad.PortSpace(id.PS) == mad.PSUDP {
				typ = "UD"
			}
			fmt.Fprintf(w, "lqpn %d qp-type %s ", id.QPN, typ)
		}
		fmt.Fprintf(w, "state %s ps %s pid %d comm %s cm-idn %d", id.State, psName(mad.PortSpace(id.PS)), id.PID, id.Comm, id.IDN)
		if id.Src.IsValid() {
			fmt.Fprintf(w, " src-addr %s:%d", id.Src.Addr(), id.Src.Port())
		}
		if id.Dst.IsValid() {
			fmt.Fprintf(w, " dst-addr %s:%d", id.Dst.Addr(), id.Dst.Port())
		}
		fmt.Fprintln(w)
	}
}

// psName is a port space as rdma res names it.
func psName(ps mad.PortSpace) string {
	switch ps {
	case mad.PSIPoIB, mad.PSIB:
		return "IPoIB" // rdma prints both so
	case mad.PSTCP:
		return "TCP"
	case mad.PSUDP:
		return "UDP"
	}
	return "---"
}

// printRes prints qps in rdma res show qp's order of fields. rqpn, rq-psn
// and path-mig-state exist only for connected QPs, as the kernel reports
// them.
func printRes(w io.Writer, dev string, qps []verbs.QPInfo, verbose bool) {
	for _, q := range qps {
		fmt.Fprintf(w, "link %s/1 lqpn %d ", dev, q.QPN)
		connected := q.Type == verbs.QPTypeRC || q.Type == verbs.QPTypeUC
		if connected {
			fmt.Fprintf(w, "rqpn %d ", q.DestQPN)
		}
		fmt.Fprintf(w, "type %s state %s ", q.Type, q.State)
		if connected {
			fmt.Fprintf(w, "rq-psn %d ", q.RQPSN)
		}
		fmt.Fprintf(w, "sq-psn %d ", q.SQPSN)
		if connected {
			fmt.Fprintf(w, "path-mig-state MIGRATED ")
		}
		comm, pid := ownerFields(q.Owner)
		fmt.Fprintf(w, "pid %d comm %s", pid, comm)
		if verbose {
			if q.Dest.IsValid() {
				fmt.Fprintf(w, " dest %s", q.Dest)
			}
			if q.PathMTU != 0 {
				fmt.Fprintf(w, " mtu %d", q.PathMTU.Bytes())
			}
			fmt.Fprintf(w, " sq-depth %d rq-depth %d", q.SQDepth, q.RQDepth)
		}
		fmt.Fprintln(w)
		if verbose && len(q.Counters) > 0 {
			fmt.Fprintf(w, "    counters:")
			for _, k := range ibvSortedKeys(q.Counters) {
				fmt.Fprintf(w, " %s %d", k, q.Counters[k])
			}
			fmt.Fprintln(w)
		}
	}
}

// ownerFields splits a QP owner ("ibv_rc_pingpong[1234]", "ib_write_bw
// 1234", or a bare name) into rdma's comm and pid; pid 0 when none is
// given.
func ownerFields(owner string) (comm string, pid int) {
	s := strings.TrimSpace(owner)
	if s == "" {
		return "-", 0
	}
	if i := strings.LastIndexByte(s, '['); i > 0 && strings.HasSuffix(s, "]") {
		if n, err := strconv.Atoi(s[i+1 : len(s)-1]); err == nil {
			return s[:i], n
		}
	}
	if i := strings.LastIndexByte(s, ' '); i > 0 {
		if n, err := strconv.Atoi(s[i+1:]); err == nil {
			return strings.TrimSpace(s[:i]), n
		}
	}
	return s, 0
}

func ibvSortedKeys(m map[string]uint64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
