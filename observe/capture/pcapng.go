package capture

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/mrlab/mrlab/internal/sim"
)

// pcapng block types and option codes (draft-ietf-opsawg-pcapng).
const (
	blockSHB = 0x0A0D0D0A
	blockIDB = 0x00000001
	blockEPB = 0x00000006
	blockISB = 0x00000005

	byteOrderMagic = 0x1A2B3C4D

	optComment     = 1
	optShbUserAppl = 4
	optIfName      = 2
	optIfDescr     = 3
	optIfTsresol   = 9
	optEpbFlags    = 2
	optEpbPacketID = 5
	optIsbStart    = 2
	optIsbEnd      = 3
	optIsbIfRecv   = 4
	optIsbIfDrop   = 5
)

// LinkTypeIPv4 is LINKTYPE_IPV4: every packet starts with its IPv4 header,
// which is exactly what mrlab's packet buffers hold.
const LinkTypeIPv4 = 228

// Direction flags for a packet record (epb_flags bits 0-1).
const (
	DirUnknown  uint32 = 0
	DirInbound  uint32 = 1
	DirOutbound uint32 = 2
)

// maxComment bounds a packet comment so a record header always fits the
// writer's scratch buffer.
const maxComment = 1024

// Writer writes a pcapng stream: one section, any number of interfaces (one
// per capture point direction or port), and enhanced packet blocks carrying
// an optional comment (the fabric's annotation) and the packet's id.
//
// gopacket's pcapgo.NgWriter cannot attach options to packets, so mrlab
// writes the blocks itself; the format is simple and the tests read every
// file back with pcapgo and with tshark.
//
// Timestamps are lab time in nanoseconds (if_tsresol = 9) from the start of
// the run: the epoch, 1970-01-01 00:00:00 UTC, is the lab's start, which
// the section header's comment (LabTimeComment) says, so nobody reads a
// 1970 date as a broken clock. Wireshark's "seconds since epoch" format
// (tshark -t e) shows lab time exactly.
//
// A Writer is not safe for concurrent use. WritePacket does not allocate.
type Writer struct {
	bw     *bufio.Writer
	ifaces int
	// hdr is scratch for a block header and its options.
	hdr [64 + maxComment]byte
	err error
}

// LabTimeComment is the section header's comment: what the timestamps
// mean and how to read them in Wireshark.
const LabTimeComment = "Timestamps are lab time, not wall-clock time: 1970-01-01 00:00:00 UTC is the start of the lab. " +
	"To read lab time in seconds: View > Time Display Format > Seconds Since Epoch (tshark -t e); " +
	"Seconds Since Beginning of Capture (tshark -t r) counts from the first packet instead. Resolution: 1 ns."

// NewWriter writes a section header naming the application, with
// LabTimeComment, to w and returns a Writer. Call Flush (or Close on the
// owner) before closing w.
func NewWriter(w io.Writer, application string) (*Writer, error) {
	pw := &Writer{bw: bufio.NewWriterSize(w, 64<<10)}
	var opts []byte
	opts = appendOption(opts, optComment, []byte(LabTimeComment))
	if application != "" {
		opts = appendOption(opts, optShbUserAppl, []byte(application))
	}
	opts = appendOptionEnd(opts)
	total := 28 + len(opts)
	b := make([]byte, 0, total)
	b = le32(b, blockSHB)
	b = le32(b, uint32(total))
	b = le32(b, byteOrderMagic)
	b = le16(b, 1) // major
	b = le16(b, 0) // minor
	b = le64(b, ^uint64(0))
	b = append(b, opts...)
	b = le32(b, uint32(total))
	if _, err := pw.bw.Write(b); err != nil {
		return nil, fmt.Errorf("writing pcapng section header: %w", err)
	}
	return pw, nil
}

// Interface describes one pcapng interface: a capture point direction.
type Interface struct {
	// Name is shown by Wireshark as the interface name, e.g.
	// "p0-leaf0-spine1:ab".
	Name string
	// Description says what the interface sees, e.g.
	// "link p0-leaf0-spine1, leaf0:2 -> spine1:0".
	Description string
	// SnapLen is the largest number of bytes kept per packet; 0 = all.
	SnapLen uint32
}

// AddInterface writes an interface description block and returns the new
// interface's index for WritePacket.
func (w *Writer) AddInterface(ifc Interface) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	var opts []byte
	if ifc.Name != "" {
		opts = appendOption(opts, optIfName, []byte(ifc.Name))
	}
	if ifc.Description != "" {
		opts = appendOption(opts, optIfDescr, []byte(ifc.Description))
	}
	opts = appendOption(opts, optIfTsresol, []byte{9})
	opts = appendOptionEnd(opts)
	total := 20 + len(opts)
	b := make([]byte, 0, total)
	b = le32(b, blockIDB)
	b = le32(b, uint32(total))
	b = le16(b, LinkTypeIPv4)
	b = le16(b, 0)
	b = le32(b, ifc.SnapLen)
	b = append(b, opts...)
	b = le32(b, uint32(total))
	if _, err := w.bw.Write(b); err != nil {
		w.err = fmt.Errorf("writing pcapng interface %q: %w", ifc.Name, err)
		return 0, w.err
	}
	id := w.ifaces
	w.ifaces++
	return id, nil
}

// Interfaces returns how many interfaces have been added.
func (w *Writer) Interfaces() int { return w.ifaces }

// Record is one packet to write.
type Record struct {
	Iface int
	Time  sim.Time
	// Data is the captured bytes (at most the interface's snap length).
	Data []byte
	// OrigLen is the packet's length on the wire; 0 means len(Data).
	OrigLen int
	// Flags is epb_flags; DirInbound or DirOutbound.
	Flags uint32
	// PacketID names the packet, the same at every capture point of one
	// Capture it crosses (Capture numbers packets in the order it first
	// records them); 0 omits it.
	PacketID uint64
	// Comment is the annotation (opt_comment); empty omits it. Longer than
	// 1024 bytes is truncated.
	Comment []byte
}

// WritePacket writes an enhanced packet block. It does not allocate.
func (w *Writer) WritePacket(r *Record) error {
	if w.err != nil {
		return w.err
	}
	if r.Iface < 0 || r.Iface >= w.ifaces {
		return fmt.Errorf("writing pcapng packet: interface %d of %d", r.Iface, w.ifaces)
	}
	comment := r.Comment
	if len(comment) > maxComment {
		comment = comment[:maxComment]
	}
	orig := r.OrigLen
	if orig < len(r.Data) {
		orig = len(r.Data)
	}
	pad := pad4(len(r.Data))
	b := w.hdr[:0]
	b = le32(b, blockEPB)
	b = le32(b, 0) // total length, patched below
	b = le32(b, uint32(r.Iface))
	ts := uint64(r.Time)
	b = le32(b, uint32(ts>>32))
	b = le32(b, uint32(ts))
	b = le32(b, uint32(len(r.Data)))
	b = le32(b, uint32(orig))
	head := len(b)
	// Options follow the packet data; build them after the header in the
	// same scratch array and write them after the data.
	var v [8]byte
	binary.LittleEndian.PutUint32(v[:4], r.Flags)
	b = appendOption(b, optEpbFlags, v[:4])
	if r.PacketID != 0 {
		binary.LittleEndian.PutUint64(v[:], r.PacketID)
		b = appendOption(b, optEpbPacketID, v[:])
	}
	if len(comment) > 0 {
		b = appendOption(b, optComment, comment)
	}
	b = appendOptionEnd(b)
	optLen := len(b) - head
	total := head + len(r.Data) + pad + optLen + 4
	binary.LittleEndian.PutUint32(b[4:8], uint32(total))
	b = le32(b, uint32(total))

	if _, err := w.bw.Write(b[:head]); err != nil {
		return w.fail(err)
	}
	if _, err := w.bw.Write(r.Data); err != nil {
		return w.fail(err)
	}
	if _, err := w.bw.Write(zeroPad[:pad]); err != nil {
		return w.fail(err)
	}
	if _, err := w.bw.Write(b[head:]); err != nil {
		return w.fail(err)
	}
	return nil
}

// Stats is an interface's totals for an interface statistics block.
type Stats struct {
	Start, End sim.Time
	// Received counts packets seen at the point (isb_ifrecv), the ones
	// the fabric dropped there included (their comments say so).
	Received uint64
	// Lost counts packets the capture itself could not record for lack
	// of room (isb_ifdrop): a live reader that fell behind.
	Lost uint64
	// Comment is the block's opt_comment, e.g. the fabric drop count.
	Comment string
}

// WriteStats writes an interface statistics block (Wireshark shows it in
// Statistics > Capture File Properties).
func (w *Writer) WriteStats(iface int, st Stats) error {
	if w.err != nil {
		return w.err
	}
	if iface < 0 || iface >= w.ifaces {
		return fmt.Errorf("writing pcapng statistics: interface %d of %d", iface, w.ifaces)
	}
	var opts []byte
	opts = appendOption(opts, optIsbStart, tsBytes(st.Start))
	opts = appendOption(opts, optIsbEnd, tsBytes(st.End))
	opts = appendOption(opts, optIsbIfRecv, le64(nil, st.Received))
	opts = appendOption(opts, optIsbIfDrop, le64(nil, st.Lost))
	if st.Comment != "" {
		opts = appendOption(opts, optComment, []byte(st.Comment))
	}
	opts = appendOptionEnd(opts)
	total := 24 + len(opts)
	b := make([]byte, 0, total)
	b = le32(b, blockISB)
	b = le32(b, uint32(total))
	b = le32(b, uint32(iface))
	ts := uint64(st.End)
	b = le32(b, uint32(ts>>32))
	b = le32(b, uint32(ts))
	b = append(b, opts...)
	b = le32(b, uint32(total))
	if _, err := w.bw.Write(b); err != nil {
		return w.fail(err)
	}
	return nil
}

// Flush writes buffered blocks to the underlying writer. Live captures
// streamed to Wireshark flush after every batch.
func (w *Writer) Flush() error {
	if w.err != nil {
		return w.err
	}
	if err := w.bw.Flush(); err != nil {
		return w.fail(err)
	}
	return nil
}

// Err returns the first write error, which every later call also returns.
func (w *Writer) Err() error { return w.err }

func (w *Writer) fail(err error) error {
	w.err = fmt.Errorf("writing pcapng packet: %w", err)
	return w.err
}

// tsBytes encodes a pcapng timestamp option value (high word first).
func tsBytes(t sim.Time) []byte {
	u := uint64(t)
	b := le32(nil, uint32(u>>32))
	return le32(b, uint32(u))
}

// zeroPad is block padding. It is a package variable because bufio may
// hand what it is given to the underlying writer, so a local would escape.
var zeroPad [4]byte

func pad4(n int) int { return (4 - n&3) & 3 }

func appendOption(b []byte, code uint16, val []byte) []byte {
	b = le16(b, code)
	b = le16(b, uint16(len(val)))
	b = append(b, val...)
	for i := pad4(len(val)); i > 0; i-- {
		b = append(b, 0)
	}
	return b
}

func appendOptionEnd(b []byte) []byte { return le32(b, 0) }

func le16(b []byte, v uint16) []byte { return binary.LittleEndian.AppendUint16(b, v) }
func le32(b []byte, v uint32) []byte { return binary.LittleEndian.AppendUint32(b, v) }
func le64(b []byte, v uint64) []byte { return binary.LittleEndian.AppendUint64(b, v) }

// epbSize bounds the bytes an enhanced packet block of n data bytes and a
// comment takes: header, padded data, flags, packet id, padded comment,
// end of options, trailer.
func epbSize(n, comment int) int {
	if comment > maxComment {
		comment = maxComment
	}
	return 28 + n + 3 + 8 + 12 + 4 + comment + 3 + 4 + 4
}
