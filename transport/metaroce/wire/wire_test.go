package wire

import (
	"errors"
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// seal puts a header into a fresh buffer with payload and the trailer.
func sealed(put func(b []byte), size int, payload []byte) []byte {
	b := make([]byte, size+len(payload)+TrailerSize)
	put(b)
	copy(b[size:], payload)
	Seal(b, size+len(payload))
	return b
}

func TestDataRoundTrip(t *testing.T) {
	tests := []struct {
		name    string
		f       DataFields
		payload []byte
	}{
		{"write first", DataFields{Common: Common{Type: TypeWrite, Flags: FlagFirst | FlagAckReq, Path: 9, Gen: 3, DstConn: 77, PSN: 0xfffffffe, TS: 123456},
			Stream: 5, StreamPrev: 2, MSN: 1000, MSNBase: 998, DSN: 1 << 31, MsgLen: 8192, Offset: 0, Addr: 0x7f0000001000, Key: 0xabcdef, Demand: 12500000}, []byte("hello")},
		{"write imm last", DataFields{Common: Common{Type: TypeWrite, Flags: FlagLast | FlagImm | FlagRetx, Path: 255, Gen: 255, DstConn: 1, PSN: 7},
			MSN: 1, DSN: 2, MsgLen: 4100, Offset: 4096, Addr: 0x1000 + 4096, Key: 1, Token: 17, Imm: 0xdeadbeef}, []byte{1, 2, 3, 4}},
		{"send", DataFields{Common: Common{Type: TypeSend, Flags: FlagFirst | FlagLast}, Stream: 65535, StreamPrev: 65535, MsgLen: 3, Token: 4}, []byte{9, 8, 7}},
		{"empty send", DataFields{Common: Common{Type: TypeSend, Flags: FlagFirst | FlagLast}, MsgLen: 0}, nil},
		{"read resp", DataFields{Common: Common{Type: TypeReadResp}, MSN: 3, MsgLen: 10, Offset: 5, Addr: 0x99, Key: 2}, []byte{1, 2, 3, 4, 5}},
		{"abort", DataFields{Common: Common{Type: TypeSend, Flags: FlagAbort}, MsgLen: 100, Offset: 50, Imm: 6}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pkt := sealed(func(b []byte) { Data(b).Put(&tc.f) }, DataSize, tc.payload)
			typ, body, err := Parse(pkt)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if typ != tc.f.Type {
				t.Errorf("type %v, want %v", typ, tc.f.Type)
			}
			d, err := DecodeData(body)
			if err != nil {
				t.Fatalf("DecodeData: %v", err)
			}
			if diff := cmp.Diff(tc.f, d.Fields()); diff != "" {
				t.Errorf("fields (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.payload, d.Payload(), cmpEmpty); diff != "" {
				t.Errorf("payload (-want +got):\n%s", diff)
			}
		})
	}
}

var cmpEmpty = cmp.Comparer(func(a, b []byte) bool { return string(a) == string(b) })

func TestReadReqSinks(t *testing.T) {
	sinks := make([]byte, 3*SinkSize)
	PutSink(sinks, 0, 0x1000, 100, 7)
	PutSink(sinks, 1, 0x9000, 0, 8)
	PutSink(sinks, 2, 0x5000, 28, 9)
	f := DataFields{Common: Common{Type: TypeReadReq, Flags: FlagFirst | FlagLast}, MsgLen: 128, Addr: 0x4242, Key: 11}
	pkt := sealed(func(b []byte) { Data(b).Put(&f) }, DataSize, sinks)
	_, body, err := Parse(pkt)
	if err != nil {
		t.Fatal(err)
	}
	d, err := DecodeData(body)
	if err != nil {
		t.Fatal(err)
	}
	s, err := DecodeSinks(d.Payload(), d.MsgLen())
	if err != nil {
		t.Fatal(err)
	}
	type sink struct {
		Addr   uint64
		N, Key uint32
	}
	var got []sink
	for i := 0; i < s.Len(); i++ {
		a, n, k := s.At(i)
		got = append(got, sink{a, n, k})
	}
	want := []sink{{0x1000, 100, 7}, {0x9000, 0, 8}, {0x5000, 28, 9}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("sinks (-want +got):\n%s", diff)
	}
}

func TestAckRoundTrip(t *testing.T) {
	f := AckFields{Common: Common{Type: TypeAck, Flags: FlagECE, Path: 200, Gen: 17, DstConn: 5, PSN: 0xffffff00, TS: 99},
		EchoTS: 0xfffffff0, CECount: 65535, RxCount: 3, RateHint: NoRateHint,
		SACK: [4]uint64{1 << 63, 0, 0xdeadbeefcafef00d, 1}}
	pkt := sealed(func(b []byte) { Ack(b).Put(&f) }, AckSize, nil)
	_, body, err := Parse(pkt)
	if err != nil {
		t.Fatal(err)
	}
	a, err := DecodeAck(body)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(f, a.Fields()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	// Bit 0 of the bitvector (PSN cum+1) is the first byte's MSB.
	if body[32] != 0x80 {
		t.Errorf("sack byte 0 = %#x, want 0x80 (MSB first)", body[32])
	}
	want := PathAck{Path: 200, Gen: 17, ECE: true, Cum: 0xffffff00, EchoTS: 0xfffffff0, CECount: 65535, RxCount: 3, SACK: f.SACK}
	if diff := cmp.Diff(want, a.First()); diff != "" {
		t.Errorf("first path (-want +got):\n%s", diff)
	}
}

// TestAckRecords: further paths' records, with and without a SACK
// vector, come back as written, in order.
func TestAckRecords(t *testing.T) {
	recs := []PathAck{
		{Path: 1, Gen: 2, Cum: 3, EchoTS: 4, CECount: 5, RxCount: 6},
		{Path: 255, Gen: 255, ECE: true, Cum: 0xffffffff, EchoTS: 7, CECount: 8, RxCount: 9, SACK: [4]uint64{0, 1, 2, 1 << 63}},
		{Path: 7, Cum: 10},
	}
	size := AckSize
	for i := range recs {
		size += recs[i].RecordSize()
	}
	pkt := sealed(func(b []byte) {
		Ack(b).Put(&AckFields{Common: Common{Type: TypeAck, Path: 9, PSN: 1}, Records: len(recs), RateHint: 1})
		off := AckSize
		for i := range recs {
			off = PutRecord(b, off, &recs[i])
		}
	}, size, nil)
	_, body, err := Parse(pkt)
	if err != nil {
		t.Fatal(err)
	}
	a, err := DecodeAck(body)
	if err != nil {
		t.Fatal(err)
	}
	var got []PathAck
	for i, off := 0, AckSize; i < a.Records(); i++ {
		var p PathAck
		p, off = a.Record(off)
		got = append(got, p)
	}
	if diff := cmp.Diff(recs, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	// Records must fill the ACK exactly.
	for _, n := range []int{size - 1, size + 1, size - AckRecordSACKSize} {
		b := make([]byte, max(n, AckSize))
		copy(b, body)
		if _, err := DecodeAck(b); !errors.Is(err, ErrAckRecords) {
			t.Errorf("%d bytes for %d bytes of records: err %v, want ErrAckRecords", n, size, err)
		}
	}
}

func TestNakRoundTrip(t *testing.T) {
	for _, r := range []NakReason{NakRNR, NakAccess, NakInvalid} {
		f := NakFields{Common: Common{Type: TypeNak, Path: 1, Gen: 2, DstConn: 3, PSN: 4, TS: 5},
			Reason: r, Stream: 6, MSN: 7, DSN: 8, EchoTS: 9}
		pkt := sealed(func(b []byte) { Nak(b).Put(&f) }, NakSize, nil)
		_, body, err := Parse(pkt)
		if err != nil {
			t.Fatal(err)
		}
		n, err := DecodeNak(body)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(f, n.Fields()); diff != "" {
			t.Errorf("%v: (-want +got):\n%s", r, diff)
		}
	}
}

func TestSetupRoundTrip(t *testing.T) {
	for _, typ := range []Type{TypeSyn, TypeSynAck} {
		f := SetupFields{Common: Common{Type: typ, DstConn: 0, TS: 1}, SrcConn: 42, AckDelay: 123456, Service: 65535, Nonce: 0x0123456789abcdef,
			Paths: 256, Ports: 8, MTU: 4096, MsgWindow: 1024, DSNWindow: 1 << 20, LineRate: 400000}
		if typ == TypeSynAck {
			f.FirstShare = 0xfffe
		}
		pkt := sealed(func(b []byte) { Setup(b).Put(&f) }, SetupSize, nil)
		_, body, err := Parse(pkt)
		if err != nil {
			t.Fatal(err)
		}
		s, err := DecodeSetup(body)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(f, s.Fields()); diff != "" {
			t.Errorf("%v: (-want +got):\n%s", typ, diff)
		}
		// 8 ports of 400 Gb/s are 400 GB/s; first_share is in 65535ths.
		if want := float64(f.FirstShare) / 65535 * 400e9; math.Abs(s.FirstShareRate()-want) > 1 {
			t.Errorf("%v: first share rate %v B/s, want %v", typ, s.FirstShareRate(), want)
		}
	}
}

func TestControlRoundTrip(t *testing.T) {
	for _, typ := range []Type{TypeProbe, TypeEst, TypeClose, TypeCloseAck} {
		c := Common{Type: typ, Flags: FlagAckReq, Path: 3, Gen: 4, DstConn: 5, PSN: 6, TS: 7}
		pkt := sealed(func(b []byte) { Header(b).Put(&c) }, CommonSize, nil)
		got, body, err := Parse(pkt)
		if err != nil || got != typ {
			t.Fatalf("%v: Parse = %v, %v", typ, got, err)
		}
		if diff := cmp.Diff(c, Header(body).Common()); diff != "" {
			t.Errorf("%v: (-want +got):\n%s", typ, diff)
		}
	}
}

func TestRejects(t *testing.T) {
	good := func() []byte {
		f := DataFields{Common: Common{Type: TypeWrite}, MsgLen: 10, Offset: 2, Addr: 100}
		return sealed(func(b []byte) { Data(b).Put(&f) }, DataSize, []byte{1, 2, 3})
	}
	reseal := func(b []byte) []byte { Seal(b, len(b)-TrailerSize); return b }
	tests := []struct {
		name string
		pkt  func() []byte
		want error
	}{
		{"empty", func() []byte { return nil }, ErrShort},
		{"19 bytes", func() []byte { return make([]byte, 19) }, ErrShort},
		{"version 1", func() []byte { b := good(); b[0] = 1<<4 | 1; return reseal(b) }, ErrVersion},
		{"type 0", func() []byte { b := good(); b[0] = Version << 4; return reseal(b) }, ErrType},
		{"type 13", func() []byte { b := good(); b[0] = Version<<4 | 13; return reseal(b) }, ErrType},
		{"bit flip", func() []byte { b := good(); b[70] ^= 1; return b }, ErrChecksum},
		{"trailer flip", func() []byte { b := good(); b[len(b)-1] ^= 0x80; return b }, ErrChecksum},
		{"ack too short", func() []byte { b := good()[:40]; b[0] = Version<<4 | uint8(TypeAck); return reseal(b) }, ErrLength},
		{"payload past msg_len", func() []byte {
			b := good()
			Data(b).Put(&DataFields{Common: Common{Type: TypeWrite}, MsgLen: 4, Offset: 2, Addr: 100})
			return reseal(b)
		}, ErrDataRange},
		{"write addr underflow", func() []byte {
			b := good()
			Data(b).Put(&DataFields{Common: Common{Type: TypeWrite}, MsgLen: 10, Offset: 2, Addr: 1})
			return reseal(b)
		}, ErrDataAddr},
		{"abort with data", func() []byte {
			b := good()
			Data(b).Put(&DataFields{Common: Common{Type: TypeWrite, Flags: FlagAbort}, MsgLen: 10, Offset: 2, Addr: 100})
			return reseal(b)
		}, ErrAbortData},
		{"read req no sinks", func() []byte {
			b := good()
			Data(b).Put(&DataFields{Common: Common{Type: TypeReadReq}, MsgLen: 3})
			return reseal(b)
		}, ErrSinkList},
		{"read req offset", func() []byte {
			b := good()
			Data(b).Put(&DataFields{Common: Common{Type: TypeReadReq}, MsgLen: 3, Offset: 1})
			return reseal(b)
		}, ErrReadOffset},
	}
	for _, tc := range tests {
		_, body, err := Parse(tc.pkt())
		if err == nil {
			_, err = DecodeData(body)
		}
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.want)
		}
	}
}

func TestSetupRejects(t *testing.T) {
	base := SetupFields{Common: Common{Type: TypeSyn}, SrcConn: 1, Paths: 16, Ports: 1, MTU: 4096, MsgWindow: 1, DSNWindow: 1}
	tests := []struct {
		name string
		mod  func(f *SetupFields)
		want error
	}{
		{"ok", func(f *SetupFields) {}, nil},
		{"conn 0", func(f *SetupFields) { f.SrcConn = 0 }, ErrSetupConn},
		{"paths 0", func(f *SetupFields) { f.Paths = 0 }, ErrSetupPaths},
		{"paths 257", func(f *SetupFields) { f.Paths = 257 }, ErrSetupPaths},
		{"ports 0", func(f *SetupFields) { f.Ports = 0 }, ErrSetupPorts},
		{"mtu 100", func(f *SetupFields) { f.MTU = 100 }, ErrSetupMTU},
		{"window 0", func(f *SetupFields) { f.DSNWindow = 0 }, ErrSetupWindow},
		{"not setup", func(f *SetupFields) { f.Type = TypeEst }, ErrType},
	}
	for _, tc := range tests {
		f := base
		tc.mod(&f)
		b := make([]byte, SetupSize)
		Setup(b).Put(&f)
		if _, err := DecodeSetup(b); !errors.Is(err, tc.want) {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.want)
		}
	}
	if _, err := DecodeNak(make([]byte, NakSize)); !errors.Is(err, ErrType) {
		t.Errorf("zero NAK: %v", err)
	}
	n := make([]byte, NakSize)
	Nak(n).Put(&NakFields{Common: Common{Type: TypeNak}, Reason: 9})
	if _, err := DecodeNak(n); !errors.Is(err, ErrNakReason) {
		t.Errorf("NAK reason 9: %v", err)
	}
}

func TestSeq(t *testing.T) {
	tests := []struct {
		a, b   Seq
		before bool
	}{
		{0, 1, true}, {1, 0, false}, {0xffffffff, 0, true}, {0, 0xffffffff, false},
		{0x7fffffff, 0x80000000, true}, {5, 5, false},
	}
	for _, tc := range tests {
		if got := tc.a.Before(tc.b); got != tc.before {
			t.Errorf("%d.Before(%d) = %v", tc.a, tc.b, got)
		}
		if got := tc.b.After(tc.a); got != tc.before {
			t.Errorf("%d.After(%d) = %v", tc.b, tc.a, got)
		}
	}
	if d := Seq(0xfffffffe).Dist(3); d != 5 {
		t.Errorf("Dist across wrap = %d, want 5", d)
	}
}

// TestSeqWindow checks Span, In and Within at the 2^32 boundary: a window
// that straddles the wrap, one that ends exactly at it and one that starts
// at it, and the empty window.
func TestSeqWindow(t *testing.T) {
	tests := []struct {
		name         string
		x, base, nxt Seq
		span         uint32
		in, within   bool
	}{
		{"straddles: first", 0xfffffffe, 0xfffffffe, 2, 4, true, true},
		{"straddles: last before wrap", 0xffffffff, 0xfffffffe, 2, 4, true, true},
		{"straddles: zero", 0, 0xfffffffe, 2, 4, true, true},
		{"straddles: last", 1, 0xfffffffe, 2, 4, true, true},
		{"straddles: next", 2, 0xfffffffe, 2, 4, false, true},
		{"straddles: past next", 3, 0xfffffffe, 2, 4, false, false},
		{"straddles: before base", 0xfffffffd, 0xfffffffe, 2, 4, false, false},
		{"ends at the wrap: last", 0xffffffff, 0xfffffff0, 0, 16, true, true},
		{"ends at the wrap: next", 0, 0xfffffff0, 0, 16, false, true},
		{"starts at the wrap", 0, 0, 16, 16, true, true},
		{"starts at the wrap: before base", 0xffffffff, 0, 16, 16, false, false},
		{"empty at the wrap", 0, 0, 0, 0, false, true},
		{"empty before the wrap", 0xffffffff, 0xffffffff, 0xffffffff, 0, false, true},
		{"lags far behind", 0x10, 0x80000010, 0x80000020, 16, false, false},
	}
	for _, tc := range tests {
		if got := tc.base.Span(tc.nxt); got != tc.span {
			t.Errorf("%s: Span = %d, want %d", tc.name, got, tc.span)
		}
		if got := tc.x.In(tc.base, tc.nxt); got != tc.in {
			t.Errorf("%s: %#x.In(%#x, %#x) = %v, want %v", tc.name, tc.x, tc.base, tc.nxt, got, tc.in)
		}
		if got := tc.x.Within(tc.base, tc.nxt); got != tc.within {
			t.Errorf("%s: %#x.Within(%#x, %#x) = %v, want %v", tc.name, tc.x, tc.base, tc.nxt, got, tc.within)
		}
	}
}

func TestNoAllocs(t *testing.T) {
	f := DataFields{Common: Common{Type: TypeWrite}, MsgLen: 4096, Addr: 1 << 20}
	pkt := make([]byte, DataSize+4096+TrailerSize)
	a := testing.AllocsPerRun(200, func() {
		Data(pkt).Put(&f)
		Seal(pkt, DataSize+4096)
		_, body, err := Parse(pkt)
		if err != nil {
			t.Fatal(err)
		}
		d, err := DecodeData(body)
		if err != nil {
			t.Fatal(err)
		}
		_ = d.Fields()
	})
	if a != 0 {
		t.Errorf("encode+parse+decode allocates %v times", a)
	}
	bad := make([]byte, 40)
	if a := testing.AllocsPerRun(200, func() { _, _, _ = Parse(bad) }); a != 0 {
		t.Errorf("rejecting a packet allocates %v times", a)
	}
}

func BenchmarkParseData(b *testing.B) {
	f := DataFields{Common: Common{Type: TypeWrite}, MsgLen: 4096, Addr: 1 << 20}
	pkt := make([]byte, DataSize+4096+TrailerSize)
	Data(pkt).Put(&f)
	Seal(pkt, DataSize+4096)
	b.SetBytes(int64(len(pkt)))
	b.ReportAllocs()
	for b.Loop() {
		_, body, _ := Parse(pkt)
		_, _ = DecodeData(body)
	}
}
