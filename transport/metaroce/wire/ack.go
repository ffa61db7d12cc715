package wire

import "encoding/binary"

// Ack is a view of an ACK: the state of one path, as the receiver sees it.
// The common header's path and gen name the forward path, psn is the
// cumulative ACK (every PSN before it was received) and ts is the
// receiver's clock.
//
//	16 echo_ts    ts of the data packet that triggered this ACK (RTT)
//	20 ce_count   CE-marked packets received on this path generation, mod 2^16
//	22 rx_count   packets received on this path generation, mod 2^16
//	24 rate_hint  this sender's fair share of the receiver, kB/s
//	              (0xffffffff: no hint)
//	28 reserved   0
//	32 sack       256 bits, MSB first: bit i set = PSN psn+1+i received
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

// SACKWord returns 64 bits of the bitvector: word w covers PSNs
// psn+1+64w .. psn+64+64w, the earliest in the most significant bit.
func (a Ack) SACKWord(w int) uint64 { return binary.BigEndian.Uint64(a[32+8*w:]) }

// SetSACK writes the bitvector from four words laid out as SACKWord.
func (a Ack) SetSACK(words *[4]uint64) {
	for w, x := range words {
		binary.BigEndian.PutUint64(a[32+8*w:], x)
	}
}

// AckFields is an ACK as a value.
type AckFields struct {
	Common
	EchoTS   uint32
	CECount  uint16
	RxCount  uint16
	RateHint uint32
	SACK     [4]uint64
}

// Fields returns the ACK's fields.
func (a Ack) Fields() AckFields {
	f := AckFields{Common: Header(a).Common(), EchoTS: a.EchoTS(), CECount: a.CECount(),
		RxCount: a.RxCount(), RateHint: a.RateHint()}
	for w := range f.SACK {
		f.SACK[w] = a.SACKWord(w)
	}
	return f
}

// Put writes the whole ACK (AckSize bytes).
func (a Ack) Put(f *AckFields) {
	_ = a[AckSize-1]
	Header(a).Put(&f.Common)
	binary.BigEndian.PutUint32(a[16:], f.EchoTS)
	binary.BigEndian.PutUint16(a[20:], f.CECount)
	binary.BigEndian.PutUint16(a[22:], f.RxCount)
	binary.BigEndian.PutUint32(a[24:], f.RateHint)
	binary.BigEndian.PutUint32(a[28:], 0)
	a.SetSACK(&f.SACK)
}

// DecodeAck checks an ACK as returned by Parse.
func DecodeAck(b []byte) (Ack, error) {
	if len(b) < AckSize {
		return nil, ErrLength
	}
	if Header(b).Type() != TypeAck {
		return nil, ErrType
	}
	return Ack(b), nil
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
