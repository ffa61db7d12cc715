package capture

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/mrlab/mrlab/internal/sim"
)

// maxBlock bounds a block so a corrupt length cannot make the reader
// allocate without limit.
const maxBlock = 1 << 20

// ReadInterface is an interface as read back from a pcapng file.
type ReadInterface struct {
	LinkType    uint16
	Name        string
	Description string
	// TsResol is if_tsresol (6 = microseconds when absent).
	TsResol uint8
}

// Packet is a packet record as read back from a pcapng file.
type Packet struct {
	Iface    int
	Time     sim.Time // in ns if the interface's resolution is 9
	Data     []byte
	OrigLen  int
	Flags    uint32
	PacketID uint64
	Comment  string
}

// Reader reads pcapng files: mrlab's own captures in tests and tools, and
// any pcapng with enhanced packet blocks. gopacket's NgReader drops packet
// options, which is where mrlab's annotations live.
type Reader struct {
	r      io.Reader
	order  binary.ByteOrder
	ifaces []ReadInterface
	// offset of the next block, for error messages.
	off int64
	buf []byte
	// Application is the section header's shb_userappl, Comment its
	// comment.
	Application string
	Comment     string
}

// NewReader reads the section header from r.
func NewReader(r io.Reader) (*Reader, error) {
	rd := &Reader{r: r}
	typ, body, err := rd.block(true)
	if err != nil {
		return nil, err
	}
	if typ != blockSHB {
		return nil, fmt.Errorf("reading pcapng at offset 0: block type %#x, want a section header", typ)
	}
	if err := rd.section(body); err != nil {
		return nil, err
	}
	return rd, nil
}

// Interfaces returns the interfaces declared so far.
func (r *Reader) Interfaces() []ReadInterface { return r.ifaces }

// Next returns the next packet, reading interface and other blocks on the
// way. It returns io.EOF at the end of the file.
func (r *Reader) Next() (Packet, error) {
	for {
		at := r.off
		typ, body, err := r.block(false)
		if err != nil {
			return Packet{}, err
		}
		switch typ {
		case blockSHB:
			if err := r.section(body); err != nil {
				return Packet{}, err
			}
		case blockIDB:
			if err := r.iface(at, body); err != nil {
				return Packet{}, err
			}
		case blockEPB:
			return r.packet(at, body)
		}
	}
}

// ReadAll reads every packet of a pcapng stream.
func ReadAll(rd io.Reader) (*Reader, []Packet, error) {
	r, err := NewReader(rd)
	if err != nil {
		return nil, nil, err
	}
	var out []Packet
	for {
		p, err := r.Next()
		if errors.Is(err, io.EOF) {
			return r, out, nil
		}
		if err != nil {
			return r, out, err
		}
		out = append(out, p)
	}
}

// block reads one block and returns its type and body (without the type,
// the two lengths and, for a section header, with the byte-order magic).
func (r *Reader) block(first bool) (uint32, []byte, error) {
	var h [12]byte
	at := r.off
	if _, err := io.ReadFull(r.r, h[:8]); err != nil {
		if errors.Is(err, io.EOF) {
			return 0, nil, io.EOF
		}
		return 0, nil, fmt.Errorf("reading pcapng block header at offset %d: %w", at, err)
	}
	typ := binary.LittleEndian.Uint32(h[:4])
	if typ == blockSHB {
		// The byte order is only known from the section's magic.
		if _, err := io.ReadFull(r.r, h[8:12]); err != nil {
			return 0, nil, fmt.Errorf("reading pcapng section header at offset %d: %w", at, err)
		}
		switch binary.LittleEndian.Uint32(h[8:12]) {
		case byteOrderMagic:
			r.order = binary.LittleEndian
		case 0x4D3C2B1A:
			r.order = binary.BigEndian
		default:
			return 0, nil, fmt.Errorf("reading pcapng section header at offset %d: bad byte-order magic %x", at, h[8:12])
		}
	} else if first || r.order == nil {
		return 0, nil, fmt.Errorf("reading pcapng at offset %d: not a pcapng file (first block %#x)", at, typ)
	} else {
		typ = r.order.Uint32(h[:4])
	}
	n := int(r.order.Uint32(h[4:8]))
	if n < 12 || n%4 != 0 || n > maxBlock || (typ == blockSHB && n < 28) {
		return 0, nil, fmt.Errorf("reading pcapng block at offset %d: bad block length %d", at, n)
	}
	read := 8
	if typ == blockSHB {
		read = 12
	}
	if cap(r.buf) < n {
		r.buf = make([]byte, n)
	}
	b := r.buf[:n]
	copy(b, h[:read])
	if _, err := io.ReadFull(r.r, b[read:]); err != nil {
		return 0, nil, fmt.Errorf("reading pcapng block at offset %d (%d bytes): %w", at, n, noEOF(err))
	}
	if tail := int(r.order.Uint32(b[n-4:])); tail != n {
		return 0, nil, fmt.Errorf("reading pcapng block at offset %d: trailing length %d != %d", at, tail, n)
	}
	r.off += int64(n)
	return typ, b[8 : n-4], nil
}

func noEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

func (r *Reader) section(body []byte) error {
	// magic(4) major(2) minor(2) section length(8), options.
	if major := r.order.Uint16(body[4:6]); major != 1 {
		return fmt.Errorf("reading pcapng section header: version %d not supported", major)
	}
	r.ifaces = r.ifaces[:0]
	return r.options(body[16:], func(code uint16, v []byte) {
		switch code {
		case optShbUserAppl:
			r.Application = string(v)
		case optComment:
			r.Comment = string(v)
		}
	})
}

func (r *Reader) iface(at int64, body []byte) error {
	if len(body) < 8 {
		return fmt.Errorf("reading pcapng interface at offset %d: %d bytes, want 8", at, len(body))
	}
	ifc := ReadInterface{LinkType: r.order.Uint16(body[0:2]), TsResol: 6}
	err := r.options(body[8:], func(code uint16, v []byte) {
		switch code {
		case optIfName:
			ifc.Name = string(v)
		case optIfDescr:
			ifc.Description = string(v)
		case optIfTsresol:
			if len(v) == 1 {
				ifc.TsResol = v[0]
			}
		}
	})
	if err != nil {
		return fmt.Errorf("reading pcapng interface at offset %d: %w", at, err)
	}
	r.ifaces = append(r.ifaces, ifc)
	return nil
}

func (r *Reader) packet(at int64, body []byte) (Packet, error) {
	if len(body) < 20 {
		return Packet{}, fmt.Errorf("reading pcapng packet at offset %d: %d bytes, want 20", at, len(body))
	}
	p := Packet{Iface: int(r.order.Uint32(body[0:4]))}
	if p.Iface >= len(r.ifaces) {
		return Packet{}, fmt.Errorf("reading pcapng packet at offset %d: interface %d not declared (%d are)", at, p.Iface, len(r.ifaces))
	}
	ts := uint64(r.order.Uint32(body[4:8]))<<32 | uint64(r.order.Uint32(body[8:12]))
	p.Time = sim.Time(ts)
	capLen := int(r.order.Uint32(body[12:16]))
	p.OrigLen = int(r.order.Uint32(body[16:20]))
	rest := body[20:]
	if capLen > len(rest) {
		return Packet{}, fmt.Errorf("reading pcapng packet at offset %d: captured length %d exceeds block (%d)", at, capLen, len(rest))
	}
	p.Data = append([]byte(nil), rest[:capLen]...)
	optStart := capLen + pad4(capLen)
	if optStart > len(rest) {
		optStart = len(rest)
	}
	err := r.options(rest[optStart:], func(code uint16, v []byte) {
		switch code {
		case optComment:
			p.Comment = string(v)
		case optEpbFlags:
			if len(v) == 4 {
				p.Flags = r.order.Uint32(v)
			}
		case optEpbPacketID:
			if len(v) == 8 {
				p.PacketID = r.order.Uint64(v)
			}
		}
	})
	if err != nil {
		return Packet{}, fmt.Errorf("reading pcapng packet at offset %d: %w", at, err)
	}
	return p, nil
}

// options walks a TLV option list; a missing end-of-options is tolerated.
func (r *Reader) options(b []byte, fn func(code uint16, v []byte)) error {
	for len(b) >= 4 {
		code := r.order.Uint16(b[0:2])
		n := int(r.order.Uint16(b[2:4]))
		if code == 0 {
			return nil
		}
		b = b[4:]
		if n > len(b) {
			return fmt.Errorf("option %d: length %d exceeds block (%d left)", code, n, len(b))
		}
		fn(code, b[:n])
		skip := n + pad4(n)
		if skip > len(b) {
			skip = len(b)
		}
		b = b[skip:]
	}
	return nil
}
