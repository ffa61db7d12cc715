package wire

import "encoding/binary"

// Data is a view of a data packet (WRITE, SEND, READ_REQ, READ_RESP): the
// common header, the 48-byte data header, then the payload.
//
//	16 stream       ordered stream within the connection
//	18 stream_prev  msn distance back to the previous message of the same
//	                stream the sender has not yet completed; 0 = none
//	20 msn          message sequence number (connection-wide, sender's
//	                space; READ_RESP: the requester's READ)
//	24 msn_base     sender's oldest uncompleted msn (receiver may forget
//	                messages before it)
//	28 dsn          data sequence number of this chunk (connection-wide)
//	32 msg_len      message length in bytes
//	36 offset       byte offset of this payload in the message
//	40 addr         placement address of this payload (WRITE: remote VA;
//	                READ_RESP: requester's VA; READ_REQ: responder's source
//	                VA; SEND: 0)
//	48 key          WRITE/READ_REQ: rkey; READ_RESP: requester's lkey
//	52 token        receive match token (SEND, WRITE with IMM)
//	56 imm          immediate data if FlagImm; ABORT: the status
//	60 demand       sender's demanded rate toward this receiver, kB/s
//	64 payload
type Data []byte

// Stream returns the stream id.
func (d Data) Stream() uint16 { return binary.BigEndian.Uint16(d[16:]) }

// StreamPrev returns the distance back to the previous open message of the
// stream (0: none).
func (d Data) StreamPrev() uint16 { return binary.BigEndian.Uint16(d[18:]) }

// MSN returns the message sequence number.
func (d Data) MSN() uint32 { return binary.BigEndian.Uint32(d[20:]) }

// MSNBase returns the sender's oldest uncompleted message.
func (d Data) MSNBase() uint32 { return binary.BigEndian.Uint32(d[24:]) }

// DSN returns the chunk's data sequence number.
func (d Data) DSN() uint32 { return binary.BigEndian.Uint32(d[28:]) }

// MsgLen returns the message length.
func (d Data) MsgLen() uint32 { return binary.BigEndian.Uint32(d[32:]) }

// Offset returns the payload's offset in the message.
func (d Data) Offset() uint32 { return binary.BigEndian.Uint32(d[36:]) }

// Addr returns the placement address.
func (d Data) Addr() uint64 { return binary.BigEndian.Uint64(d[40:]) }

// Key returns the memory key.
func (d Data) Key() uint32 { return binary.BigEndian.Uint32(d[48:]) }

// Token returns the receive match token.
func (d Data) Token() uint32 { return binary.BigEndian.Uint32(d[52:]) }

// Imm returns the immediate data (or an ABORT chunk's status).
func (d Data) Imm() uint32 { return binary.BigEndian.Uint32(d[56:]) }

// Demand returns the sender's demanded rate in kB/s.
func (d Data) Demand() uint32 { return binary.BigEndian.Uint32(d[60:]) }

// Payload returns the bytes after the data header.
func (d Data) Payload() []byte { return d[DataSize:] }

// DataFields is a data header as a value.
type DataFields struct {
	Common
	Stream     uint16
	StreamPrev uint16
	MSN        uint32
	MSNBase    uint32
	DSN        uint32
	MsgLen     uint32
	Offset     uint32
	Addr       uint64
	Key        uint32
	Token      uint32
	Imm        uint32
	Demand     uint32
}

// Fields returns the header's fields.
func (d Data) Fields() DataFields {
	return DataFields{
		Common: Header(d).Common(), Stream: d.Stream(), StreamPrev: d.StreamPrev(),
		MSN: d.MSN(), MSNBase: d.MSNBase(), DSN: d.DSN(), MsgLen: d.MsgLen(), Offset: d.Offset(),
		Addr: d.Addr(), Key: d.Key(), Token: d.Token(), Imm: d.Imm(), Demand: d.Demand(),
	}
}

// Put writes the common and data headers (the first DataSize bytes).
func (d Data) Put(f *DataFields) {
	_ = d[DataSize-1]
	Header(d).Put(&f.Common)
	binary.BigEndian.PutUint16(d[16:], f.Stream)
	binary.BigEndian.PutUint16(d[18:], f.StreamPrev)
	binary.BigEndian.PutUint32(d[20:], f.MSN)
	binary.BigEndian.PutUint32(d[24:], f.MSNBase)
	binary.BigEndian.PutUint32(d[28:], f.DSN)
	binary.BigEndian.PutUint32(d[32:], f.MsgLen)
	binary.BigEndian.PutUint32(d[36:], f.Offset)
	binary.BigEndian.PutUint64(d[40:], f.Addr)
	binary.BigEndian.PutUint32(d[48:], f.Key)
	binary.BigEndian.PutUint32(d[52:], f.Token)
	binary.BigEndian.PutUint32(d[56:], f.Imm)
	binary.BigEndian.PutUint32(d[60:], f.Demand)
}

// DecodeData checks a data packet (as returned by Parse): its length, that
// the payload lies inside the message, that a WRITE's message base does not
// underflow, that an ABORT carries no payload, and a READ request's sink
// list.
func DecodeData(b []byte) (Data, error) {
	if len(b) < DataSize {
		return nil, ErrLength
	}
	d := Data(b)
	t := Header(b).Type()
	if !t.IsData() {
		return nil, ErrType
	}
	n := uint64(len(b) - DataSize)
	if d.Flags()&FlagAbort != 0 && n != 0 {
		return nil, ErrAbortData
	}
	if t == TypeReadReq {
		if d.Offset() != 0 {
			return nil, ErrReadOffset
		}
		if d.Flags()&FlagAbort == 0 {
			if _, err := DecodeSinks(d.Payload(), d.MsgLen()); err != nil {
				return nil, err
			}
		}
		return d, nil
	}
	if uint64(d.Offset())+n > uint64(d.MsgLen()) {
		return nil, ErrDataRange
	}
	if t == TypeWrite && d.Addr() < uint64(d.Offset()) {
		return nil, ErrDataAddr
	}
	return d, nil
}

// Type returns the common header's packet type.
func (d Data) Type() Type { return Header(d).Type() }

// Flags returns the common header's flags.
func (d Data) Flags() Flags { return Header(d).Flags() }

// Sinks is a READ request's payload: where the requester wants the data,
// as up to MaxSinks entries of
//
//	0 addr (8) | 8 len (4) | 12 lkey (4)
//
// The response's bytes fill the entries in order.
type Sinks []byte

// Len returns the number of entries.
func (s Sinks) Len() int { return len(s) / SinkSize }

// At returns entry i.
func (s Sinks) At(i int) (addr uint64, n uint32, key uint32) {
	e := s[i*SinkSize:]
	return binary.BigEndian.Uint64(e), binary.BigEndian.Uint32(e[8:]), binary.BigEndian.Uint32(e[12:])
}

// PutSink writes entry i; b must have room for it.
func PutSink(b []byte, i int, addr uint64, n, key uint32) {
	e := b[i*SinkSize:]
	binary.BigEndian.PutUint64(e, addr)
	binary.BigEndian.PutUint32(e[8:], n)
	binary.BigEndian.PutUint32(e[12:], key)
}

// DecodeSinks checks a sink list: 1..MaxSinks whole entries whose lengths
// add up to msgLen.
func DecodeSinks(b []byte, msgLen uint32) (Sinks, error) {
	if len(b) == 0 || len(b)%SinkSize != 0 || len(b) > MaxSinks*SinkSize {
		return nil, ErrSinkList
	}
	s := Sinks(b)
	var sum uint64
	for i := 0; i < s.Len(); i++ {
		_, n, _ := s.At(i)
		sum += uint64(n)
	}
	if sum != uint64(msgLen) {
		return nil, ErrSinkLength
	}
	return s, nil
}
