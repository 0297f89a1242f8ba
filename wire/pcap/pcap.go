// Package pcap models the NIC's port mirror: it writes every packet a
// port sends and receives into pcap or pcapng files that Wireshark and
// tshark read,
// as Ethernet frames carrying the packet's IPv4 or IPv6 and UDP headers
// and its RoCE part (BTH through ICRC), so that their RoCEv2 dissector
// decodes it. Its files rotate by size and count (FILE, FILE.1, FILE.2,
// ..., the newest MaxFiles kept; package rotate), each a capture of its
// own, with its header and whole records. A pcapng file (Config.Format)
// also names the device in its interface block and marks each packet
// inbound or outbound, and an ICRC error with a comment.
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
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/rnicd/rnicd/internal/rotate"
	"github.com/rnicd/rnicd/wire/ibudp"
)

// Config says where and how to capture.
type Config struct {
	// Path is the first file; later ones get .1, .2, ... appended.
	Path string
	// MaxBytes starts a new file before one would grow past it; 0 means
	// one file. A file always takes at least one packet.
	MaxBytes int64
	// MaxFiles is how many files are kept, the newest; 0 keeps all.
	MaxFiles int
	// Format is the files' format: FormatPcap (the zero value) or
	// FormatPcapNG.
	Format Format
	// Interface names the port in a pcapng file's interface block (the
	// device's name); "" gives "rnic".
	Interface string
	// SnapLen keeps the first SnapLen bytes of each frame, its Ethernet
	// header included, as tcpdump -s: each record still says how long
	// the frame was. 0 (or more than the longest frame) keeps whole
	// frames. At 128 a frame keeps its IP, UDP and transport headers
	// (BTH, RETH or AETH and their kin) and drops the payload and the
	// ICRC: what a bulk run's capture needs, at a thirtieth of the bytes
	// with MTU 4096.
	SnapLen int
}

// Format is a capture file format.
type Format int

const (
	FormatPcap   Format = iota // libpcap's, nanosecond timestamps
	FormatPcapNG               // pcapng: one section and one interface a file
)

// ParseFormat reads a format's name: pcap or pcapng.
func ParseFormat(s string) (Format, error) {
	switch s {
	case "pcap":
		return FormatPcap, nil
	case "pcapng":
		return FormatPcapNG, nil
	}
	return 0, fmt.Errorf("pcap: format %q: pcap or pcapng", s)
}

func (f Format) String() string {
	if f == FormatPcapNG {
		return "pcapng"
	}
	return "pcap"
}

// pcap file layout.
const (
	recordHeaderLen = 16
	ethHeaderLen    = 14
	snapLen         = ethHeaderLen + 60 + 8 + ibudp.MaxRoCELen // Ethernet, IP with options, UDP, RoCE
)

// Stats are what a Writer has done.
type Stats struct {
	Packets uint64 // frames written
	Bytes   uint64 // bytes written, headers included
	Files   int    // files opened; only the newest Config.MaxFiles are kept
	Errors  uint64 // frames lost to write errors
}

// Writer writes captured packets; it is an ibudp.Tap, to hang on a port
// (rnic.Observer.SetCapture). It is safe for concurrent use.
type Writer struct {
	mu    sync.Mutex
	files *rotate.Files // nil once closed
	rec   [recordHeaderLen + snapLen]byte
	snap  int // bytes kept of each frame (Config.SnapLen), at most snapLen
	stats Stats
	err   error // the first write error; capture stops there
	// ng writes pcapng blocks into ngBuf, whence each goes whole to the
	// files (rotation never splits a block); nil for pcap.
	ng    *pcapgo.NgWriter
	ngBuf bytes.Buffer
}

// Create opens cfg.Path and writes its pcap header.
func Create(cfg Config) (*Writer, error) {
	if cfg.Path == "" {
		return nil, errors.New("pcap: no file name")
	}
	if cfg.SnapLen < 0 {
		return nil, fmt.Errorf("pcap: snap length %d", cfg.SnapLen)
	}
	w := &Writer{stats: Stats{Files: 1}, snap: snapLen}
	if cfg.SnapLen > 0 && cfg.SnapLen < snapLen {
		w.snap = cfg.SnapLen
	}
	var hdr bytes.Buffer
	switch cfg.Format {
	case FormatPcap:
		if err := pcapgo.NewWriterNanos(&hdr).WriteFileHeader(uint32(w.snap), layers.LinkTypeEthernet); err != nil {
			return nil, fmt.Errorf("pcap: %w", err)
		}
	case FormatPcapNG:
		name := cfg.Interface
		if name == "" {
			name = "rnic"
		}
		// The section and interface blocks head every file, so that each
		// rotated file reads on its own.
		ng, err := pcapgo.NewNgWriterInterface(&w.ngBuf,
			pcapgo.NgInterface{Name: name, Description: "RoCEv2 port of " + name, OS: runtime.GOOS,
				LinkType: layers.LinkTypeEthernet, SnapLength: uint32(w.snap), TimestampResolution: 9},
			pcapgo.NgWriterOptions{SectionInfo: pcapgo.NgSectionInfo{Hardware: runtime.GOARCH, OS: runtime.GOOS, Application: "rnicd"}})
		if err == nil {
			err = ng.Flush()
		}
		if err != nil {
			return nil, fmt.Errorf("pcap: %w", err)
		}
		hdr.Write(w.ngBuf.Bytes())
		w.ngBuf.Reset()
		w.ng = ng
	default:
		return nil, fmt.Errorf("pcap: unknown format %d", cfg.Format)
	}
	files, err := rotate.Create(rotate.Config{Path: cfg.Path, MaxBytes: cfg.MaxBytes, MaxFiles: cfg.MaxFiles,
		Header: hdr.Bytes(), BufSize: 256 << 10})
	if err != nil {
		return nil, fmt.Errorf("pcap: %w", err)
	}
	w.files = files
	return w, nil
}

// FileName is the name of the i-th newest file of a capture (0: path
// itself, the one being written).
func FileName(path string, i int) string { return rotate.Name(path, i) }

// Packet writes one packet the port sent or received (ibudp.Tap). Packets
// the fault injector dropped never were on the wire and are not written.
func (w *Writer) Packet(at ibudp.TapPoint, hdr, roce []byte, _ ibudp.ICRCStatus, _ uint32) {
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
	if w.err != nil || w.files == nil {
		w.stats.Errors++
		return
	}
	// One record, header and frame, in one write: rotation never splits
	// it. The record header is pcap's, nanosecond variant, little-endian
	// as pcapgo writes the file header: the bytes kept, then the frame's
	// length. Only the bytes kept are copied.
	keep := min(n, w.snap)
	rec := w.rec[:recordHeaderLen+keep]
	binary.LittleEndian.PutUint32(rec[0:], uint32(now.Unix()))
	binary.LittleEndian.PutUint32(rec[4:], uint32(now.Nanosecond()))
	binary.LittleEndian.PutUint32(rec[8:], uint32(keep))
	binary.LittleEndian.PutUint32(rec[12:], uint32(n))
	var eth [ethHeaderLen]byte
	putEthernet(eth[:], hdr)
	frame := rec[recordHeaderLen:]
	k := copy(frame, eth[:])
	k += copy(frame[k:], hdr)
	copy(frame[k:], roce)
	if w.ng != nil {
		var err error
		if rec, err = w.ngBlock(now, at, frame, n); err != nil {
			w.err = fmt.Errorf("pcap: %w", err)
			w.stats.Errors++
			return
		}
	}
	if _, err := w.files.Write(rec); err != nil {
		w.err = fmt.Errorf("pcap: %w", err)
		w.stats.Errors++
		return
	}
	w.stats.Files = w.files.Stats().Files
	w.stats.Packets++
	w.stats.Bytes += uint64(len(rec))
}

// ngBlock is the pcapng Enhanced Packet Block of frame, the bytes kept of
// one of length n: its direction in the flags word, a comment on a
// packet whose ICRC failed.
func (w *Writer) ngBlock(now time.Time, at ibudp.TapPoint, frame []byte, n int) ([]byte, error) {
	opts := pcapgo.NgPacketOptions{Flags: &pcapgo.NgEpbFlags{Direction: pcapgo.NgEpbFlagDirectionInbound}}
	switch at {
	case ibudp.TapSent:
		opts.Flags.Direction = pcapgo.NgEpbFlagDirectionOutbound
	case ibudp.TapICRCError:
		opts.Comments = []string{"ICRC error: the port dropped it"}
	}
	w.ngBuf.Reset()
	ci := gopacket.CaptureInfo{Timestamp: now, CaptureLength: len(frame), Length: n}
	if err := w.ng.WritePacketWithOptions(ci, frame, opts); err != nil {
		return nil, err
	}
	if err := w.ng.Flush(); err != nil {
		return nil, err
	}
	return w.ngBuf.Bytes(), nil
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
	if w.files == nil {
		return nil
	}
	if err := w.files.Flush(); err != nil {
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
	var err error
	if w.files != nil {
		err = w.files.Close()
		w.files = nil
	}
	if w.err != nil {
		return w.err
	}
	if err != nil {
		return fmt.Errorf("pcap: %w", err)
	}
	return nil
}
