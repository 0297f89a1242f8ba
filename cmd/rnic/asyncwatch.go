package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/rnicd/rnicd/verbs"
)

// runAsyncWatch is rdma-core's ibv_asyncwatch: it opens the device's
// asynchronous event queue and prints each event as that tool does, the
// event's name for the unaffiliated ones (port, device) and
// "unexpected" for the rest, with the port number, until the device is
// gone (DEVICE_FATAL, printed, then status 1, as ibv_asyncwatch's next
// ibv_get_async_event fails).
func runAsyncWatch(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("ibv_asyncwatch", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var dev devFlags
	dev.register(fs)
	for _, n := range []string{"d", "ib-dev"} {
		fs.StringVar(&dev.name, n, "", "use IB device `dev` (default first device found)")
	}
	pos, err := parseAnywhere(fs, args)
	if err != nil {
		return parseExit(err)
	}
	if len(pos) > 0 {
		fs.Usage()
		return 2
	}
	c, err := dev.open()
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	defer c.Close()
	ev, err := c.OpenAsyncEvents()
	if err != nil {
		fmt.Fprintf(stderr, "Couldn't get context for %s: %v\n", c.Name(), err)
		return 1
	}
	defer ev.Close()
	fmt.Fprintf(stdout, "%s: async event FD %d\n", c.Name(), ev.FD())
	for {
		e, err := ev.Get(context.Background())
		if errors.Is(err, verbs.ErrDeviceFatal) {
			fmt.Fprintf(stdout, "  event_type IBV_EVENT_DEVICE_FATAL (8), port 0\n")
			return 1
		}
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		fmt.Fprintf(stdout, "  event_type %s (%d), port %d\n", asyncEventName(e.Type), uint8(e.Type), e.Port)
	}
}

// asyncEventName is ibv_asyncwatch's name of an event: its own for the
// port and device events, "unexpected" for those of QPs, CQs and SRQs.
func asyncEventName(t verbs.EventType) string {
	switch t {
	case verbs.EventPortActive, verbs.EventPortErr:
		return "IBV_EVENT_" + t.String()
	}
	return "unexpected"
}
