package main

import (
	"fmt"
	"github.com/rnicd/rnicd/internal/rotate"
	"github.com/rnicd/rnicd/internal/units"
)

// fileLimit bounds what --trace or --pcap keeps on disk: files of at
// most size bytes, the newest files of them (tcpdump's -C and -W).
type fileLimit struct {
	size  byteSize
	files int
}

// defaultFileLimit keeps 10 files of 100 MiB, 1000 MiB in all: under
// 1 GiB, what a default daemon may leave on disk. Without a bound the
// README's example command wrote 14 GB in 4 minutes of full-speed
// traffic.
var defaultFileLimit = fileLimit{size: 100 << 20, files: 10}

// minFileSize is the smallest bounded file: it holds the largest record,
// a 4 KiB-MTU packet's pcap record (about 4.2 KB) or one write of trace
// lines (4 KiB), so that no file grows past its bound.
const minFileSize = 8 << 10

// check validates the limit of the file flag -what (the file is path),
// given which flags were set.
func (l fileLimit) check(what, path string, set map[string]bool) error {
	for _, f := range []string{what + "-size", what + "-files"} {
		if set[f] && path == "" {
			return fmt.Errorf("-%s without -%s", f, what)
		}
	}
	if l.size != 0 && l.size < minFileSize {
		return fmt.Errorf("-%s-size %d: want 0 (unbounded) or at least %d", what, l.size, minFileSize)
	}
	if l.files < 0 {
		return fmt.Errorf("-%s-files %d: want 0 (keep all) or more", what, l.files)
	}
	return nil
}

// bound is the most bytes the kept files hold (0: unbounded), for the
// log line that says it.
func (l fileLimit) bound() int64 {
	return rotate.Bound(int64(l.size), l.files)
}

// String says the limit as a person reads it.
func (l fileLimit) String() string {
	if l.bound() == 0 {
		return "unbounded"
	}
	return fmt.Sprintf("%d files of %v", l.files, l.size)
}

// byteSize is a flag of bytes: a plain number (as -pcap-size always
// took) or one with a K, M or G suffix, powers of 1024 (units.ParseBytes,
// the syntax every size of rnicd and rnic takes).
type byteSize int64

func (b *byteSize) Set(s string) error {
	v, err := units.ParseBytes(s)
	if err != nil {
		return err
	}
	*b = byteSize(v)
	return nil
}

func (b byteSize) String() string { return units.FormatBytes(int64(b)) }
