package wire

import "encoding/binary"

// Ack is a view of an ACK: the state of one or more of the sender's
// paths, as the receiver sees them. The fixed part describes the first
// path: the common header's path and gen name it, psn is its cumulative
// ACK (every PSN before it was received) and ts is the receiver's clock.
// Any further paths follow as records (AckRecord), so one ACK can answer
// data that arrived on many paths.
//
//	16 echo_ts    ts of the latest data packet of this path generation,
//	              plus the time the receiver held it before this ACK: the
//	              sender's now - echo_ts is a round trip without ACK delay
//	20 ce_count   CE-marked packets received on this path generation, mod 2^16
//	22 rx_count   packets received on this path generation, mod 2^16
//	24 rate_hint  this sender's fair share of the receiver, kB/s
//	              (0xffffffff: no hint)
//	28 records    number of path records after the SACK (0..MaxAckRecords)
//	29 reserved   0 (3 bytes)
//	32 sack       256 bits, MSB first: bit i set = PSN psn+1+i received
//	64 records    AckRecordSize bytes each, AckRecordSACKSize with a SACK
type Ack []byte

// NoRateHint is the rate_hint value that means "no hint".
const NoRateHint = 0xffffffff

// EchoTS returns the echoed timestamp.
func (a Ack) EchoTS() uint32 { return binary.BigEndian.Uint32(a[16:]) }

// CECount returns the cumulative CE count.
func (a Ack) CECount() uint16 { return binary.BigEndian.Uint16(a[20:]) }

// RxCount returns the cumulative received-packet count.
func (a Ack) RxCount() uint16 { return binary.BigEndian.Uint16(a[22:]) }

// RateHint returns the fair-share hint in kB/s.
func (a Ack) RateHint() uint32 { return binary.BigEndian.Uint32(a[24:]) }

// Records returns the number of path records after the fixed part.
func (a Ack) Records() int { return int(a[28]) }

// SACKWord returns 64 bits of the bitvector: word w covers PSNs
// psn+1+64w .. psn+64+64w, the earliest in the most significant bit.
func (a Ack) SACKWord(w int) uint64 { return binary.BigEndian.Uint64(a[32+SACKWordBits/8*w:]) }

// SetSACK writes the bitvector from four words laid out as SACKWord.
func (a Ack) SetSACK(words *[SACKWords]uint64) {
	for w, x := range words {
		binary.BigEndian.PutUint64(a[32+SACKWordBits/8*w:], x)
	}
}

// First returns the fixed part's path state.
func (a Ack) First() PathAck {
	h := Header(a)
	p := PathAck{Path: h.Path(), Gen: h.Gen(), ECE: h.Flags()&FlagECE != 0, Cum: h.PSN(),
		EchoTS: a.EchoTS(), CECount: a.CECount(), RxCount: a.RxCount()}
	for w := range p.SACK {
		p.SACK[w] = a.SACKWord(w)
	}
	return p
}

// Record returns the path record at byte offset off (AckSize for the
// first) and the offset of the next. The ACK must have passed DecodeAck.
func (a Ack) Record(off int) (PathAck, int) {
	r := AckRecord(a[off:])
	p := PathAck{Path: r[0], Gen: r[1], ECE: r[2]&RecordECE != 0, Cum: binary.BigEndian.Uint32(r[4:]),
		EchoTS: binary.BigEndian.Uint32(r[8:]), CECount: binary.BigEndian.Uint16(r[12:]),
		RxCount: binary.BigEndian.Uint16(r[14:])}
	if r[2]&RecordSACK == 0 {
		return p, off + AckRecordSize
	}
	for w := range p.SACK {
		p.SACK[w] = binary.BigEndian.Uint64(r[AckRecordSize+SACKWordBits/8*w:])
	}
	return p, off + AckRecordSACKSize
}

// AckRecord is a view of one further path's state in an ACK.
//
//	0  path       path id
//	1  gen        path generation
//	2  flags      RecordSACK: a SACK vector follows; RecordECE: CE-marked
//	              data arrived on this path since its previous record
//	3  reserved   0
//	4  cum        cumulative ACK of the path generation
//	8  echo_ts    as the fixed part's, for this path
//	12 ce_count   as the fixed part's, for this path
//	14 rx_count   as the fixed part's, for this path
//	16 sack       (RecordSACK only) 256 bits, as the fixed part's
type AckRecord []byte

// Record flags.
const (
	RecordSACK = 0x01
	RecordECE  = 0x02
)

// PathAck is one path's state in an ACK, as a value: the fixed part or a
// record. A zero SACK means no PSN past Cum arrived.
type PathAck struct {
	Path, Gen        uint8
	ECE              bool
	Cum              uint32
	EchoTS           uint32
	CECount, RxCount uint16
	SACK             [SACKWords]uint64
}

// RecordSize returns how many bytes p takes as a record.
func (p *PathAck) RecordSize() int {
	if p.SACK != ([SACKWords]uint64{}) {
		return AckRecordSACKSize
	}
	return AckRecordSize
}

// PutRecord writes p as a record at b[off:] and returns the offset after
// it; b must have room (RecordSize).
func PutRecord(b []byte, off int, p *PathAck) int {
	r := b[off:]
	_ = r[AckRecordSize-1]
	r[0], r[1], r[2], r[3] = p.Path, p.Gen, 0, 0
	if p.ECE {
		r[2] |= RecordECE
	}
	binary.BigEndian.PutUint32(r[4:], p.Cum)
	binary.BigEndian.PutUint32(r[8:], p.EchoTS)
	binary.BigEndian.PutUint16(r[12:], p.CECount)
	binary.BigEndian.PutUint16(r[14:], p.RxCount)
	if p.SACK == ([SACKWords]uint64{}) {
		return off + AckRecordSize
	}
	r[2] |= RecordSACK
	_ = r[AckRecordSACKSize-1]
	for w, x := range p.SACK {
		binary.BigEndian.PutUint64(r[AckRecordSize+SACKWordBits/8*w:], x)
	}
	return off + AckRecordSACKSize
}

// AckFields is an ACK's fixed part as a value. Records are written after
// it with PutRecord.
type AckFields struct {
	Common
	EchoTS   uint32
	CECount  uint16
	RxCount  uint16
	RateHint uint32
	Records  int
	SACK     [SACKWords]uint64
}

// Fields returns the ACK's fixed part.
func (a Ack) Fields() AckFields {
	f := AckFields{Common: Header(a).Common(), EchoTS: a.EchoTS(), CECount: a.CECount(),
		RxCount: a.RxCount(), RateHint: a.RateHint(), Records: a.Records()}
	for w := range f.SACK {
		f.SACK[w] = a.SACKWord(w)
	}
	return f
}

// Put writes the ACK's fixed part (AckSize bytes).
func (a Ack) Put(f *AckFields) {
	_ = a[AckSize-1]
	Header(a).Put(&f.Common)
	binary.BigEndian.PutUint32(a[16:], f.EchoTS)
	binary.BigEndian.PutUint16(a[20:], f.CECount)
	binary.BigEndian.PutUint16(a[22:], f.RxCount)
	binary.BigEndian.PutUint32(a[24:], f.RateHint)
	binary.BigEndian.PutUint32(a[28:], 0)
	a[28] = uint8(f.Records)
	a.SetSACK(&f.SACK)
}

// DecodeAck checks an ACK as returned by Parse: its records must fill it
// exactly, each well formed.
func DecodeAck(b []byte) (Ack, error) {
	if len(b) < AckSize {
		return nil, ErrLength
	}
	if Header(b).Type() != TypeAck {
		return nil, ErrType
	}
	a := Ack(b)
	off := AckSize
	for i := 0; i < a.Records(); i++ {
		if len(b)-off < AckRecordSize {
			return nil, ErrAckRecords
		}
		if b[off+2]&RecordSACK != 0 {
			// A record with the flag carries a nonempty vector (one form
			// per state): there must be room for it and a bit set.
			if len(b)-off < AckRecordSACKSize || allZero(b[off+AckRecordSize:off+AckRecordSACKSize]) {
				return nil, ErrAckRecords
			}
			off += AckRecordSACKSize
		} else {
			off += AckRecordSize
		}
	}
	if off != len(b) {
		return nil, ErrAckRecords
	}
	return a, nil
}

// NakReason says why a receiver refused a data packet.
type NakReason uint8

// NAK reasons.
const (
	// NakRNR: a SEND (or WRITE with IMM) found no posted receive for its
	// token. Not an error: the sender retries after a back-off.
	NakRNR NakReason = 1
	// NakAccess: bad rkey, range outside the region, or no permission.
	NakAccess NakReason = 2
	// NakInvalid: the request cannot be carried out (a SEND longer than its
	// receive, a receive whose own buffers are invalid, a bad sink list).
	NakInvalid NakReason = 3
)

func (r NakReason) String() string {
	switch r {
	case NakRNR:
		return "RNR"
	case NakAccess:
		return "remote access"
	case NakInvalid:
		return "invalid request"
	}
	return "NAK?"
}

// Nak is a view of a NAK. The common header's path, gen and psn name the
// refused packet, so the NAK also settles that PSN on the sender's
// scoreboard.
//
//	16 reason   NakReason
//	17 reserved 0
//	18 stream   the refused message's stream
//	20 msn      the refused message
//	24 dsn      the refused chunk
//	28 echo_ts  ts of the refused packet
type Nak []byte

// Reason returns the NAK reason.
func (n Nak) Reason() NakReason { return NakReason(n[16]) }

// Stream returns the stream.
func (n Nak) Stream() uint16 { return binary.BigEndian.Uint16(n[18:]) }

// MSN returns the refused message.
func (n Nak) MSN() uint32 { return binary.BigEndian.Uint32(n[20:]) }

// DSN returns the refused chunk.
func (n Nak) DSN() uint32 { return binary.BigEndian.Uint32(n[24:]) }

// EchoTS returns the refused packet's timestamp.
func (n Nak) EchoTS() uint32 { return binary.BigEndian.Uint32(n[28:]) }

// NakFields is a NAK as a value.
type NakFields struct {
	Common
	Reason NakReason
	Stream uint16
	MSN    uint32
	DSN    uint32
	EchoTS uint32
}

// Fields returns the NAK's fields.
func (n Nak) Fields() NakFields {
	return NakFields{Common: Header(n).Common(), Reason: n.Reason(), Stream: n.Stream(),
		MSN: n.MSN(), DSN: n.DSN(), EchoTS: n.EchoTS()}
}

// Put writes the whole NAK (NakSize bytes).
func (n Nak) Put(f *NakFields) {
	_ = n[NakSize-1]
	Header(n).Put(&f.Common)
	n[16], n[17] = uint8(f.Reason), 0
	binary.BigEndian.PutUint16(n[18:], f.Stream)
	binary.BigEndian.PutUint32(n[20:], f.MSN)
	binary.BigEndian.PutUint32(n[24:], f.DSN)
	binary.BigEndian.PutUint32(n[28:], f.EchoTS)
}

// DecodeNak checks a NAK as returned by Parse.
func DecodeNak(b []byte) (Nak, error) {
	if len(b) < NakSize {
		return nil, ErrLength
	}
	if Header(b).Type() != TypeNak {
		return nil, ErrType
	}
	n := Nak(b)
	if r := n.Reason(); r < NakRNR || r > NakInvalid {
		return nil, ErrNakReason
	}
	return n, nil
}

func allZero(b []byte) bool {
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}
