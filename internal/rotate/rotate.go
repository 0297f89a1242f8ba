// Package rotate writes a stream of records into a bounded set of files,
// as tcpdump's -C and -W do for a capture, named as logrotate names them:
// the file being written is always FILE, the one before it FILE.1, then
// FILE.2, ...; a new FILE starts before a record would take the current
// one past MaxBytes, the others moving one name up, and only the newest
// MaxFiles are kept (the oldest is removed as a new one opens). So
// `tshark -r FILE` always reads the newest packets, whatever rotated. It
// is what bounds the disk `rnicd --pcap` and `--trace` use: unbounded,
// the README's own example wrote 14 GB in 4 minutes.
//
// A record is one Write and never straddles two files, so each file is
// readable on its own (a pcap file with its header, whole JSON lines).
package rotate

import (
	"bufio"
	"errors"
	"fmt"
	"os"
)

// Config says where the files go and how much of them to keep.
type Config struct {
	// Path is the file being written; the older ones get .1 (the
	// newest of them), .2, ... appended.
	Path string
	// MaxBytes starts a new file before a record would take the current
	// one past it; 0 means one file, unbounded. A file always takes at
	// least one record, so a record larger than MaxBytes makes a file of
	// its own, that large.
	MaxBytes int64
	// MaxFiles is how many files are kept, the newest; 0 keeps every one.
	MaxFiles int
	// Header starts every file (a pcap file header, say); it counts
	// towards MaxBytes.
	Header []byte
	// BufSize is how much is buffered before a write to the file (0:
	// nothing, every Write goes to the file).
	BufSize int
}

// Stats are what a Files has done.
type Stats struct {
	Files   int   // files opened, the first included
	Removed int   // old files removed to keep MaxFiles
	Bytes   int64 // bytes written, headers included
}

// Files is the open file set. It is not safe for concurrent use.
type Files struct {
	cfg   Config
	f     *os.File
	bw    *bufio.Writer // nil without BufSize
	size  int64         // bytes in the current file
	stats Stats
}

// Create opens cfg.Path, truncating it, and writes its header.
func Create(cfg Config) (*Files, error) {
	switch {
	case cfg.Path == "":
		return nil, errors.New("rotate: no file name")
	case cfg.MaxBytes < 0:
		return nil, fmt.Errorf("rotate: MaxBytes %d is negative", cfg.MaxBytes)
	case cfg.MaxFiles < 0:
		return nil, fmt.Errorf("rotate: MaxFiles %d is negative", cfg.MaxFiles)
	}
	r := &Files{cfg: cfg}
	if err := r.open(); err != nil {
		return nil, err
	}
	return r, nil
}

// Name is the name of the i-th newest file of the set at path (0: path
// itself, the one being written).
func Name(path string, i int) string {
	if i == 0 {
		return path
	}
	return fmt.Sprintf("%s.%d", path, i)
}

// open starts a new file at cfg.Path: the closed ones move one name up
// (Path to Path.1, Path.1 to Path.2, ...), the oldest removed if it
// falls out of the kept window.
func (r *Files) open() error {
	n := r.stats.Files // files on disk before this one
	if r.cfg.MaxFiles > 0 && n > r.cfg.MaxFiles {
		n = r.cfg.MaxFiles
	}
	if r.cfg.MaxFiles > 0 && n == r.cfg.MaxFiles {
		if err := os.Remove(Name(r.cfg.Path, n-1)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("rotate: removing the oldest file: %w", err)
		}
		r.stats.Removed++
		n--
	}
	for k := n - 1; k >= 0; k-- {
		if err := os.Rename(Name(r.cfg.Path, k), Name(r.cfg.Path, k+1)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("rotate: %w", err)
		}
	}
	f, err := os.Create(r.cfg.Path)
	if err != nil {
		return fmt.Errorf("rotate: %w", err)
	}
	r.f, r.size = f, 0
	if r.cfg.BufSize > 0 {
		r.bw = bufio.NewWriterSize(f, r.cfg.BufSize)
	}
	r.stats.Files++
	return r.write(r.cfg.Header)
}

func (r *Files) write(p []byte) error {
	if len(p) == 0 {
		return nil
	}
	var err error
	if r.bw != nil {
		_, err = r.bw.Write(p)
	} else {
		_, err = r.f.Write(p)
	}
	if err != nil {
		return fmt.Errorf("rotate: %w", err)
	}
	r.size += int64(len(p))
	r.stats.Bytes += int64(len(p))
	return nil
}

// Write writes p as one record: in the current file if it fits, else at
// the start of a new one.
func (r *Files) Write(p []byte) (int, error) {
	if r.f == nil {
		return 0, errors.New("rotate: write after close")
	}
	if r.cfg.MaxBytes > 0 && r.size > int64(len(r.cfg.Header)) && r.size+int64(len(p)) > r.cfg.MaxBytes {
		if err := r.closeFile(); err != nil {
			return 0, err
		}
		if err := r.open(); err != nil {
			return 0, err
		}
	}
	if err := r.write(p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush writes what is buffered to the current file.
func (r *Files) Flush() error {
	if r.bw == nil || r.f == nil {
		return nil
	}
	if err := r.bw.Flush(); err != nil {
		return fmt.Errorf("rotate: %w", err)
	}
	return nil
}

func (r *Files) closeFile() error {
	err := r.Flush()
	if cerr := r.f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("rotate: %w", cerr)
	}
	r.f, r.bw = nil, nil
	return err
}

// Close flushes and closes the current file; a Write after it fails.
func (r *Files) Close() error {
	if r.f == nil {
		return nil
	}
	return r.closeFile()
}

// Stats returns what r has done so far.
func (r *Files) Stats() Stats { return r.stats }

// Bound is the most bytes the kept files hold at once, as the flags'
// help says it (0: unbounded), given that no record is larger than
// maxBytes.
func Bound(maxBytes int64, maxFiles int) int64 {
	if maxBytes == 0 || maxFiles == 0 {
		return 0
	}
	return maxBytes * int64(maxFiles)
}
