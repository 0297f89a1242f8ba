package main

import (
	"errors"
	"fmt"
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

// openPerftestDevice opens the device a perftest tool runs on: an
// in-process NIC with --local, else the rnicd device by name.
func openPerftestDevice(p *perftest.Params) (*verbs.Context, error) {
	if p.Local.IsValid() {
		c, err := verbs.OpenLocal(verbs.LocalConfig{Name: p.Device, Addr: p.Local})
		if err != nil {
			return nil, fmt.Errorf("open in-process NIC on %v: %w", p.Local, err)
		}
		return c, nil
	}
	return nil, errors.New("reaching a running rnicd is not built yet (verbs.Open); use --local ADDR for an in-process NIC")
}
