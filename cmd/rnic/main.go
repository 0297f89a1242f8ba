// Command rnic is the toolbox of rnicd: the tools RDMA users know
// (perftest's ib_*_bw and ib_*_lat, rdma-core's ibv_*_pingpong, ibv_devices,
// ibv_devinfo, rdma res), re-made on the verbs package so they pair with the
// real ones on an rxe host, plus rnicd's own (demo, stat, trace, inject).
//
//	rnic ib_write_bw [flags] [server]
//	rnic ibv_rc_pingpong -g 1 [server]
//	rnic demo
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"sort"

	"github.com/rnicd/rnicd/internal/buildinfo"
	"github.com/rnicd/rnicd/internal/kwait"
)

// command is one subcommand. run gets the arguments after its name and
// returns the process exit status.
type command struct {
	name  string
	short string // one line for the usage text
	run   func(args []string, stdout, stderr io.Writer) int
}

// commands collects the subcommands of every tool family; each family
// lists its own in its file.
func commands() []command {
	var all []command
	all = append(all, perftestCommands()...)
	all = append(all, ibvCommands()...)
	all = append(all, observeCommands()...)
	all = append(all, rpingCommands()...)
	all = append(all, command{name: "version", short: "the version and build (VCS revision, time) of these tools", run: runVersion})
	sort.Slice(all, func(i, j int) bool { return all[i].name < all[j].name })
	return all
}

func main() {
	kwait.AtLeastTwo()
	os.Exit(profiled(os.Getenv("RNIC_CPUPROFILE"), func() int { return run(os.Args[1:], os.Stdout, os.Stderr) }))
}

// profiled runs f under a pprof CPU profile written to path, or as it is
// if path is empty. An environment variable, not a flag: the perftest and
// ibverbs tools keep exactly the flags of the tools they copy, and the
// profile is for BENCHMARKS.md's breakdowns, not for users.
func profiled(path string, f func() int) int {
	if path == "" {
		return f()
	}
	out, err := os.Create(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "rnic: RNIC_CPUPROFILE:", err)
		return 1
	}
	defer out.Close()
	if err := pprof.StartCPUProfile(out); err != nil {
		fmt.Fprintln(os.Stderr, "rnic: RNIC_CPUPROFILE:", err)
		return 1
	}
	defer pprof.StopCPUProfile()
	return f()
}

func run(args []string, stdout, stderr io.Writer) int {
	cmds := commands()
	if len(args) == 0 {
		usage(stderr, cmds)
		return 2
	}
	if args[0] == "-V" || args[0] == "--version" || args[0] == "-version" {
		args = []string{"version"} // as rdma -V
	}
	if args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help" {
		usage(stdout, cmds) // asked for: not an error
		return 0
	}
	for _, c := range cmds {
		if c.name == args[0] {
			return c.run(args[1:], stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "rnic: unknown command %q\n", args[0])
	usage(stderr, cmds)
	return 2
}

func runVersion(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("rnic version", flag.ContinueOnError)
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return parseExit(err)
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(stderr, "rnic version: takes no arguments, got %q\n", fs.Args())
		return 2
	}
	fmt.Fprintln(stdout, "rnic", buildinfo.Read())
	return 0
}

func usage(w io.Writer, cmds []command) {
	fmt.Fprintln(w, "usage: rnic COMMAND [flags] [args]")
	fmt.Fprintln(w, "commands:")
	for _, c := range cmds {
		fmt.Fprintf(w, "  %-18s %s\n", c.name, c.short)
	}
}

// parseAnywhere parses args with fs taking flags before, between and
// after the positional arguments, as getopt permutes them for rdma-core's
// and perftest's tools and as iproute2's rdma takes them (`rnic res show
// cm_id -d rnicA`); a "--" ends the flags. It returns the positional
// arguments in their order.
func parseAnywhere(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for rest := args; ; {
		if err := fs.Parse(rest); err != nil {
			return nil, err
		}
		left := fs.Args()
		if n := len(rest) - len(left); n > 0 && rest[n-1] == "--" {
			return append(pos, left...), nil
		}
		if len(left) == 0 {
			return pos, nil
		}
		pos = append(pos, left[0])
		rest = left[1:]
	}
}

// parseExit is the exit status of a tool whose flags did not parse: 0
// for -h (help was asked for and printed), 2 for a usage error, as Go's
// flag package exits.
func parseExit(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	return 2
}
