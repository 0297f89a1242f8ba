package main

import (
	"io"
	"os"
	"runtime"

	"github.com/rnicd/rnicd/cmd/rnic/perftest"
	"github.com/rnicd/rnicd/internal/buildinfo"
	"github.com/rnicd/rnicd/verbs"
)

// perftestCommands are perftest's ib_*_bw and ib_*_lat.
func perftestCommands() []command {
	var cmds []command
	for _, tool := range perftest.Tools {
		cmds = append(cmds, command{
			name:  tool.Name,
			short: "perftest's " + tool.Name + ", pairs with the real one",
			run: func(args []string, stdout, stderr io.Writer) int {
				return perftest.Main(tool, args, perftest.Config{Stdout: stdout, Stderr: stderr, Open: openPerftestDevice,
					Version: "rnic " + buildinfo.Read().String()})
			},
		})
	}
	return cmds
}

// openPerftestDevice opens the device a perftest tool runs on, as every
// tool of rnic does: --local's in-process NIC, -d's rnicd, or the first
// rnicd running.
func openPerftestDevice(p *perftest.Params) (*verbs.Context, error) {
	c, err := openDevice(p.Device, p.Local)
	if err == nil && c.Local() {
		oneProc()
	}
	return c, err
}

// oneProc runs the tool on one P, unless GOMAXPROCS says otherwise. With
// the NIC in the tool, the tool's thread runs it: it spins on its CQs and
// each empty poll receives and handles what is there. A second P only
// lets the NIC's own goroutines wake beside it and take a core from it.
// Two tools over veth, --local, alternated: ib_write_bw 64 KiB 4.2 -> 7.8
// Gbit/s, ib_send_bw 5.7 -> 11.0, ib_send_lat p99 139 -> 55 us, medians
// unchanged. (A tool that waits on a daemon keeps kwait.AtLeastTwo's.)
func oneProc() {
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1)
	}
}
