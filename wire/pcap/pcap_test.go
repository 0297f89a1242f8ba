package pcap_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/rnicd/rnicd/internal/looptest"
	"github.com/rnicd/rnicd/wire/bth"
	"github.com/rnicd/rnicd/wire/ibudp"
	"github.com/rnicd/rnicd/wire/pcap"
)

// frame is one captured frame taken apart.
type frame struct {
	eth  []byte
	hdr  []byte // IP and UDP
	roce []byte
	// pcapng's: the interface's name and the packet's direction.
	intf string
	dir  pcapgo.NgEpbFlag
}

// packetReader is what pcapgo's Reader and NgReader both do.
type packetReader interface {
	ReadPacketData() ([]byte, gopacket.CaptureInfo, error)
	LinkType() layers.LinkType
}

// readCapture reads every frame of the capture files path.(files-1), ...,
// path.1, path (oldest first) and checks each file's size against max (0:
// no limit).
func readCapture(t *testing.T, path string, files int, max int64) []frame {
	t.Helper()
	var out []frame
	for i := files - 1; i >= 0; i-- {
		out = append(out, readFrames(t, pcap.FileName(path, i), max)...)
	}
	if _, err := os.Stat(pcap.FileName(path, files)); err == nil {
		t.Fatalf("capture has more than %d files", files)
	}
	return out
}

// readFrames reads every frame of the capture file name and checks its
// size against max (0: no limit).
func readFrames(t *testing.T, name string, max int64) []frame {
	t.Helper()
	var out []frame
	{
		f, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if st, _ := f.Stat(); max > 0 && st.Size() > max {
			t.Errorf("%s: %d bytes, more than the %d allowed", name, st.Size(), max)
		}
		// A pcapng file starts with a Section Header Block, 0x0a0d0d0a.
		var magic [4]byte
		if _, err := io.ReadFull(f, magic[:]); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		f.Seek(0, io.SeekStart)
		var r packetReader
		var ng *pcapgo.NgReader
		if binary.LittleEndian.Uint32(magic[:]) == 0x0a0d0d0a {
			ng, err = pcapgo.NewNgReader(f, pcapgo.DefaultNgReaderOptions)
			r = ng
		} else {
			r, err = pcapgo.NewReader(f)
		}
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if r.LinkType() != layers.LinkTypeEthernet {
			t.Fatalf("%s: link type %v", name, r.LinkType())
		}
		for {
			var data []byte
			var fr frame
			if ng != nil {
				var ci gopacket.CaptureInfo
				var opts pcapgo.NgPacketOptions
				data, ci, opts, err = ng.ReadPacketDataWithOptions()
				if err == nil {
					intf, ierr := ng.Interface(ci.InterfaceIndex)
					if ierr != nil || opts.Flags == nil {
						t.Fatalf("%s: packet of interface %d (%v), flags %v", name, ci.InterfaceIndex, ierr, opts.Flags)
					}
					fr.intf, fr.dir = intf.Name, opts.Flags.Direction
				}
			} else {
				data, _, err = r.ReadPacketData()
			}
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if len(data) < 14+28 {
				t.Fatalf("%s: frame of %d bytes", name, len(data))
			}
			hl := 28
			if binary.BigEndian.Uint16(data[12:]) == 0x86dd {
				hl = 48
			}
			fr.eth, fr.hdr, fr.roce = data[:14], data[14:14+hl], data[14+hl:]
			out = append(out, fr)
		}
	}
	return out
}

func openPort(t *testing.T, a netip.Addr) ibudp.Port {
	t.Helper()
	p, err := ibudp.Open(ibudp.Config{Addr: a, MTU: 1024})
	if err != nil {
		t.Fatalf("open port %v: %v", a, err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// TestCaptureModeUDP sends RDMA WRITE packets between two ModeUDP ports,
// both tapped by one writer that rotates at 8 KiB, and reads the files
// back: every packet is there twice (sent, received), byte for byte, in an
// Ethernet frame whose synthesized IPv4 and UDP headers are those the ICRC
// was sealed for.
//
// In pcapng the same, and every packet carries its port's name (the
// interface block of its file) and its direction: outbound as a sent,
// inbound as b received it.
func TestCaptureModeUDP(t *testing.T) {
	for _, f := range []pcap.Format{pcap.FormatPcap, pcap.FormatPcapNG} {
		t.Run(f.String(), func(t *testing.T) { captureModeUDP(t, f) })
	}
}

func captureModeUDP(t *testing.T, format pcap.Format) {
	a, b := looptest.Pair(t)
	pa, pb := openPort(t, a), openPort(t, b)
	path := filepath.Join(t.TempDir(), "cap."+format.String())
	const max = 8 << 10
	w, err := pcap.Create(pcap.Config{Path: path, MaxBytes: max, Format: format, Interface: "rnicX"})
	if err != nil {
		t.Fatal(err)
	}
	if !ibudp.SetTap(pa, w) || !ibudp.SetTap(pb, w) {
		t.Fatal("ports take no tap")
	}
	const count = 20
	var sent [][]byte
	for i := range count {
		buf := ibudp.NewBuf()
		n := 100 * (i + 1)
		p, err := bth.Build(buf.Room(), bth.RCRDMAWriteOnly, n)
		if err != nil {
			t.Fatal(err)
		}
		p.BTH().Encode(&bth.BTHFields{Opcode: bth.RCRDMAWriteOnly, PadCount: bth.PadFor(n), PKey: bth.DefaultPKey, DestQP: 0x11, PSN: uint32(i), AckReq: true})
		p.RETH().Encode(0x1000, 0x55, uint32(n))
		for k := range p.Payload() {
			p.Payload()[k] = byte(i + k)
		}
		buf.N, buf.Peer = p.Len(), b
		if err := pa.Send([]*ibudp.Buf{buf}); err != nil {
			t.Fatal(err)
		}
		sent = append(sent, append([]byte(nil), buf.RoCE()...)) // sealed now
		rb := []*ibudp.Buf{ibudp.NewBuf()}
		if k, err := pb.Recv(rb); err != nil || k != 1 {
			t.Fatalf("recv: %d, %v", k, err)
		}
	}
	ibudp.SetTap(pa, nil)
	ibudp.SetTap(pb, nil)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	st := w.Stats()
	if st.Packets != 2*count || st.Errors != 0 || st.Files < 2 {
		t.Fatalf("stats %+v: want %d packets in several files, no errors", st, 2*count)
	}
	frames := readCapture(t, path, st.Files, max)
	if len(frames) != 2*count {
		t.Fatalf("%d frames read back, want %d", len(frames), 2*count)
	}
	for i, f := range frames {
		want := sent[i/2]
		if !bytes.Equal(f.roce, want) {
			t.Fatalf("frame %d: RoCE part differs from the packet sent", i)
		}
		if format == pcap.FormatPcapNG {
			dir := pcapgo.NgEpbFlagDirectionOutbound
			if i%2 == 1 {
				dir = pcapgo.NgEpbFlagDirectionInbound
			}
			if f.intf != "rnicX" || f.dir != dir {
				t.Fatalf("frame %d: interface %q, direction %v; want rnicX, %v", i, f.intf, f.dir, dir)
			}
		}
		// Ethernet: IPv4, MACs made of the IP addresses (02:00 and the
		// address's four bytes), b's the destination, a's the source.
		va, vb := a.As4(), b.As4()
		if !bytes.Equal(f.eth, []byte{2, 0, vb[0], vb[1], vb[2], vb[3], 2, 0, va[0], va[1], va[2], va[3], 0x08, 0x00}) {
			t.Fatalf("frame %d: Ethernet header % x", i, f.eth)
		}
		h := f.hdr
		if h[0] != 0x45 || binary.BigEndian.Uint16(h[2:]) != uint16(20+8+len(f.roce)) ||
			binary.BigEndian.Uint16(h[4:]) != 0 || binary.BigEndian.Uint16(h[6:]) != 0x4000 || h[9] != 17 ||
			!bytes.Equal(h[12:16], a.AsSlice()) || !bytes.Equal(h[16:20], b.AsSlice()) {
			t.Fatalf("frame %d: IPv4 header % x", i, h[:20])
		}
		if binary.BigEndian.Uint16(h[20:]) != 4791 || binary.BigEndian.Uint16(h[22:]) != 4791 ||
			binary.BigEndian.Uint16(h[24:]) != uint16(8+len(f.roce)) {
			t.Fatalf("frame %d: UDP header % x", i, h[20:])
		}
		crc, err := bth.ComputeICRC(h, f.roce[:len(f.roce)-bth.ICRCLen])
		if err != nil || crc != binary.LittleEndian.Uint32(f.roce[len(f.roce)-4:]) {
			t.Fatalf("frame %d: ICRC does not check against the captured headers (%v)", i, err)
		}
	}
}

// TestCaptureStops checks that a writer closed under a port counts the
// packets it could not write instead of failing the port.
func TestCaptureStops(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.pcap")
	w, err := pcap.Create(pcap.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	hdr := make([]byte, 28)
	hdr[0] = 0x45
	w.Packet(ibudp.TapSent, hdr, make([]byte, 16), ibudp.ICRCUnchecked, 0)
	if st := w.Stats(); st.Errors != 1 || st.Packets != 0 {
		t.Fatalf("stats %+v after close", st)
	}
	if _, err := pcap.Create(pcap.Config{}); err == nil {
		t.Fatal("no file name accepted")
	}
}

// TestCaptureBounded writes 2,000 packets of about 1 KB into files of
// 64 KiB, keeping 3: what is left on disk is 3 files, each within the
// bound and each a capture on its own (pcap header, whole records), and
// together the newest packets, none missing between them.
func TestCaptureBounded(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "b.pcap")
	const maxBytes, maxFiles, count = 64 << 10, 3, 2000
	w, err := pcap.Create(pcap.Config{Path: path, MaxBytes: maxBytes, MaxFiles: maxFiles})
	if err != nil {
		t.Fatal(err)
	}
	hdr := make([]byte, 28)
	hdr[0] = 0x45
	roce := make([]byte, 1000)
	for i := range count {
		binary.BigEndian.PutUint32(roce, uint32(i))
		w.Packet(ibudp.TapSent, hdr, roce, ibudp.ICRCUnchecked, 0)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	st := w.Stats()
	if st.Packets != count || st.Errors != 0 || st.Files <= maxFiles {
		t.Fatalf("stats %+v: want %d packets over more than %d files", st, count, maxFiles)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, e := range ents {
		fi, _ := e.Info()
		total += fi.Size()
	}
	if len(ents) != maxFiles || total > maxBytes*maxFiles {
		t.Fatalf("%d files of %d bytes in all on disk, want %d of at most %d", len(ents), total, maxFiles, maxBytes*maxFiles)
	}
	next := -1
	for i := maxFiles - 1; i >= 0; i-- { // oldest first
		name := pcap.FileName(path, i)
		for _, f := range readFrames(t, name, maxBytes) {
			k := int(binary.BigEndian.Uint32(f.roce))
			if next >= 0 && k != next {
				t.Fatalf("%s: packet %d after %d", name, k, next-1)
			}
			next = k + 1
		}
	}
	if next != count {
		t.Fatalf("newest packet kept is %d, want %d", next-1, count-1)
	}
	t.Logf("%d packets, %d files opened, %d kept: %d bytes on disk", count, st.Files, len(ents), total)
}

// In pcapng a packet whose ICRC failed is inbound and commented so,
// which tshark shows as its frame comment.
func TestPcapNGICRCComment(t *testing.T) {
	path := filepath.Join(t.TempDir(), "icrc.pcapng")
	w, err := pcap.Create(pcap.Config{Path: path, Format: pcap.FormatPcapNG, Interface: "rnicY"})
	if err != nil {
		t.Fatal(err)
	}
	hdr := make([]byte, 28)
	hdr[0], hdr[9] = 0x45, 17
	copy(hdr[12:], []byte{198, 18, 0, 1, 198, 18, 0, 2})
	roce := bytes.Repeat([]byte{0xab}, 40)
	w.Packet(ibudp.TapICRCError, hdr, roce, ibudp.ICRCStatus(0), 0)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := pcapgo.NewNgReader(f, pcapgo.DefaultNgReaderOptions)
	if err != nil {
		t.Fatal(err)
	}
	data, _, opts, err := r.ReadPacketDataWithOptions()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(data[14+28:], roce) || len(opts.Comments) != 1 || opts.Comments[0] != "ICRC error: the port dropped it" ||
		opts.Flags == nil || opts.Flags.Direction != pcapgo.NgEpbFlagDirectionInbound {
		t.Fatalf("frame % x, options %+v", data, opts)
	}
	if info := r.SectionInfo(); info.Application != "rnicd" {
		t.Errorf("section info %+v", info)
	}
}

// TestCaptureSnapLen: with Config.SnapLen a record keeps the first bytes
// of its frame and says the whole frame's length, in both formats; the
// file says the snap length, and what is kept is byte for byte the start
// of what a whole capture of the same packets holds.
func TestCaptureSnapLen(t *testing.T) {
	if _, err := pcap.Create(pcap.Config{Path: filepath.Join(t.TempDir(), "neg"), SnapLen: -1}); err == nil {
		t.Error("a snap length of -1 was taken")
	}
	a, b := netip.MustParseAddr("198.18.3.1"), netip.MustParseAddr("198.18.3.2")
	for _, format := range []pcap.Format{pcap.FormatPcap, pcap.FormatPcapNG} {
		t.Run(format.String(), func(t *testing.T) {
			dir := t.TempDir()
			const snap = 100
			whole, err := pcap.Create(pcap.Config{Path: filepath.Join(dir, "whole"), Format: format})
			if err != nil {
				t.Fatal(err)
			}
			cut, err := pcap.Create(pcap.Config{Path: filepath.Join(dir, "cut"), Format: format, SnapLen: snap})
			if err != nil {
				t.Fatal(err)
			}
			sizes := []int{0, 30, 44, 1000, 4096}
			for i, n := range sizes {
				p, err := bth.Build(make([]byte, 64+n), bth.RCRDMAWriteOnly, n)
				if err != nil {
					t.Fatal(err)
				}
				p.BTH().Encode(&bth.BTHFields{Opcode: bth.RCRDMAWriteOnly, PadCount: bth.PadFor(n), PKey: bth.DefaultPKey, DestQP: 0x11, PSN: uint32(i)})
				p.RETH().Encode(0x1000, 0x55, uint32(n))
				for k := range p.Payload() {
					p.Payload()[k] = byte(i + k)
				}
				roce := p.Bytes()
				hdr := make([]byte, 28)
				hdr[0] = 0x45
				binary.BigEndian.PutUint16(hdr[2:], uint16(28+len(roce)))
				hdr[9] = 17
				copy(hdr[12:], a.AsSlice())
				copy(hdr[16:], b.AsSlice())
				binary.BigEndian.PutUint16(hdr[20:], 4791)
				binary.BigEndian.PutUint16(hdr[22:], 4791)
				binary.BigEndian.PutUint16(hdr[24:], uint16(8+len(roce)))
				for _, w := range []*pcap.Writer{whole, cut} {
					w.Packet(ibudp.TapSent, hdr, roce, ibudp.ICRCUnchecked, 0)
				}
			}
			for _, w := range []*pcap.Writer{whole, cut} {
				if err := w.Close(); err != nil {
					t.Fatal(err)
				}
			}
			wantData, wantInfo, _ := readRecords(t, filepath.Join(dir, "whole"))
			data, info, fileSnap := readRecords(t, filepath.Join(dir, "cut"))
			if fileSnap != snap {
				t.Errorf("the file says snap length %d, want %d", fileSnap, snap)
			}
			if len(data) != len(sizes) || len(wantData) != len(sizes) {
				t.Fatalf("%d and %d records, want %d each", len(data), len(wantData), len(sizes))
			}
			for i := range data {
				full := wantData[i]
				if wantInfo[i].CaptureLength != len(full) || wantInfo[i].Length != len(full) {
					t.Errorf("whole record %d: kept %d of %d, the frame %d bytes", i, wantInfo[i].CaptureLength, wantInfo[i].Length, len(full))
				}
				keep := min(len(full), snap)
				if info[i].CaptureLength != keep || info[i].Length != len(full) || !bytes.Equal(data[i], full[:keep]) {
					t.Errorf("record %d: kept %d of %d (%d bytes read), want the first %d of %d", i, info[i].CaptureLength, info[i].Length, len(data[i]), keep, len(full))
				}
			}
		})
	}
}

// readRecords reads every record of the capture file name with its
// capture info, and the file's snap length.
func readRecords(t *testing.T, name string) (data [][]byte, info []gopacket.CaptureInfo, snap int) {
	t.Helper()
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var r interface {
		ReadPacketData() ([]byte, gopacket.CaptureInfo, error)
	}
	if ng, err := pcapgo.NewNgReader(f, pcapgo.DefaultNgReaderOptions); err == nil {
		intf, err := ng.Interface(0)
		if err != nil {
			t.Fatal(err)
		}
		r, snap = ng, int(intf.SnapLength)
	} else {
		f.Seek(0, io.SeekStart)
		pr, err := pcapgo.NewReader(f)
		if err != nil {
			t.Fatalf("%s: neither pcapng nor pcap: %v", name, err)
		}
		r, snap = pr, int(pr.Snaplen())
	}
	for {
		d, ci, err := r.ReadPacketData()
		if errors.Is(err, io.EOF) {
			return data, info, snap
		}
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		data, info = append(data, append([]byte(nil), d...)), append(info, ci)
	}
}
