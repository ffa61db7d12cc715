package wire

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// seedPackets are valid packets of every type, for the fuzzers' corpora.
func seedPackets() [][]byte {
	var out [][]byte
	df := DataFields{Common: Common{Type: TypeWrite, Flags: FlagFirst}, MsgLen: 8, Addr: 64, Key: 1}
	out = append(out, sealed(func(b []byte) { Data(b).Put(&df) }, DataSize, []byte("abcdefgh")))
	sinks := make([]byte, SinkSize)
	PutSink(sinks, 0, 0x1000, 8, 3)
	rf := DataFields{Common: Common{Type: TypeReadReq}, MsgLen: 8, Addr: 64, Key: 1}
	out = append(out, sealed(func(b []byte) { Data(b).Put(&rf) }, DataSize, sinks))
	af := AckFields{Common: Common{Type: TypeAck, PSN: 3}, SACK: [4]uint64{5}}
	out = append(out, sealed(func(b []byte) { Ack(b).Put(&af) }, AckSize, nil))
	rec := [2]PathAck{{Path: 1, Cum: 7}, {Path: 2, Cum: 9, SACK: [4]uint64{3}}}
	af2 := AckFields{Common: Common{Type: TypeAck, PSN: 3}, Records: len(rec)}
	out = append(out, sealed(func(b []byte) {
		Ack(b).Put(&af2)
		PutRecord(b, PutRecord(b, AckSize, &rec[0]), &rec[1])
	}, AckSize+AckRecordSize+AckRecordSACKSize, nil))
	nf := NakFields{Common: Common{Type: TypeNak}, Reason: NakRNR}
	out = append(out, sealed(func(b []byte) { Nak(b).Put(&nf) }, NakSize, nil))
	sf := SetupFields{Common: Common{Type: TypeSyn}, SrcConn: 1, Paths: 16, Ports: 2, MTU: 4096, MsgWindow: 64, DSNWindow: 4096}
	out = append(out, sealed(func(b []byte) { Setup(b).Put(&sf) }, SetupSize, nil))
	pf := Common{Type: TypeProbe}
	out = append(out, sealed(func(b []byte) { Header(b).Put(&pf) }, CommonSize, nil))
	return out
}

// FuzzParse: any bytes either fail Parse with an *Error or decode; decoded
// headers re-encode to the same fields.
func FuzzParse(f *testing.F) {
	for _, p := range seedPackets() {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, pkt []byte) {
		typ, body, err := Parse(pkt)
		if err != nil {
			if _, ok := err.(*Error); !ok {
				t.Fatalf("Parse error %T is not *Error", err)
			}
			return
		}
		switch {
		case typ.IsData():
			if d, err := DecodeData(body); err == nil {
				roundTripData(t, d)
			}
		case typ == TypeAck:
			if a, err := DecodeAck(body); err == nil {
				roundTripAck(t, a)
			}
		case typ == TypeNak:
			if n, err := DecodeNak(body); err == nil {
				roundTripNak(t, n)
			}
		case typ == TypeSyn || typ == TypeSynAck:
			if s, err := DecodeSetup(body); err == nil {
				roundTripSetup(t, s)
			}
		}
	})
}

// FuzzDecodeData exercises the data header decoder directly (no CRC in the
// way, so the fuzzer reaches the field checks).
func FuzzDecodeData(f *testing.F) {
	for _, p := range seedPackets()[:2] {
		f.Add(p[:len(p)-TrailerSize])
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := DecodeData(b)
		if err != nil {
			return
		}
		if uint64(d.Offset())+uint64(len(d.Payload())) > uint64(d.MsgLen()) && d.Type() != TypeReadReq {
			t.Fatalf("accepted payload past msg_len")
		}
		if d.Type() == TypeReadReq && d.Flags()&FlagAbort == 0 {
			s, err := DecodeSinks(d.Payload(), d.MsgLen())
			if err != nil {
				t.Fatalf("accepted READ request with bad sinks: %v", err)
			}
			for i := 0; i < s.Len(); i++ {
				s.At(i)
			}
		}
		roundTripData(t, d)
	})
}

// FuzzDecodeSinks exercises the READ sink-list decoder.
func FuzzDecodeSinks(f *testing.F) {
	f.Add(make([]byte, 16), uint32(0))
	f.Add(make([]byte, 64), uint32(0))
	f.Fuzz(func(t *testing.T, b []byte, msgLen uint32) {
		s, err := DecodeSinks(b, msgLen)
		if err != nil {
			return
		}
		var sum uint64
		for i := 0; i < s.Len(); i++ {
			_, n, _ := s.At(i)
			sum += uint64(n)
		}
		if sum != uint64(msgLen) || s.Len() < 1 || s.Len() > MaxSinks {
			t.Fatalf("accepted %d sinks summing to %d for msg_len %d", s.Len(), sum, msgLen)
		}
	})
}

// FuzzDecodeAck exercises the ACK decoder.
func FuzzDecodeAck(f *testing.F) {
	p := seedPackets()[2]
	f.Add(p[:len(p)-TrailerSize])
	f.Fuzz(func(t *testing.T, b []byte) {
		if a, err := DecodeAck(b); err == nil {
			roundTripAck(t, a)
		}
	})
}

// FuzzDecodeNak exercises the NAK decoder.
func FuzzDecodeNak(f *testing.F) {
	p := seedPackets()[3]
	f.Add(p[:len(p)-TrailerSize])
	f.Fuzz(func(t *testing.T, b []byte) {
		if n, err := DecodeNak(b); err == nil {
			if r := n.Reason(); r < NakRNR || r > NakInvalid {
				t.Fatalf("accepted reason %d", r)
			}
			roundTripNak(t, n)
		}
	})
}

// FuzzDecodeSetup exercises the SYN/SYN_ACK decoder.
func FuzzDecodeSetup(f *testing.F) {
	p := seedPackets()[4]
	f.Add(p[:len(p)-TrailerSize])
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := DecodeSetup(b)
		if err != nil {
			return
		}
		if s.Paths() < 1 || s.Paths() > 256 || s.SrcConn() == 0 {
			t.Fatalf("accepted bad setup %+v", s.Fields())
		}
		roundTripSetup(t, s)
	})
}

func roundTripData(t *testing.T, d Data) {
	t.Helper()
	f := d.Fields()
	b := make([]byte, DataSize)
	Data(b).Put(&f)
	if diff := cmp.Diff(f, Data(b).Fields()); diff != "" {
		t.Fatalf("data re-encode (-decoded +re-encoded):\n%s", diff)
	}
}

func roundTripAck(t *testing.T, a Ack) {
	t.Helper()
	f := a.Fields()
	b := make([]byte, len(a))
	Ack(b).Put(&f)
	off := AckSize
	for i := 0; i < a.Records(); i++ {
		var p PathAck
		p, off = a.Record(off)
		PutRecord(b, off-p.RecordSize(), &p)
	}
	if diff := cmp.Diff(f, Ack(b).Fields()); diff != "" {
		t.Fatalf("ack re-encode:\n%s", diff)
	}
	if _, err := DecodeAck(b); err != nil {
		t.Fatalf("re-encoded ack: %v", err)
	}
	for i, o1, o2 := 0, AckSize, AckSize; i < a.Records(); i++ {
		var p1, p2 PathAck
		p1, o1 = a.Record(o1)
		p2, o2 = Ack(b).Record(o2)
		if diff := cmp.Diff(p1, p2); diff != "" {
			t.Fatalf("record %d re-encode:\n%s", i, diff)
		}
	}
}

func roundTripNak(t *testing.T, n Nak) {
	t.Helper()
	f := n.Fields()
	b := make([]byte, NakSize)
	Nak(b).Put(&f)
	if diff := cmp.Diff(f, Nak(b).Fields()); diff != "" {
		t.Fatalf("nak re-encode:\n%s", diff)
	}
}

func roundTripSetup(t *testing.T, s Setup) {
	t.Helper()
	f := s.Fields()
	b := make([]byte, SetupSize)
	Setup(b).Put(&f)
	if diff := cmp.Diff(f, Setup(b).Fields()); diff != "" {
		t.Fatalf("setup re-encode:\n%s", diff)
	}
}
