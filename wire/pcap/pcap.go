// Package pcap models the NIC's port mirror: it writes every packet a
// port sends and receives into pcap files that Wireshark and tshark read,
// as Ethernet frames carrying the packet's IPv4 or IPv6 and UDP headers
// and its RoCE part (BTH through ICRC), so that their RoCEv2 dissector
// decodes it. It owns the capture files and their rotation by size (FILE,
// FILE.1, FILE.2, ...).
//
// What is synthesized: the Ethernet header always (the kernel holds the
// real MAC addresses; the capture puts locally administered ones made
// from the IP addresses, 02:00 and the address's last four bytes), and in
// ModeUDP the IP and UDP headers, which the kernel writes and strips; the
// port hands over the headers Linux writes for its socket, so the ICRC in
// the capture checks against them (see ibudp.Tap). In ModePacket the IP and
// UDP headers are those that were on the wire.
package pcap

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/rnicd/rnicd/wire/ibudp"
)

// Config says where and how to capture.
type Config struct {
	// Path is the first file; later ones get .1, .2, ... appended.
	Path string
	// MaxBytes starts a new file before one would grow past it; 0 means
	// one file. A file always takes at least one packet.
	MaxBytes int64
}

// pcap file layout.
const (
	fileHeaderLen   = 24
	recordHeaderLen = 16
	ethHeaderLen    = 14
	snapLen         = ethHeaderLen + 60 + 8 + ibudp.MaxRoCELen // Ethernet, IP with options, UDP, RoCE
)

// Stats are what a Writer has done.
type Stats struct {
	Packets uint64 // frames written
	Bytes   uint64 // bytes written, headers included
	Files   int    // files opened
	Errors  uint64 // frames lost to write errors
}

// Writer writes captured packets; it is an ibudp.Tap, to hang on a port
// (rnic.Device.SetCapture). It is safe for concurrent use.
type Writer struct {
	cfg Config

	mu    sync.Mutex
	f     *os.File
	bw    *bufio.Writer
	pw    *pcapgo.Writer
	size  int64 // bytes in the current file
	frame [snapLen]byte
	stats Stats
	err   error // the first write error; capture stops there
}

// Create opens cfg.Path and writes its pcap header.
func Create(cfg Config) (*Writer, error) {
	if cfg.Path == "" {
		return nil, errors.New("pcap: no file name")
	}
	if cfg.MaxBytes < 0 {
		return nil, fmt.Errorf("pcap: MaxBytes %d is negative", cfg.MaxBytes)
	}
	w := &Writer{cfg: cfg}
	if err := w.open(cfg.Path); err != nil {
		return nil, err
	}
	return w, nil
}

// FileName is the name of the i-th file of a capture (0: path itself).
func FileName(path string, i int) string {
	if i == 0 {
		return path
	}
	return fmt.Sprintf("%s.%d", path, i)
}

func (w *Writer) open(name string) error {
	f, err := os.Create(name)
	if err != nil {
		return fmt.Errorf("pcap: %w", err)
	}
	bw := bufio.NewWriterSize(f, 256<<10)
	pw := pcapgo.NewWriterNanos(bw)
	if err := pw.WriteFileHeader(snapLen, layers.LinkTypeEthernet); err != nil {
		f.Close()
		return fmt.Errorf("pcap: writing the header of %s: %w", name, err)
	}
	w.f, w.bw, w.pw, w.size = f, bw, pw, fileHeaderLen
	w.stats.Files++
	return nil
}

// rotate closes the current file and opens the next.
func (w *Writer) rotate() error {
	if err := w.closeFile(); err != nil {
		return err
	}
	return w.open(FileName(w.cfg.Path, w.stats.Files))
}

func (w *Writer) closeFile() error {
	if w.f == nil {
		return nil
	}
	err := w.bw.Flush()
	if cerr := w.f.Close(); err == nil {
		err = cerr
	}
	w.f = nil
	if err != nil {
		return fmt.Errorf("pcap: %w", err)
	}
	return nil
}

// Packet writes one packet the port sent or received (ibudp.Tap). Packets
// the fault injector dropped never were on the wire and are not written.
func (w *Writer) Packet(at ibudp.TapPoint, hdr, roce []byte, _ ibudp.ICRCStatus) {
	if at != ibudp.TapSent && at != ibudp.TapReceived && at != ibudp.TapICRCError {
		return
	}
	n := ethHeaderLen + len(hdr) + len(roce)
	if len(hdr) == 0 || n > snapLen {
		return
	}
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil || w.f == nil {
		w.stats.Errors++
		return
	}
	frame := w.frame[:n]
	putEthernet(frame, hdr)
	copy(frame[ethHeaderLen:], hdr)
	copy(frame[ethHeaderLen+len(hdr):], roce)
	rec := int64(recordHeaderLen + n)
	if w.cfg.MaxBytes > 0 && w.size > fileHeaderLen && w.size+rec > w.cfg.MaxBytes {
		if err := w.rotate(); err != nil {
			w.err = err
			w.stats.Errors++
			return
		}
	}
	ci := gopacket.CaptureInfo{Timestamp: now, CaptureLength: n, Length: n}
	if err := w.pw.WritePacket(ci, frame); err != nil {
		w.err = fmt.Errorf("pcap: %w", err)
		w.stats.Errors++
		return
	}
	w.size += rec
	w.stats.Packets++
	w.stats.Bytes += uint64(rec)
}

// putEthernet writes an Ethernet header for the IP datagram starting with
// hdr: MAC addresses made from its IP addresses, the EtherType of its
// version.
func putEthernet(frame, hdr []byte) {
	var src, dst []byte
	etype := uint16(0x0800)
	if hdr[0]>>4 == 6 && len(hdr) >= 40 {
		etype, src, dst = 0x86dd, hdr[20:24], hdr[36:40]
	} else if len(hdr) >= 20 {
		src, dst = hdr[12:16], hdr[16:20]
	}
	frame[0], frame[1] = 0x02, 0x00
	copy(frame[2:6], dst)
	frame[6], frame[7] = 0x02, 0x00
	copy(frame[8:12], src)
	binary.BigEndian.PutUint16(frame[12:], etype)
}

// Flush writes what is buffered to the file, so that a reader sees every
// packet so far.
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		return nil
	}
	if err := w.bw.Flush(); err != nil {
		return fmt.Errorf("pcap: %w", err)
	}
	return nil
}

// Stats returns what the writer has done so far.
func (w *Writer) Stats() Stats {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stats
}

// Close flushes and closes the current file; packets after it are
// counted as errors. It returns the first write error, if any.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	err := w.closeFile()
	if w.err != nil {
		return w.err
	}
	return err
}
