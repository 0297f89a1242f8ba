package main

import (
	"io"

	"github.com/rnicd/rnicd/cmd/rnic/perftest"
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
				return perftest.Main(tool, args, perftest.Config{Stdout: stdout, Stderr: stderr, Open: openPerftestDevice})
			},
		})
	}
	return cmds
}

// openPerftestDevice opens the device a perftest tool runs on, as every
// tool of rnic does: --local's in-process NIC, -d's rnicd, or the first
// rnicd running.
func openPerftestDevice(p *perftest.Params) (*verbs.Context, error) {
	return openDevice(p.Device, p.Local, p.Direct)
}
