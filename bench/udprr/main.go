// Command udprr is the baseline for rnicd's latency figures: a UDP
// request/response ping-pong between two hosts (or namespaces), timing each
// round trip, so that ib_send_lat on the same path has something to be
// compared with. It is netperf's UDP_RR in a few lines of Go.
//
//	udprr -server -addr 198.18.0.1:18600
//	udprr -addr 198.18.0.1:18600 -size 2 -n 100000
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"time"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "udprr:", err)
		os.Exit(1)
	}
}

func run(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("udprr", flag.ContinueOnError)
	server := fs.Bool("server", false, "answer ping-pongs instead of sending them")
	addr := fs.String("addr", "127.0.0.1:18600", "server address (listen address with -server)")
	size := fs.Int("size", 2, "payload bytes")
	n := fs.Int("n", 10000, "round trips to time")
	warm := fs.Int("warmup", 1000, "round trips before timing")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *size < 1 || *size > 65000 {
		return fmt.Errorf("size %d outside 1..65000", *size)
	}
	if *server {
		return serve(*addr, *size)
	}
	rtts, err := pingpong(*addr, *size, *warm, *n)
	if err != nil {
		return err
	}
	slices.Sort(rtts)
	pct := func(p float64) float64 {
		return float64(rtts[int(p*float64(len(rtts)-1))].Nanoseconds()) / 1e3
	}
	// One-way figures, as perftest's ib_*_lat reports half the round trip.
	fmt.Fprintf(out, "#bytes #iterations t_min[usec] t_median[usec] t_p99[usec] (one way, half of the round trip)\n")
	fmt.Fprintf(out, "%d %d %.2f %.2f %.2f\n", *size, len(rtts), pct(0)/2, pct(0.5)/2, pct(0.99)/2)
	return nil
}

func serve(addr string, size int) error {
	c, err := net.ListenPacket("udp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	buf := make([]byte, 65536)
	for {
		k, peer, err := c.ReadFrom(buf)
		if err != nil {
			return err
		}
		if _, err := c.WriteTo(buf[:k], peer); err != nil {
			return err
		}
	}
}

func pingpong(addr string, size, warm, n int) ([]time.Duration, error) {
	c, err := net.Dial("udp", addr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	msg, buf := make([]byte, size), make([]byte, 65536)
	rtts := make([]time.Duration, 0, n)
	for i := 0; i < warm+n; i++ {
		msg[0] = byte(i)
		start := time.Now()
		if _, err := c.Write(msg); err != nil {
			return nil, err
		}
		for {
			// A lost datagram would stall the run forever; a second is
			// far beyond any round trip on one machine.
			c.SetReadDeadline(time.Now().Add(time.Second))
			k, err := c.Read(buf)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return nil, fmt.Errorf("round trip %d: no answer in 1s", i)
			}
			if err != nil {
				return nil, err
			}
			if k == size && buf[0] == byte(i) {
				break
			}
		}
		if i >= warm {
			rtts = append(rtts, time.Since(start))
		}
	}
	return rtts, nil
}
