package conformance

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"strconv"
	"strings"

	"github.com/mrlab/mrlab/transport/metaroce/wire"
)

// slot is where a field lives in a packet: byte offset and width.
type slot struct{ off, size int }

var (
	commonSlots = map[string]slot{"flags": {1, 1}, "path": {2, 1}, "gen": {3, 1}, "dst_conn": {4, 4},
		"psn": {8, 4}, "ts": {12, 4}}
	dataSlots = map[string]slot{"stream": {16, 2}, "stream_prev": {18, 2}, "msn": {20, 4}, "msn_base": {24, 4},
		"dsn": {28, 4}, "msg_len": {32, 4}, "offset": {36, 4}, "addr": {40, 8}, "key": {48, 4}, "token": {52, 4},
		"imm": {56, 4}, "demand": {60, 4}}
	ackSlots = map[string]slot{"cum": {8, 4}, "echo_ts": {16, 4}, "ce_count": {20, 2}, "rx_count": {22, 2},
		"rate_hint": {24, 4}, "records": {28, 1}}
	nakSlots = map[string]slot{"reason": {16, 1}, "stream": {18, 2}, "msn": {20, 4}, "dsn": {24, 4},
		"echo_ts": {28, 4}}
	setupSlots = map[string]slot{"src_conn": {16, 4}, "ack_delay": {20, 4}, "nonce": {24, 8}, "paths": {32, 2},
		"ports": {34, 1}, "mtu": {36, 2}, "msg_window": {38, 2}, "dsn_window": {40, 4}, "line_rate": {44, 4}, "first_share": {50, 2}}
)

// Pseudo-fields of an injected packet that are not header fields.
var injectMeta = map[string]bool{"len": true, "seed": true, "crc": true, "trunc": true, "extra": true,
	"ce": true, "sport": true, "port": true, "version": true, "rawtype": true, "sack": true, "rec": true, "sinks": true}

func slotsFor(t wire.Type) map[string]slot {
	switch {
	case t.IsData():
		return dataSlots
	case t == wire.TypeAck:
		return ackSlots
	case t == wire.TypeNak:
		return nakSlots
	case t == wire.TypeSyn || t == wire.TypeSynAck:
		return setupSlots
	}
	return nil
}

func putSlot(b []byte, s slot, v uint64) {
	switch s.size {
	case 1:
		b[s.off] = byte(v)
	case 2:
		binary.BigEndian.PutUint16(b[s.off:], uint16(v))
	case 4:
		binary.BigEndian.PutUint32(b[s.off:], uint32(v))
	case 8:
		binary.BigEndian.PutUint64(b[s.off:], v)
	}
}

// maxInject bounds an injected packet's payload and padding: what one
// UDP datagram carries with room for the headers.
const maxInject = 65000

// builder holds the tester's side of a test while it builds packets.
type builder struct {
	vars    map[string]uint64
	now     int64             // ns, the tester's clock
	nextPSN map[uint16]uint32 // path<<8|gen -> next PSN the tester sends
	nextDSN uint32
}

// value resolves an injected field's value.
func (b *builder) value(f Field) (uint64, error) {
	switch f.Val.Kind {
	case Exact:
		return f.Val.N, nil
	case Var:
		x, ok := b.vars[f.Val.Name]
		if !ok {
			return 0, fmt.Errorf("%s=%s: variable @%s is not bound yet", f.Key, f.Val.String, f.Val.Name)
		}
		return x + f.Val.N, nil
	}
	return 0, fmt.Errorf("%s=%s: an injected field needs a number or a bound @variable", f.Key, f.Val.String)
}

// build makes the packet an inject statement describes. Defaults fill
// every field the statement leaves out (docs/conformance.md).
//
// The steps: read the statement's fields (fields), fill the defaults
// every packet shares (commonDefaults) and those of its type
// (typeDefaults), then lay the packet out (encode).
func (b *builder) build(st *Stmt) ([]byte, InMeta, error) {
	m := InMeta{SrcPort: 49152}
	in, err := b.fields(st)
	if err != nil {
		return nil, m, err
	}
	b.commonDefaults(in)
	payload, flags, size, err := b.typeDefaults(in)
	if err != nil {
		return nil, m, err
	}
	pkt, err := in.encode(payload, flags, size)
	if err != nil {
		return nil, m, err
	}
	m.Port = int(in.num["port"])
	if in.has("sport") {
		m.SrcPort = uint16(in.num["sport"])
	}
	m.CE = in.num["ce"] != 0
	return pkt, m, nil
}

// injection is an inject statement's fields as build reads them.
type injection struct {
	t     wire.Type
	num   map[string]uint64 // fields and pseudo-fields by name, defaults filled in
	sack  [4]uint64
	recs  []string // ACK path records, as written
	sinks string   // a READ request's sink list, as written
}

func (in *injection) has(k string) bool { _, ok := in.num[k]; return ok }

// def sets field k to v unless the statement gave it.
func (in *injection) def(k string, v uint64) {
	if !in.has(k) {
		in.num[k] = v
	}
}

// fields reads an inject statement's fields, refusing one its packet type
// does not have.
func (b *builder) fields(st *Stmt) (*injection, error) {
	t, _ := typeByName(st.Verb)
	in := &injection{t: t, num: map[string]uint64{}}
	for _, f := range st.Fields {
		switch f.Key {
		case "sack":
			if f.Val.Kind != Text && f.Val.Kind != Exact {
				return nil, fmt.Errorf("sack=%s: want a bit list", f.Val.String)
			}
			s, err := parseSACK(f.Val.String)
			if err != nil {
				return nil, err
			}
			in.sack = s
			continue
		case "rec":
			in.recs = append(in.recs, f.Val.String)
			continue
		case "sinks":
			in.sinks = f.Val.String
			continue
		case "crc":
			if f.Val.String != "bad" {
				return nil, fmt.Errorf("crc=%s: only crc=bad", f.Val.String)
			}
			in.num["crc"] = 1
			continue
		}
		_, isFlag := flagNames[f.Key]
		if _, ok := commonSlots[f.Key]; !ok && !isFlag && !injectMeta[f.Key] {
			if _, ok := slotsFor(t)[f.Key]; !ok {
				return nil, fmt.Errorf("%s has no field %q", t, f.Key)
			}
		}
		v, err := b.value(f)
		if err != nil {
			return nil, err
		}
		in.num[f.Key] = v
	}
	if in.num["len"]+in.num["extra"] > maxInject {
		return nil, fmt.Errorf("len and extra add up to %d bytes; a UDP packet holds at most %d", in.num["len"]+in.num["extra"], maxInject)
	}
	return in, nil
}

// commonDefaults fills the fields every packet has: the tester's
// connection, path 0, the tester's clock and, for data and probes, the
// path's next PSN.
func (b *builder) commonDefaults(in *injection) {
	t, num := in.t, in.num
	if t == wire.TypeSyn {
		in.def("dst_conn", 0)
	}
	in.def("dst_conn", b.vars["conn"])
	in.def("path", 0)
	in.def("gen", 0)
	in.def("ts", uint64(uint32(b.now)))
	key := uint16(num["path"])<<8 | uint16(num["gen"]&0xff)
	if t.IsData() || t == wire.TypeProbe {
		in.def("psn", uint64(b.nextPSN[key]))
		b.nextPSN[key] = uint32(num["psn"]) + 1
	}
}

// typeDefaults fills the fields of the packet's type and returns its
// payload (data: the pattern, a READ request: its sinks), its flags and
// its header size.
func (b *builder) typeDefaults(in *injection) (payload []byte, flags wire.Flags, size int, err error) {
	t, num, def := in.t, in.num, in.def
	size = map[wire.Type]int{wire.TypeAck: wire.AckSize, wire.TypeNak: wire.NakSize, wire.TypeSyn: wire.SetupSize,
		wire.TypeSynAck: wire.SetupSize}[t]
	if size == 0 {
		size = wire.CommonSize
	}
	switch {
	case t.IsData():
		size = wire.DataSize
		def("dsn", uint64(b.nextDSN))
		b.nextDSN = uint32(num["dsn"]) + 1
		def("offset", 0)
		if t == wire.TypeReadReq && in.sinks != "" {
			if payload, err = sinkList(in.sinks); err != nil {
				return nil, 0, 0, err
			}
		} else {
			def("len", 0)
			payload = make([]byte, num["len"])
			def("seed", 1)
			for i := range payload {
				payload[i] = pattern(num["seed"], int(num["offset"])+i)
			}
		}
		def("msg_len", num["offset"]+uint64(len(payload)))
		if t == wire.TypeWrite {
			def("addr", AddrRW+num["offset"])
			def("key", KeyRW)
		}
		def("demand", 125000)
		if num["offset"] == 0 {
			flags |= wire.FlagFirst
		}
		if num["offset"]+uint64(len(payload)) >= num["msg_len"] {
			flags |= wire.FlagLast
		}
		if in.has("imm") {
			flags |= wire.FlagImm
		}
	case t == wire.TypeProbe:
		flags |= wire.FlagAckReq
	case t == wire.TypeAck:
		def("cum", num["psn"])
		def("echo_ts", uint64(uint32(b.now)))
		def("rate_hint", wire.NoRateHint)
		def("records", uint64(len(in.recs)))
	case t == wire.TypeSyn || t == wire.TypeSynAck:
		def("src_conn", TesterConn)
		def("ack_delay", 10000)
		def("nonce", 0x5eed)
		def("paths", 1)
		def("ports", 1)
		def("mtu", 4096)
		def("msg_window", 1024)
		def("dsn_window", 16384)
		def("line_rate", 100000)
	}
	return payload, flags, size, nil
}

// encode lays the packet out: header fields (flags as given, or as set
// by the flag pseudo-fields), payload, an ACK's SACK and records,
// padding, the CRC trailer (spoiled with crc=bad) and truncation.
func (in *injection) encode(payload []byte, flags wire.Flags, size int) ([]byte, error) {
	t, num := in.t, in.num
	pkt := make([]byte, size+len(payload), size+len(payload)+wire.AckRecordSACKSize*len(in.recs)+wire.TrailerSize+int(num["extra"]))
	copy(pkt[size:], payload)
	wire.Header(pkt).SetType(t)
	if in.has("rawtype") {
		pkt[0] = pkt[0]&0xf0 | byte(num["rawtype"]&0xf)
	}
	if in.has("version") {
		pkt[0] = byte(num["version"]&0xf)<<4 | pkt[0]&0xf
	}
	if in.has("flags") {
		flags = wire.Flags(num["flags"])
	}
	for n, bit := range flagNames {
		if v, ok := num[n]; ok {
			if v != 0 {
				flags |= bit
			} else {
				flags &^= bit
			}
		}
	}
	num["flags"] = uint64(flags)
	for k, s := range commonSlots {
		putSlot(pkt, s, num[k])
	}
	for k, s := range slotsFor(t) {
		if v, ok := num[k]; ok {
			putSlot(pkt, s, v)
		}
	}
	if t == wire.TypeAck {
		wire.Ack(pkt).SetSACK(&in.sack)
		for _, r := range in.recs {
			pa, err := parseRecord(r)
			if err != nil {
				return nil, err
			}
			pkt = pkt[:wire.PutRecord(pkt[:cap(pkt)], len(pkt), &pa)]
		}
	}
	pkt = append(pkt, make([]byte, num["extra"])...)
	n := len(pkt)
	pkt = pkt[:n+wire.TrailerSize]
	binary.BigEndian.PutUint32(pkt[n:], crc32.Checksum(pkt[:n], crc32.MakeTable(crc32.Castagnoli)))
	if num["crc"] != 0 {
		pkt[n] ^= 0xff
	}
	if tr := int(num["trunc"]); tr > 0 {
		pkt = pkt[:max(0, len(pkt)-tr)]
	}
	return pkt, nil
}

// parseRecord reads an injected ACK path record: path/gen/cum/sackbits,
// e.g. rec=1/0/5/- or rec=1/0/5/0,2.
func parseRecord(s string) (wire.PathAck, error) {
	var p wire.PathAck
	parts := strings.Split(s, "/")
	if len(parts) != 4 {
		return p, fmt.Errorf("rec=%s: want path/gen/cum/sackbits", s)
	}
	var n [3]uint64
	for i := range n {
		x, err := strconv.ParseUint(parts[i], 0, 32)
		if err != nil {
			return p, fmt.Errorf("rec=%s: %q is not a number", s, parts[i])
		}
		n[i] = x
	}
	if n[0] > 255 || n[1] > 255 {
		return p, fmt.Errorf("rec=%s: path and gen are 0..255", s)
	}
	sack, err := parseSACK(parts[3])
	if err != nil {
		return p, fmt.Errorf("rec=%s: %w", s, err)
	}
	p.Path, p.Gen, p.Cum, p.SACK = uint8(n[0]), uint8(n[1]), uint32(n[2]), sack
	return p, nil
}

// sinkList encodes a READ request's sinks: addr:len:key,...
func sinkList(s string) ([]byte, error) {
	parts := strings.Split(s, ",")
	out := make([]byte, wire.SinkSize*len(parts))
	for i, e := range parts {
		f := strings.Split(e, ":")
		if len(f) != 3 {
			return nil, fmt.Errorf("sinks=%s: want addr:len:key separated by commas", s)
		}
		var n [3]uint64
		for j := range f {
			x, err := strconv.ParseUint(f[j], 0, 64)
			if err != nil {
				return nil, fmt.Errorf("sinks=%s: %q is not a number", s, f[j])
			}
			n[j] = x
		}
		wire.PutSink(out, i, n[0], uint32(n[1]), uint32(n[2]))
	}
	return out, nil
}
