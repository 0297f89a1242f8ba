package packaging

import (
	"bufio"
	"context"
	"debug/elf"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rnicd/rnicd/internal/buildinfo"
	"github.com/rnicd/rnicd/internal/debtest"
)

// The package is built once per test binary, into a directory that
// outlives the tests that share it (removed by TestMain).
var (
	debOnce sync.Once
	debDir  string // the .deb's directory; root/ under it is the package extracted
	debPath string
	debErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if debDir != "" {
		os.RemoveAll(debDir)
	}
	os.Exit(code)
}

// dpkg runs dpkg on the fresh root dir (its own database in
// dir/var/lib/dpkg, which holds nothing else), running the maintainer
// scripts outside a chroot, as dpkg --root cannot without a shell in dir;
// libc6, which dir lacks, is the only dependency forced.
func dpkg(dir string, args ...string) ([]byte, error) {
	return exec.Command("dpkg", append([]string{"--instdir=" + dir, "--admindir=" + filepath.Join(dir, "var/lib/dpkg"),
		"--force-script-chrootless", "--force-depends"}, args...)...).CombinedOutput()
}

// dpkgInstall makes dir a fresh root with an empty dpkg database and
// installs deb there with dpkg -i.
func dpkgInstall(dir, deb string) error {
	for _, d := range []string{"info", "updates", "triggers"} {
		if err := os.MkdirAll(filepath.Join(dir, "var/lib/dpkg", d), 0o755); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "var/lib/dpkg/status"), nil, 0o644); err != nil {
		return err
	}
	if out, err := dpkg(dir, "-i", deb); err != nil {
		return fmt.Errorf("dpkg -i into %s: %v\n%s", dir, err, out)
	}
	return nil
}

// deb builds the package with packaging/deb.sh and installs it with
// dpkg -i into a fresh root, returning the .deb and that root.
func deb(t *testing.T) (string, string) {
	t.Helper()
	debtest.Ensure(t, "dpkg-deb", "dpkg")
	debtest.Ensure(t, "make", "make")
	debtest.Ensure(t, "gcc", "gcc")
	debOnce.Do(func() {
		if debDir, debErr = os.MkdirTemp("", "rnicd-deb-"); debErr != nil {
			return
		}
		out, err := exec.Command("./deb.sh", debDir).CombinedOutput()
		if err != nil {
			debErr = fmt.Errorf("deb.sh: %v\n%s", err, out)
			return
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		debPath = lines[len(lines)-1]
		debErr = dpkgInstall(filepath.Join(debDir, "root"), debPath)
	})
	if debErr != nil {
		t.Fatal(debErr)
	}
	return debPath, filepath.Join(debDir, "root")
}

// TestDebContents checks the package as dpkg sees it: its control fields
// (version from internal/buildinfo, libc6 for clib) and every file with
// its mode and owner, then the binaries themselves.
func TestDebContents(t *testing.T) {
	path, root := deb(t)
	info, err := exec.Command("dpkg-deb", "-f", path).Output()
	if err != nil {
		t.Fatalf("dpkg-deb -f: %v", err)
	}
	fields := map[string]string{}
	for _, l := range strings.Split(string(info), "\n") {
		if k, v, ok := strings.Cut(l, ": "); ok && !strings.HasPrefix(l, " ") {
			fields[k] = v
		}
	}
	arch, err := exec.Command("dpkg", "--print-architecture").Output()
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{"Package": "rnicd", "Version": buildinfo.Version, "Architecture": strings.TrimSpace(string(arch))} {
		if fields[k] != want {
			t.Errorf("control %s = %q, want %q", k, fields[k], want)
		}
	}
	// The Go binaries are static; only clib needs the C library.
	if !regexp.MustCompile(`^libc6 \(>= 2\.[0-9]+\)$`).MatchString(fields["Depends"]) {
		t.Errorf("Depends = %q, want only libc6 (>= 2.N)", fields["Depends"])
	}
	if filepath.Base(path) != fmt.Sprintf("rnicd_%s_%s.deb", buildinfo.Version, fields["Architecture"]) {
		t.Errorf("package file %s", filepath.Base(path))
	}
	if out, err := exec.Command("dpkg-deb", "-I", path).Output(); err != nil || !strings.Contains(string(out), "postinst") {
		t.Errorf("dpkg-deb -I: %v, no postinst in\n%s", err, out)
	}

	list, err := exec.Command("dpkg-deb", "-c", path).Output()
	if err != nil {
		t.Fatalf("dpkg-deb -c: %v", err)
	}
	got := map[string]string{} // file -> "mode owner"
	for _, l := range strings.Split(strings.TrimSpace(string(list)), "\n") {
		f := strings.Fields(l)
		if len(f) < 6 || strings.HasPrefix(f[0], "d") {
			continue
		}
		got[strings.TrimPrefix(f[5], ".")] = f[0] + " " + f[1]
	}
	want := packageFiles
	for f, m := range want {
		if got[f] != m {
			t.Errorf("%s: %q, want %q", f, got[f], m)
		}
	}
	for f := range got {
		if _, ok := want[f]; !ok {
			t.Errorf("unexpected file %s in the package", f)
		}
	}

	for _, b := range []string{"/usr/sbin/rnicd", "/usr/bin/rnic"} {
		e, err := elf.Open(filepath.Join(root, b))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range e.Progs {
			if p.Type == elf.PT_INTERP {
				t.Errorf("%s has an ELF interpreter: not a static (CGO_ENABLED=0) binary", b)
			}
		}
		e.Close()
	}
	for _, lib := range []string{"libibverbs.so.1", "librdmacm.so.1", "libmlx5.so.1", "libefa.so.1"} {
		e, err := elf.Open(filepath.Join(root, "usr/lib/rnicd", lib))
		if err != nil {
			t.Fatal(err)
		}
		soname, err := e.DynString(elf.DT_SONAME)
		e.Close()
		if err != nil || len(soname) != 1 || soname[0] != lib {
			t.Errorf("%s: SONAME %q (%v)", lib, soname, err)
		}
	}
	// The opt-in ld.so configuration names the private directory and
	// nothing else.
	conf, err := os.ReadFile(filepath.Join(root, "usr/share/rnicd/ld.so.conf.d/rnicd.conf"))
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, l := range strings.Split(string(conf), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			dirs = append(dirs, l)
		}
	}
	if len(dirs) != 1 || dirs[0] != "/usr/lib/rnicd" {
		t.Errorf("ld.so configuration lists %q, want /usr/lib/rnicd", dirs)
	}
	if out, err := exec.Command(filepath.Join(root, "usr/sbin/rnicd"), "-version").CombinedOutput(); err != nil || !strings.Contains(string(out), buildinfo.Version) {
		t.Errorf("installed rnicd -version: %v\n%s", err, out)
	}
}

const exe, doc = "-rwxr-xr-x root/root", "-rw-r--r-- root/root"

// packageFiles are the package's files, each with its mode and owner as
// dpkg-deb -c prints them.
var packageFiles = map[string]string{
	"/usr/sbin/rnicd":                              exe,
	"/usr/bin/rnic":                                exe,
	"/usr/lib/rnicd/libibverbs.so.1":               doc,
	"/usr/lib/rnicd/librdmacm.so.1":                doc,
	"/usr/lib/rnicd/libmlx5.so.1":                  doc,
	"/usr/lib/rnicd/libefa.so.1":                   doc,
	"/lib/systemd/system/rnicd@.service":           doc,
	"/usr/share/man/man8/rnicd.8.gz":               doc,
	"/usr/share/man/man8/rnic.8.gz":                doc,
	"/usr/share/bash-completion/completions/rnicd": doc,
	"/usr/share/bash-completion/completions/rnic":  doc,
	"/usr/share/zsh/vendor-completions/_rnicd":     doc,
	"/usr/share/zsh/vendor-completions/_rnic":      doc,
	"/usr/share/rnicd/ld.so.conf.d/rnicd.conf":     doc,
	"/usr/share/rnicd/rnicd.conf.example":          doc,
	"/usr/share/doc/rnicd/copyright":               doc,
}

// unit is the installed unit's [Service] settings, each key's values in
// order.
func unit(t *testing.T, root string) map[string][]string {
	t.Helper()
	f, err := os.Open(filepath.Join(root, "lib/systemd/system/rnicd@.service"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m := map[string][]string{}
	section := ""
	s := bufio.NewScanner(f)
	for s.Scan() {
		l := strings.TrimSpace(s.Text())
		switch {
		case l == "" || strings.HasPrefix(l, "#"):
		case strings.HasPrefix(l, "["):
			section = l
		case section == "[Service]":
			k, v, ok := strings.Cut(l, "=")
			if !ok {
				t.Fatalf("unit line %q", l)
			}
			m[k] = append(m[k], v)
		}
	}
	return m
}

// envFile reads a systemd EnvironmentFile: KEY=VALUE lines, the value
// optionally in double quotes.
func envFile(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		k, v, _ := strings.Cut(l, "=")
		m[k] = strings.Trim(v, `"`)
	}
	return m
}

// TestUnitStartsInNetns installs the package with dpkg into a fresh root and runs
// its rnicd as rnicd@rnic0.service would: the ExecStart line with %i and
// $RNICD_OPTS from the instance's EnvironmentFile, only the unit's
// CapabilityBoundingSet and NoNewPrivileges (setpriv), and the clean
// environment systemd gives (no RNICD_DIR), in a network namespace made
// here as NetworkNamespacePath= would put it. The daemon must serve under
// the unit's RuntimeDirectory, in the namespace's net-INODE
// subdirectory, and the installed rnic ibv_devinfo, and Debian's
// ibv_devinfo on the installed clib, run in that namespace, must see it.
func TestUnitStartsInNetns(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipped: needs root to make a network namespace; CI runs as root")
	}
	_, root := deb(t)
	ipCmd := debtest.Ensure(t, "ip", "iproute2")
	setpriv := debtest.Ensure(t, "setpriv", "util-linux")
	u := unit(t, root)

	// The instance name is this test's own: rnicd makes
	// /dev/infiniband/rnicd-NAME in the host's /dev, which is shared.
	dev := fmt.Sprintf("rnicpkg%d", os.Getpid())
	spec := func(s string) string { return strings.ReplaceAll(s, "%i", dev) }
	if got := u["RuntimeDirectory"]; len(got) != 1 || got[0] != "rnicd" {
		t.Fatalf("RuntimeDirectory = %q, want rnicd (/run/rnicd, verbs.SocketDir's for root)", got)
	}
	if got := u["RuntimeDirectoryPreserve"]; len(got) != 1 || got[0] != "yes" {
		t.Errorf("RuntimeDirectoryPreserve = %q: stopping one instance would remove the others' sockets", got)
	}
	if len(u["EnvironmentFile"]) != 1 || len(u["ExecStart"]) != 1 || len(u["CapabilityBoundingSet"]) != 1 {
		t.Fatalf("unit: EnvironmentFile %q, ExecStart %q, CapabilityBoundingSet %q", u["EnvironmentFile"], u["ExecStart"], u["CapabilityBoundingSet"])
	}
	if _, ok := u["Environment"]; ok {
		t.Fatalf("unit sets Environment= %q; this test runs the daemon without it", u["Environment"])
	}
	conf := filepath.Join(root, spec(strings.TrimPrefix(u["EnvironmentFile"][0], "-")))
	if err := os.MkdirAll(filepath.Dir(conf), 0o755); err != nil {
		t.Fatal(err)
	}
	// The shipped example, with an address of the namespace's.
	example := envFile(t, filepath.Join(root, "usr/share/rnicd/rnicd.conf.example"))
	if !strings.Contains(example["RNICD_OPTS"], "-addr ") {
		t.Fatalf("example RNICD_OPTS %q has no -addr", example["RNICD_OPTS"])
	}
	addr := fmt.Sprintf("198.18.%d.%d", os.Getpid()>>8&0xff, os.Getpid()&0xff|1)
	opts := regexp.MustCompile(`-addr \S+`).ReplaceAllString(example["RNICD_OPTS"], "-addr "+addr)
	if err := os.WriteFile(conf, []byte(fmt.Sprintf("RNICD_OPTS=%q\n", opts)), 0o644); err != nil {
		t.Fatal(err)
	}
	env := envFile(t, conf)
	var argv []string
	for _, w := range strings.Fields(u["ExecStart"][0]) {
		switch {
		case strings.HasPrefix(w, "$"):
			argv = append(argv, strings.Fields(env[strings.TrimPrefix(w, "$")])...) // systemd splits $VAR on spaces
		default:
			argv = append(argv, spec(w))
		}
	}
	if argv[0] != "/usr/sbin/rnicd" {
		t.Fatalf("ExecStart runs %s, the package installs /usr/sbin/rnicd", argv[0])
	}
	argv[0] = filepath.Join(root, argv[0])
	var caps []string
	for _, c := range strings.Fields(u["CapabilityBoundingSet"][0]) {
		caps = append(caps, "+"+strings.ToLower(strings.TrimPrefix(c, "CAP_")))
	}
	priv := []string{"--bounding-set", "-all," + strings.Join(caps, ",")}
	if nnp := u["NoNewPrivileges"]; len(nnp) == 1 && nnp[0] == "yes" {
		priv = append(priv, "--no-new-privs")
	}

	ns := fmt.Sprintf("rnicd-pkg-%d", os.Getpid())
	if out, err := exec.Command(ipCmd, "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v\n%s", ns, err, out)
	}
	defer exec.Command(ipCmd, "netns", "del", ns).Run()
	var st syscall.Stat_t
	if err := syscall.Stat("/run/netns/"+ns, &st); err != nil {
		t.Fatal(err)
	}
	sockDir := fmt.Sprintf("/run/rnicd/net-%d", st.Ino)
	defer os.RemoveAll(sockDir)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	clean := []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C"} // as systemd's, and no RNICD_DIR
	in := func(env []string, prog string, args ...string) *exec.Cmd {
		c := exec.CommandContext(ctx, ipCmd, append([]string{"netns", "exec", ns, prog}, args...)...)
		c.Env = env
		return c
	}
	for _, args := range [][]string{{"link", "set", "lo", "up"}, {"addr", "add", addr + "/32", "dev", "lo"}} {
		if out, err := in(clean, ipCmd, args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v\n%s", args, err, out)
		}
	}

	// Type=notify: systemd's notification socket, which a service in a
	// network namespace reaches by its path.
	if got := u["Type"]; len(got) != 1 || got[0] != "notify" {
		t.Fatalf("Type = %q, want notify (rnicd sends READY=1)", got)
	}
	notifyPath := filepath.Join(t.TempDir(), "notify")
	notify, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: notifyPath, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer notify.Close()
	d := in(append(clean, "NOTIFY_SOCKET="+notifyPath), setpriv, append(append(priv, "--"), argv...)...)
	var logb strings.Builder
	var logmu sync.Mutex
	stderr, err := d.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		s := bufio.NewScanner(stderr)
		s.Buffer(nil, 1<<20)
		for s.Scan() {
			logmu.Lock()
			logb.WriteString(s.Text() + "\n")
			logmu.Unlock()
			if strings.Contains(s.Text(), `msg="device up"`) {
				ready <- s.Text()
			}
		}
		done <- d.Wait()
	}()
	log := func() string { logmu.Lock(); defer logmu.Unlock(); return logb.String() }
	var up string
	select {
	case up = <-ready:
	case err := <-done:
		t.Fatalf("rnicd %q exited before it was up: %v\n%s", argv, err, log())
	case <-ctx.Done():
		t.Fatalf("rnicd %q not up in time\n%s", argv, log())
	}
	defer func() {
		d.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("rnicd exit on SIGTERM: %v\n%s", err, log())
			}
		case <-time.After(20 * time.Second): // the unit's TimeoutStopSec
			d.Process.Kill()
			t.Errorf("rnicd did not stop on SIGTERM\n%s", log())
		}
		if node := "/dev/infiniband/rnicd-" + dev; !strings.Contains(log(), "no device node") {
			if _, err := os.Lstat(node); err == nil {
				t.Errorf("%s left after rnicd stopped", node)
				os.Remove(node)
			}
		}
	}()
	t.Logf("ran in %s: %s", ns, strings.Join(argv, " "))
	notify.SetReadDeadline(time.Now().Add(30 * time.Second))
	msg := make([]byte, 4096)
	if n, err := notify.Read(msg); err != nil || string(msg[:n]) != "READY=1" {
		t.Errorf("systemd notification after the ready line: %q, %v", msg[:n], err)
	}
	// The unit's capabilities let it make the node UCX looks for, with the
	// socket's mode (0600 here: no -group).
	node := "/dev/infiniband/rnicd-" + dev
	if strings.Contains(log(), "no device node") {
		t.Errorf("rnicd made no device node under the unit's capabilities:\n%s", log())
	} else if fi, err := os.Lstat(node); err != nil || fi.Mode() != os.ModeDevice|os.ModeCharDevice|0o600 {
		t.Errorf("%s: %v, mode %v", node, err, fi.Mode())
	}
	if want := "socket=" + sockDir + "/" + dev + ".sock"; !strings.Contains(up, want) {
		t.Errorf("ready line %q lacks %s (the unit's RuntimeDirectory, the namespace's subdirectory)", up, want)
	}

	out, err := in(clean, filepath.Join(root, "usr/bin/rnic"), "ibv_devinfo").CombinedOutput()
	if err != nil {
		t.Fatalf("installed rnic ibv_devinfo in %s: %v\n%s", ns, err, out)
	}
	for _, want := range []string{"hca_id:\t" + dev + "\n", "state:\t\t\tPORT_ACTIVE (4)", "link_layer:\t\tEthernet"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("rnic ibv_devinfo lacks %q:\n%s", want, out)
		}
	}
	// The bash completion offers the namespace's device after -d.
	bash := debtest.Ensure(t, "bash", "bash")
	script := fmt.Sprintf(`source %q; COMP_WORDS=(rnic ibv_devinfo -d ''); COMP_CWORD=3; _rnic; printf '%%s\n' "${COMPREPLY[@]}"`,
		filepath.Join(root, "usr/share/bash-completion/completions/rnic"))
	out, err = in(append(clean[1:], "PATH="+filepath.Join(root, "usr/bin")+":/usr/bin:/bin"), bash, "--norc", "--noprofile", "-c", script).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != dev {
		t.Errorf("completing rnic ibv_devinfo -d in %s: %v, %q, want %q", ns, err, out, dev)
	}
	// Debian's perftest links libmlx5 and libefa: with the package's
	// directory first it loads (no rdma-core provider asking for a private
	// symbol the package's libibverbs lacks) and gets to its usage.
	perf := debtest.Ensure(t, "ib_write_bw", "perftest")
	out, _ = in(append(clean, "LD_LIBRARY_PATH="+filepath.Join(root, "usr/lib/rnicd")), perf, "-h").CombinedOutput()
	if !strings.HasPrefix(string(out), "Usage:") || strings.Contains(string(out), "symbol lookup error") {
		t.Errorf("Debian's ib_write_bw -h on the installed libraries:\n%s", out)
	}
	// Debian's ibv_devinfo on the package's libibverbs, chosen per program
	// as the ld.so opt-in would choose it for all.
	ibv := debtest.Ensure(t, "ibv_devinfo", "ibverbs-utils")
	out, err = in(append(clean, "LD_LIBRARY_PATH="+filepath.Join(root, "usr/lib/rnicd")), ibv, "-d", dev).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "hca_id:\t"+dev+"\n") || !strings.Contains(string(out), "PORT_ACTIVE") {
		t.Errorf("Debian's ibv_devinfo on the installed clib: %v\n%s", err, out)
	}
}

// TestUnitVerifies runs systemd-analyze verify on an instance of the
// installed unit, with the installed /usr/sbin in place of the host's
// (a private mount namespace) since verify checks that ExecStart's
// program exists.
func TestUnitVerifies(t *testing.T) {
	_, root := deb(t)
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("skipped (only this check): systemd-analyze is not installed here; the package's other tests run without it")
	}
	if os.Geteuid() != 0 {
		t.Skip("skipped: needs root for a mount namespace; CI runs as root")
	}
	dir := t.TempDir()
	b, err := os.ReadFile(filepath.Join(root, "lib/systemd/system/rnicd@.service"))
	if err != nil {
		t.Fatal(err)
	}
	inst := filepath.Join(dir, "rnicd@rnic0.service")
	if err := os.WriteFile(inst, b, 0o644); err != nil {
		t.Fatal(err)
	}
	// --man=no: the man pages are checked by TestManPages, from the package.
	out, err := exec.Command("unshare", "-m", "sh", "-c", `mount --bind "$1/usr/sbin" /usr/sbin && exec "$2" verify --man=no "$3"`,
		"-", root, sa, inst).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) != 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// flagsOf lists the flags a program's -h prints, in both the Go flag
// package's form ("  -d name") and perftest's ("  -d, --ib-dev=<dev>").
func flagsOf(t *testing.T, argv ...string) []string {
	t.Helper()
	out, _ := exec.Command(argv[0], argv[1:]...).CombinedOutput() // -h exits 0 or 2
	var flags []string
	for _, m := range regexp.MustCompile(`(?m)^ +(-[A-Za-z0-9_-]+)(?:, (--[A-Za-z0-9_-]+))?`).FindAllStringSubmatch(string(out), -1) {
		flags = append(flags, m[1])
		if m[2] != "" {
			flags = append(flags, m[2])
		}
	}
	if len(flags) == 0 {
		t.Fatalf("%q printed no flags:\n%s", argv, out)
	}
	return flags
}

// commandsOf lists the commands rnic's usage names.
func commandsOf(t *testing.T, rnic string) []string {
	t.Helper()
	out, _ := exec.Command(rnic).CombinedOutput()
	var cmds []string
	for _, m := range regexp.MustCompile(`(?m)^  ([a-z][a-z0-9_]*) `).FindAllStringSubmatch(string(out), -1) {
		cmds = append(cmds, m[1])
	}
	if len(cmds) < 10 {
		t.Fatalf("rnic's usage lists %q", cmds)
	}
	return cmds
}

// TestManPages renders the installed pages with man -l, with warnings
// on, and checks that rnicd.8 has every flag of the installed rnicd and
// rnic.8 every command of the installed rnic.
func TestManPages(t *testing.T) {
	_, root := deb(t)
	man := debtest.Ensure(t, "man", "man-db")
	render := func(page string) string {
		cmd := exec.Command(man, "--warnings", "-l", filepath.Join(root, "usr/share/man/man8", page))
		cmd.Env = []string{"PATH=/usr/bin:/bin", "LANG=C", "MANWIDTH=80", "MANPAGER=cat", "PAGER=cat"}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil || stderr.Len() != 0 {
			t.Errorf("man -l %s: %v\n%s", page, err, stderr.String())
		}
		return string(out)
	}
	rnicd := render("rnicd.8.gz")
	if !strings.HasPrefix(rnicd, "RNICD(8)") || !strings.Contains(rnicd, "rnicd - software RoCEv2 RDMA NIC daemon") {
		t.Errorf("rnicd.8 renders as:\n%.400s", rnicd)
	}
	flags := map[string]bool{}
	for _, f := range flagsOf(t, filepath.Join(root, "usr/sbin/rnicd"), "-h") {
		flags[f] = true
		if !regexp.MustCompile(`(?m)^ +` + regexp.QuoteMeta(f) + `( |$)`).MatchString(rnicd) {
			t.Errorf("rnicd.8 has no entry for %s", f)
		}
	}
	// ...and no entry for a flag rnicd no longer has.
	src, err := os.ReadFile("man/rnicd.8")
	if err != nil {
		t.Fatal(err)
	}
	entries := regexp.MustCompile(`(?m)^\.TP\n\.BI? (\\-[a-z0-9\\-]+)`).FindAllStringSubmatch(string(src), -1)
	if len(entries) != len(flags) {
		t.Errorf("rnicd.8 has %d flag entries, rnicd -h lists %d flags", len(entries), len(flags))
	}
	for _, m := range entries {
		if f := strings.ReplaceAll(m[1], `\-`, "-"); !flags[f] {
			t.Errorf("rnicd.8 describes %s, which rnicd -h does not list", f)
		}
	}
	if !strings.Contains(rnicd, "rnicd "+buildinfo.Version) {
		t.Errorf("rnicd.8 does not name version %s in its footer", buildinfo.Version)
	}
	rnic := render("rnic.8.gz")
	if !strings.Contains(rnic, "rnicd "+buildinfo.Version) {
		t.Errorf("rnic.8 does not name version %s in its footer", buildinfo.Version)
	}
	for _, c := range commandsOf(t, filepath.Join(root, "usr/bin/rnic")) {
		if !regexp.MustCompile(`(?m)^ +` + c + `( |$)`).MatchString(rnic) {
			t.Errorf("rnic.8 has no entry for the command %s", c)
		}
	}
}

// TestBashCompletion sources the installed bash completion and completes
// as bash would (COMP_WORDS, COMP_CWORD), with the installed binaries on
// PATH: the commands, a perftest long flag, a Go flag, rnicd's flags and
// an option's values. The zsh files are parsed by zsh -n.
func TestBashCompletion(t *testing.T) {
	_, root := deb(t)
	bash := debtest.Ensure(t, "bash", "bash")
	comp := filepath.Join(root, "usr/share/bash-completion/completions")
	complete := func(file, fn string, words ...string) []string {
		script := fmt.Sprintf(`source %q; COMP_WORDS=(%s); COMP_CWORD=%d; %s; printf '%%s\n' "${COMPREPLY[@]}"`,
			filepath.Join(comp, file), strings.Join(words, " "), len(words)-1, fn)
		cmd := exec.Command(bash, "--norc", "--noprofile", "-c", script)
		cmd.Env = []string{"PATH=" + filepath.Join(root, "usr/sbin") + ":" + filepath.Join(root, "usr/bin") + ":/usr/bin:/bin"}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("completing %q: %v\n%s", words, err, out)
		}
		got := strings.Fields(string(out))
		sort.Strings(got)
		return got
	}
	for _, c := range []struct {
		file, fn string
		words    []string
		want     string
	}{
		{"rnic", "_rnic", []string{"rnic", "ib_write_"}, "ib_write_bw ib_write_lat"},
		{"rnic", "_rnic", []string{"rnic", "ib_write_bw", "--dur"}, "--duration"},
		{"rnic", "_rnic", []string{"rnic", "ib_write_bw", "--r"}, "--rdma_cm --report-unsorted --report_gbits --run_infinitely --rx-depth"},
		{"rnic", "_rnic", []string{"rnic", "ib_write_bw", "--o"}, "--output --outs"},
		{"rnic", "_rnic", []string{"rnic", "res", "-"}, "-d -j -v"},
		{"rnic", "_rnic", []string{"rnic", "res", "sh"}, "show"},
		{"rnicd", "_rnicd", []string{"rnicd", "-log-"}, "-log-format -log-level"},
		{"rnicd", "_rnicd", []string{"rnicd", "-mode", ""}, "packet udp"},
		{"rnicd", "_rnicd", []string{"rnicd", "-pcap-format", ""}, "pcap pcapng"},
	} {
		if got := strings.Join(complete(c.file, c.fn, c.words...), " "); got != c.want {
			t.Errorf("completing %q: %q, want %q", c.words, got, c.want)
		}
	}
	// Every command rnic lists completes.
	cmds := commandsOf(t, filepath.Join(root, "usr/bin/rnic"))
	sort.Strings(cmds)
	if got := complete("rnic", "_rnic", "rnic", "''"); strings.Join(got, " ") != strings.Join(cmds, " ") {
		t.Errorf("rnic's commands complete as %q, want %q", got, cmds)
	}

	zsh := debtest.Ensure(t, "zsh", "zsh")
	for _, f := range []string{"_rnic", "_rnicd"} {
		if out, err := exec.Command(zsh, "-n", filepath.Join(root, "usr/share/zsh/vendor-completions", f)).CombinedOutput(); err != nil {
			t.Errorf("zsh -n %s: %v\n%s", f, err, out)
		}
	}
}

// TestDockerfile parses the container image definition (there is no
// container engine here to build it): it must build both binaries static
// from this module with the Go the module asks for, and install them at
// the package's paths with rnicd as the entry point.
func TestDockerfile(t *testing.T) {
	b, err := os.ReadFile("container/Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	df := string(b)
	mod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	gover := regexp.MustCompile(`(?m)^go (1\.[0-9]+)`).FindStringSubmatch(string(mod))
	if gover == nil {
		t.Fatal("no go line in go.mod")
	}
	if !regexp.MustCompile(`(?m)^FROM golang:` + regexp.QuoteMeta(gover[1]) + `-bookworm AS build$`).MatchString(df) {
		t.Errorf("the build stage is not FROM golang:%s-bookworm AS build", gover[1])
	}
	for _, want := range []string{
		`CGO_ENABLED=0 go build -o /out/rnicd ./cmd/rnicd`,
		`CGO_ENABLED=0 go build -o /out/rnic ./cmd/rnic`,
		"\nCOPY --from=build /out/rnicd /usr/sbin/rnicd\n",
		"\nCOPY --from=build /out/rnic /usr/bin/rnic\n",
		"\nENTRYPOINT [\"/usr/sbin/rnicd\"]\n",
		"\nENV RNICD_DIR=/run/rnicd\n",
	} {
		if !strings.Contains(df, want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
	for _, dir := range []string{"../cmd/rnicd", "../cmd/rnic"} {
		if _, err := os.Stat(filepath.Join(dir, "main.go")); err != nil {
			t.Errorf("the Dockerfile builds %s: %v", dir, err)
		}
	}
}

// TestDebRemoves installs the package with dpkg into a fresh root of its
// own: dpkg records it installed, with exactly the package's files; then
// dpkg --purge (postrm included) leaves none of them behind.
func TestDebRemoves(t *testing.T) {
	path, _ := deb(t)
	dir := t.TempDir()
	if err := dpkgInstall(dir, path); err != nil {
		t.Fatal(err)
	}
	if out, err := dpkg(dir, "-s", "rnicd"); err != nil || !strings.Contains(string(out), "\nStatus: install ok installed\n") {
		t.Fatalf("dpkg -s rnicd: %v\n%s", err, out)
	}
	out, err := dpkg(dir, "-L", "rnicd")
	if err != nil {
		t.Fatalf("dpkg -L: %v\n%s", err, out)
	}
	var files []string
	for _, f := range strings.Fields(string(out)) {
		if fi, err := os.Lstat(filepath.Join(dir, f)); err == nil && fi.Mode().IsRegular() {
			files = append(files, f)
		}
	}
	if len(files) != len(packageFiles) {
		t.Errorf("dpkg -L lists %d files installed, want the package's %d: %q", len(files), len(packageFiles), files)
	}
	if out, err := dpkg(dir, "--purge", "rnicd"); err != nil {
		t.Fatalf("dpkg --purge: %v\n%s", err, out)
	}
	for _, f := range files {
		if _, err := os.Lstat(filepath.Join(dir, f)); err == nil {
			t.Errorf("%s left after dpkg --purge", f)
		}
	}
	if out, _ := dpkg(dir, "-s", "rnicd"); strings.Contains(string(out), "install ok installed") {
		t.Errorf("dpkg still has rnicd installed after --purge:\n%s", out)
	}
}
