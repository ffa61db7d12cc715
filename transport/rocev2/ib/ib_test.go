package ib

import (
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/mrlab/mrlab/internal/sim"
)

func hexBytes(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type bthView struct {
	Opcode             Opcode
	SE, MigReq         bool
	Pad                int
	TVer               uint8
	PKey               uint16
	FECN, BECN, AckReq bool
	DestQP             uint32
	PSN                PSN
}

func viewBTH(b BTH) bthView {
	return bthView{b.Opcode(), b.SE(), b.MigReq(), b.PadCount(), b.TVer(), b.PKey(), b.FECN(), b.BECN(), b.AckReq(), b.DestQP(), b.PSN()}
}

func TestBTHAgainstHandAssembledBytes(t *testing.T) {
	for _, tc := range []struct {
		name string
		hex  string
		want bthView
	}{
		// The BTH of the CNP a ConnectX-4 Lx sent (scapy's roce.uts).
		{"cx4 CNP", "8100ffff 40000118 00000000",
			bthView{Opcode: OpCNP, PKey: 0xffff, BECN: true, DestQP: 0x118}},
		{"write first, ackreq, max psn", "06 00 ffff 00 123456 80 ffffff",
			bthView{Opcode: OpWriteFirst, PKey: 0xffff, DestQP: 0x123456, AckReq: true, PSN: 0xffffff}},
		{"send last, SE, migreq, pad 3", "02 f0 8001 00 000011 00 000001",
			bthView{Opcode: OpSendLast, SE: true, MigReq: true, Pad: 3, PKey: 0x8001, DestQP: 0x11, PSN: 1}},
		{"fecn and reserved bits around qp and psn", "11 00 ffff bf ffffff 7f abcdef",
			bthView{Opcode: OpAcknowledge, PKey: 0xffff, FECN: true, DestQP: 0xffffff, PSN: 0xabcdef}},
		{"tver", "04 05 0000 00 000001 00 000000",
			bthView{Opcode: OpSendOnly, TVer: 5, DestQP: 1}},
	} {
		b := BTH(hexBytes(t, tc.hex))
		if d := cmp.Diff(tc.want, viewBTH(b)); d != "" {
			t.Errorf("%s: accessors (-want +got):\n%s", tc.name, d)
		}
		// Encode from the fields reproduces the bytes, reserved bits aside.
		w := tc.want
		enc := AppendBTH(nil, &BTHFields{Opcode: w.Opcode, SE: w.SE, MigReq: w.MigReq, PadCount: w.Pad, TVer: w.TVer,
			PKey: w.PKey, FECN: w.FECN, BECN: w.BECN, DestQP: w.DestQP, AckReq: w.AckReq, PSN: w.PSN})
		want := append([]byte(nil), b...)
		want[4] &^= 0x3f // reserved
		want[8] &^= 0x7f // reserved
		if d := cmp.Diff(want, enc); d != "" {
			t.Errorf("%s: Encode (-want +got):\n%s", tc.name, d)
		}
	}
}

func TestBTHSettersTouchOnlyTheirField(t *testing.T) {
	b := BTH(hexBytes(t, "ffffffffffffffffffffffff"))
	b.SetOpcode(OpReadRequest)
	b.SetSE(false)
	b.SetPadCount(1)
	b.SetTVer(0)
	b.SetPKey(0x1234)
	b.SetBECN(false)
	b.SetDestQP(0x000102)
	b.SetAckReq(false)
	b.SetPSN(0x0a0b0c)
	want := hexBytes(t, "0c 50 1234 bf 000102 7f 0a0b0c")
	if d := cmp.Diff(want, []byte(b)); d != "" {
		t.Fatalf("setters (-want +got):\n%s", d)
	}
	b.SetFECN(false)
	b.SetMigReq(false)
	if b[4] != 0x3f || b[1] != 0x10 {
		t.Fatalf("FECN/MigReq setters: % x", []byte(b))
	}
}

func TestExtendedHeaders(t *testing.T) {
	reth := RETH(hexBytes(t, "0011223344556677 89abcdef 00010000"))
	if reth.VA() != 0x0011223344556677 || reth.RKey() != 0x89abcdef || reth.DMALen() != 65536 {
		t.Fatalf("RETH: va %#x rkey %#x len %d", reth.VA(), reth.RKey(), reth.DMALen())
	}
	if d := cmp.Diff([]byte(reth), AppendRETH(nil, 0x0011223344556677, 0x89abcdef, 65536)); d != "" {
		t.Fatalf("AppendRETH (-want +got):\n%s", d)
	}
	for _, tc := range []struct {
		hex  string
		kind Kind
		val  uint8
		msn  uint32
		str  string
	}{
		{"1f 000005", KindACK, 0x1f, 5, "ACK"},
		{"60 123456", KindNAK, NAKSequence, 0x123456, "NAK(PSN sequence error)"},
		{"61 000000", KindNAK, NAKInvalid, 0, "NAK(invalid request)"},
		{"62 ffffff", KindNAK, NAKRemoteAccess, 0xffffff, "NAK(remote access error)"},
		{"63 000001", KindNAK, NAKRemoteOp, 1, "NAK(remote operational error)"},
		{"2c 000002", KindRNR, 12, 2, "RNR-NAK(640us)"},
		{"20 000002", KindRNR, 0, 2, "RNR-NAK(655.36ms)"},
	} {
		a := AETH(hexBytes(t, tc.hex))
		s := a.Syndrome()
		if s.Kind() != tc.kind || s.Value() != tc.val || a.MSN() != tc.msn || s.String() != tc.str {
			t.Errorf("AETH %s: kind %v value %d msn %#x %q", tc.hex, s.Kind(), s.Value(), a.MSN(), s.String())
		}
		if d := cmp.Diff([]byte(a), AppendAETH(nil, s, tc.msn)); d != "" {
			t.Errorf("AppendAETH %s (-want +got):\n%s", tc.hex, d)
		}
	}
	if RNRSyndrome(12) != 0x2c || NAKSyndrome(NAKRemoteAccess) != SyndromeNAKAccess {
		t.Fatal("syndrome constructors")
	}
	imm := ImmDt(hexBytes(t, "deadbeef"))
	if imm.Imm() != 0xdeadbeef {
		t.Fatal("ImmDt")
	}
	imm.SetImm(7)
	if d := cmp.Diff(hexBytes(t, "00000007"), []byte(imm)); d != "" {
		t.Fatal(d)
	}
}

func TestRNRTimerTable(t *testing.T) {
	for code, want := range map[uint8]sim.Time{
		0: 655360 * sim.Microsecond, 1: 10 * sim.Microsecond, 12: 640 * sim.Microsecond,
		14: 1280 * sim.Microsecond, 31: 491520 * sim.Microsecond,
	} {
		if got := RNRTimer(code); got != want {
			t.Errorf("RNRTimer(%d) = %v, want %v", code, got, want)
		}
	}
}

func TestDecode(t *testing.T) {
	type result struct {
		Op      Opcode
		RETH    string
		AETH    string
		Imm     string
		Payload string
		ICRC    string
	}
	for _, tc := range []struct {
		name string
		hex  string
		want result
		err  error
	}{
		{"write only imm, pad 2", "0b 20 ffff 00000011 80000005" + "0000000000001000 00000007 00000002" + "cafef00d" + "abcd 0000" + "01020304",
			result{Op: OpWriteOnlyImm, RETH: "000000000000100000000007 00000002", Imm: "cafef00d", Payload: "abcd", ICRC: "01020304"}, nil},
		{"ack", "11 00 ffff 00000011 00000005" + "1f000003" + "00000000",
			result{Op: OpAcknowledge, AETH: "1f000003", ICRC: "00000000"}, nil},
		{"read response middle", "0e 00 ffff 00000011 00000005" + "aabbccdd" + "00000000",
			result{Op: OpReadResponseMiddle, Payload: "aabbccdd", ICRC: "00000000"}, nil},
		{"read response last has AETH", "0f 30 ffff 00000011 00000005" + "1f000009" + "ee000000" + "00000000",
			result{Op: OpReadResponseLast, AETH: "1f000009", Payload: "ee", ICRC: "00000000"}, nil},
		{"cnp", "81 00 ffff 40000011 00000000" + "00000000000000000000000000000000" + "11223344",
			result{Op: OpCNP, ICRC: "11223344"}, nil},
		{"too short for BTH+ICRC", "04 00 ffff 00000011 000000", result{}, ErrTruncated},
		{"RETH missing", "0a 00 ffff 00000011 00000005 0000000000001000 00000000", result{}, ErrTruncated},
		{"pad larger than payload", "04 30 ffff 00000011 00000005 aa 00000000", result{}, ErrPad},
		{"version 1", "04 01 ffff 00000011 00000005 00000000", result{}, ErrVersion},
		{"UD opcode", "64 00 ffff 00000011 00000005 00000000", result{}, ErrUnsupported},
	} {
		var p Packet
		err := p.Decode(hexBytes(t, tc.hex))
		if !errors.Is(err, tc.err) {
			t.Errorf("%s: error %v, want %v", tc.name, err, tc.err)
			continue
		}
		if err != nil {
			continue
		}
		h := func(b []byte) string { return hex.EncodeToString(b) }
		got := result{Op: p.BTH.Opcode(), RETH: h(p.RETH), AETH: h(p.AETH), Imm: h(p.ImmDt), Payload: h(p.Payload), ICRC: h(p.ICRC)}
		tc.want.RETH = strings.ReplaceAll(tc.want.RETH, " ", "")
		if d := cmp.Diff(tc.want, got); d != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, d)
		}
	}
}

func TestOpcodeTable(t *testing.T) {
	for _, tc := range []struct {
		op    Opcode
		class Class
		pos   Position
		hl    int
	}{
		{OpSendFirst, ClassSend, PosFirst, 12}, {OpSendLastImm, ClassSend, PosLast, 16},
		{OpWriteFirst, ClassWrite, PosFirst, 28}, {OpWriteMiddle, ClassWrite, PosMiddle, 12},
		{OpWriteOnlyImm, ClassWrite, PosOnly, 32}, {OpReadRequest, ClassReadRequest, PosOnly, 28},
		{OpReadResponseFirst, ClassReadResponse, PosFirst, 16}, {OpReadResponseMiddle, ClassReadResponse, PosMiddle, 12},
		{OpAcknowledge, ClassAck, PosOnly, 16}, {OpCNP, ClassCNP, PosOnly, 28},
		{OpFetchAdd, ClassUnsupported, PosOnly, 12},
	} {
		if tc.op.Class() != tc.class || tc.op.Position() != tc.pos || tc.op.HeaderLen() != tc.hl {
			t.Errorf("%v: class %v pos %v header %d", tc.op, tc.op.Class(), tc.op.Position(), tc.op.HeaderLen())
		}
	}
	for i := 0; i < 5; i++ {
		for _, imm := range []bool{false, true} {
			pos := PositionOf(i, 4)
			if i == 4 {
				pos = PositionOf(0, 1)
			}
			for _, op := range []Opcode{Send(pos, imm), Write(pos, imm), ReadResponse(pos)} {
				if op.Position() != pos {
					t.Errorf("%v has position %v, want %v", op, op.Position(), pos)
				}
			}
			if Send(pos, imm).HasImm() != (imm && (pos == PosLast || pos == PosOnly)) {
				t.Errorf("Send(%v, %v) = %v", pos, imm, Send(pos, imm))
			}
		}
	}
	if s := Opcode(0x64).String(); s != "OPCODE_0x64" {
		t.Errorf("unknown opcode string %q", s)
	}
}

func TestPSNArithmetic(t *testing.T) {
	for _, tc := range []struct {
		p, q PSN
		diff int
	}{
		{5, 3, 2}, {3, 5, -2}, {0, 0xffffff, 1}, {0xffffff, 0, -1},
		{0x7fffff, 0, 0x7fffff}, {0x800000, 0, -0x800000}, {10, 0xfffff0, 26},
	} {
		if d := tc.p.Diff(tc.q); d != tc.diff {
			t.Errorf("%#x.Diff(%#x) = %d, want %d", tc.p, tc.q, d, tc.diff)
		}
		if (tc.diff < 0) != tc.p.Before(tc.q) || (tc.diff > 0) != tc.p.After(tc.q) {
			t.Errorf("%#x vs %#x: Before %v After %v", tc.p, tc.q, tc.p.Before(tc.q), tc.p.After(tc.q))
		}
		if tc.q.Add(tc.diff) != tc.p {
			t.Errorf("%#x.Add(%d) = %#x, want %#x", tc.q, tc.diff, tc.q.Add(tc.diff), tc.p)
		}
	}
	if PSN(0xfffffe).Add(3) != 1 || PSN(1).Add(-3) != 0xfffffe {
		t.Fatal("Add does not wrap")
	}
	if !PSN(0xffffff).InRange(0xfffffe, 2) || PSN(2).InRange(0xfffffe, 2) {
		t.Fatal("InRange across the wrap")
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(hexBytesF("0b20ffff000000118000000500000000000010000000000700000002cafef00dabcd000001020304"))
	f.Add(hexBytesF("8100ffff40000118000000000000000000000000000000000000000082fd002a"))
	f.Add(hexBytesF("1100ffff00000011000000051f00000300000000"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var p Packet
		if err := p.Decode(b); err != nil {
			return
		}
		op := p.BTH.Opcode()
		if len(p.ICRC) != ICRCSize || (op.HasRETH() != (p.RETH != nil)) || (op.HasAETH() != (p.AETH != nil)) || (op.HasImm() != (p.ImmDt != nil)) {
			t.Fatalf("decoded views disagree with %v", op)
		}
		if op.HeaderLen()+len(p.Payload)+p.BTH.PadCount()+ICRCSize != len(b) {
			t.Fatalf("lengths do not add up: header %d payload %d pad %d len %d", op.HeaderLen(), len(p.Payload), p.BTH.PadCount(), len(b))
		}
		// Accessors never panic on decoded views.
		_ = p.BTH.PSN() + PSN(p.BTH.DestQP())
		if p.RETH != nil {
			_ = p.RETH.VA() + uint64(p.RETH.RKey()+p.RETH.DMALen())
		}
		if p.AETH != nil {
			_ = p.AETH.Syndrome().String()
			_ = p.AETH.MSN()
		}
		if p.ImmDt != nil {
			_ = p.ImmDt.Imm()
		}
	})
}

func hexBytesF(s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}
