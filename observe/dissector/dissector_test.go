package dissector

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mrlab/mrlab/internal/header"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/internal/testenv"
	"github.com/mrlab/mrlab/observe/capture"
	"github.com/mrlab/mrlab/transport/metaroce/wire"
)

// tshark returns the tshark binary (see testenv.RequireCommand).
func tshark(t *testing.T) string {
	t.Helper()
	return testenv.RequireCommand(t, "tshark")
}

// runTshark runs tshark with the dissector on a capture file.
func runTshark(t *testing.T, file string, args ...string) string {
	t.Helper()
	// The embedded copy is the one mrlab ships (and keys the test cache).
	script := filepath.Join(t.TempDir(), FileName)
	if err := os.WriteFile(script, Lua(), 0o644); err != nil {
		t.Fatal(err)
	}
	all := append([]string{"-n", "-X", "lua_script:" + script, "-r", file}, args...)
	cmd := exec.Command(tshark(t), all...)
	// A private configuration: no user plugins or preferences interfere.
	cmd.Env = append(os.Environ(), "WIRESHARK_CONFIG_DIR="+t.TempDir(), "HOME="+t.TempDir())
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("tshark %v: %v\n%s", all, err, errb.String())
	}
	if s := strings.TrimSpace(errb.String()); s != "" && !strings.Contains(s, "Running as user") {
		t.Fatalf("tshark stderr: %s", s)
	}
	return out.String()
}

// frame wraps a MetaRoCE packet (without its trailer) in IPv4/UDP after
// sealing it.
func frame(mr []byte, sport uint16) []byte {
	pkt := make([]byte, len(mr)+wire.TrailerSize)
	copy(pkt, mr)
	wire.Seal(pkt, len(mr))
	n := header.IPv4MinSize + header.UDPSize + len(pkt)
	b := make([]byte, n)
	header.IPv4(b).Encode(&header.IPv4Fields{TOS: header.ECNECT0, TotalLength: uint16(n), Protocol: header.IPv4ProtoUDP,
		Src: netip.MustParseAddr("198.18.0.1"), Dst: netip.MustParseAddr("198.18.0.2")})
	header.UDP(b[header.IPv4MinSize:]).Encode(sport, wire.UDPPort, len(pkt))
	copy(b[header.IPv4MinSize+header.UDPSize:], pkt)
	return b
}

func dataPkt(f wire.DataFields, payload []byte) []byte {
	b := make([]byte, wire.DataSize+len(payload))
	wire.Data(b).Put(&f)
	copy(b[wire.DataSize:], payload)
	return b
}

func ackPkt(f wire.AckFields, recs ...wire.PathAck) []byte {
	size := wire.AckSize
	for i := range recs {
		size += recs[i].RecordSize()
	}
	b := make([]byte, size)
	f.Records = len(recs)
	wire.Ack(b).Put(&f)
	off := wire.AckSize
	for i := range recs {
		off = wire.PutRecord(b, off, &recs[i])
	}
	return b
}

func writeCapture(t *testing.T, pkts [][]byte) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "mr.pcapng")
	f, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	w, err := capture.NewWriter(f, "dissector test")
	if err != nil {
		t.Fatal(err)
	}
	id, _ := w.AddInterface(capture.Interface{Name: "test"})
	for i, p := range pkts {
		if err := w.WritePacket(&capture.Record{Iface: id, Time: sim.Time(i) * sim.Microsecond, Data: p}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	return file
}

// malformed finds what the issue forbids in tshark -V output.
var malformed = regexp.MustCompile(`\[Malformed|Expert Info \(Error|Dissector bug|Lua Error`)

// everyType is one packet of each MetaRoCE type, with known field values.
func everyType() ([][]byte, []string) {
	sinks := make([]byte, 2*wire.SinkSize)
	wire.PutSink(sinks, 0, 0x7f0000002000, 6000, 0x11)
	wire.PutSink(sinks, 1, 0x7f0000009000, 2192, 0x12)
	// SACK: cack 1834; bits 1 and 3..5 set = PSNs 1836, 1838-1840; bit
	// 255 = 2090.
	var sack [4]uint64
	sack[0] = 1<<(63-1) | 1<<(63-3) | 1<<(63-4) | 1<<(63-5)
	sack[3] = 1
	mk := func(t wire.Type) wire.Common {
		return wire.Common{Type: t, Path: 9, Gen: 2, DstConn: 4, PSN: 1834, TS: 123456789}
	}
	var setup = func(t wire.Type) []byte {
		b := make([]byte, wire.SetupSize)
		c := mk(t)
		c.PSN = 0
		wire.Setup(b).Put(&wire.SetupFields{Common: c, SrcConn: 7, AckDelay: 1340, Service: 18515, Nonce: 0x0123456789abcdef, Paths: 16, Ports: 4,
			MTU: 4096, MsgWindow: 64, DSNWindow: 4096, LineRate: 100000})
		return b
	}
	common := func(t wire.Type) []byte {
		b := make([]byte, wire.CommonSize)
		c := mk(t)
		wire.Header(b).Put(&c)
		return b
	}
	nak := make([]byte, wire.NakSize)
	wire.Nak(nak).Put(&wire.NakFields{Common: mk(wire.TypeNak), Reason: wire.NakRNR, Stream: 3, MSN: 77, DSN: 901, EchoTS: 55})
	write := mk(wire.TypeWrite)
	write.Flags = wire.FlagFirst | wire.FlagRetx
	pkts := [][]byte{
		dataPkt(wire.DataFields{Common: write, Stream: 5, StreamPrev: 1, MSN: 1000, MSNBase: 998, DSN: 4242, MsgLen: 8192,
			Offset: 0, Addr: 0x7f0000001000, Key: 0xabcdef, Demand: 12500000}, bytes.Repeat([]byte{0xaa}, 4096)),
		dataPkt(wire.DataFields{Common: wire.Common{Type: wire.TypeSend, Flags: wire.FlagFirst | wire.FlagLast | wire.FlagImm, Path: 1, DstConn: 4, PSN: 5},
			Stream: 2, MSN: 3, DSN: 9, MsgLen: 100, Token: 17, Imm: 0xdeadbeef}, make([]byte, 100)),
		dataPkt(wire.DataFields{Common: mk(wire.TypeReadReq), MSN: 11, MsgLen: 8192, Addr: 0x5000, Key: 0x99}, sinks),
		dataPkt(wire.DataFields{Common: mk(wire.TypeReadResp), MSN: 11, MsgLen: 8192, Offset: 4096, Addr: 0x7f0000003000, Key: 0x12}, make([]byte, 4096)),
		ackPkt(wire.AckFields{Common: wire.Common{Type: wire.TypeAck, Flags: wire.FlagECE, Path: 9, Gen: 2, DstConn: 7, PSN: 1834, TS: 99},
			EchoTS: 123456789, CECount: 3, RxCount: 1900, RateHint: 1250000, SACK: sack}),
		ackPkt(wire.AckFields{Common: wire.Common{Type: wire.TypeAck, Path: 0, DstConn: 7, PSN: 0xffffffff}, RateHint: wire.NoRateHint,
			SACK: [4]uint64{1 << 63}}),
		nak,
		common(wire.TypeProbe),
		setup(wire.TypeSyn),
		setup(wire.TypeSynAck),
		common(wire.TypeEst),
		common(wire.TypeClose),
		common(wire.TypeCloseAck),
		// An ACK of three paths from a busy receiver: the fixed part and
		// two records, the second with a SACK vector (PSN 10 arrived).
		ackPkt(wire.AckFields{Common: wire.Common{Type: wire.TypeAck, Flags: wire.FlagBusy, Path: 1, DstConn: 7, PSN: 40}, RateHint: 1000},
			wire.PathAck{Path: 3, Gen: 1, Cum: 7, EchoTS: 5, CECount: 1, RxCount: 2},
			wire.PathAck{Path: 200, ECE: true, Cum: 9, SACK: [4]uint64{1 << 63}}),
	}
	names := []string{"WRITE", "SEND", "READ_REQ", "READ_RESP", "ACK", "ACK", "NAK", "PROBE", "SYN", "SYN_ACK", "EST", "CLOSE", "CLOSE_ACK", "ACK"}
	return pkts, names
}

// fields runs tshark -T fields and returns one row per packet.
func fields(t *testing.T, file string, names ...string) [][]string {
	t.Helper()
	args := []string{"-T", "fields", "-E", "separator=|", "-E", "occurrence=a", "-E", "aggregator=,"}
	for _, n := range names {
		args = append(args, "-e", n)
	}
	out := runTshark(t, file, args...)
	var rows [][]string
	if strings.TrimSpace(out) == "" {
		return nil
	}
	for _, line := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		row := strings.Split(line, "|")
		for i, v := range row {
			// Booleans print as 1/0 or True/False depending on the
			// Wireshark version.
			switch v {
			case "True":
				row[i] = "1"
			case "False":
				row[i] = "0"
			}
		}
		rows = append(rows, row)
	}
	return rows
}

func TestDissectEveryType(t *testing.T) {
	tshark(t)
	pkts, names := everyType()
	var framed [][]byte
	for i, p := range pkts {
		framed = append(framed, frame(p, uint16(49152+i)))
	}
	file := writeCapture(t, framed)

	verbose := runTshark(t, file, "-V")
	if m := malformed.FindString(verbose); m != "" {
		t.Fatalf("tshark reports %q:\n%s", m, verbose)
	}
	if got := strings.Count(verbose, "MetaRoCE (mrlab wire format)"); got != len(pkts) {
		t.Errorf("%d MetaRoCE trees, want %d", got, len(pkts))
	}

	// Common header on every packet, CRC good on every packet.
	rows := fields(t, file, "metaroce.version", "metaroce.type", "metaroce.path", "metaroce.gen", "metaroce.dst_conn",
		"metaroce.ts", "metaroce.crc.status", "metaroce.flags")
	for i, r := range rows {
		want := wire.Header(pkts[i])
		exp := []string{fmt.Sprint(wire.Version), fmt.Sprint(uint8(want.Type())), fmt.Sprint(want.Path()), fmt.Sprint(want.Gen()),
			fmt.Sprint(want.DstConn()), fmt.Sprint(want.TS()), "1", fmt.Sprintf("0x%02x", uint8(want.Flags()))}
		if d := cmp.Diff(exp, r); d != "" {
			t.Errorf("packet %d (%s) common header (-want +got):\n%s", i, names[i], d)
		}
	}

	// Each type's own fields, exactly.
	checks := []struct {
		pkt    int
		fields []string
		want   []string
	}{
		{0, []string{"metaroce.psn", "metaroce.data.stream", "metaroce.data.stream_prev", "metaroce.data.msn", "metaroce.data.msn_base",
			"metaroce.data.dsn", "metaroce.data.msg_len", "metaroce.data.offset", "metaroce.data.addr", "metaroce.data.key",
			"metaroce.data.token", "metaroce.data.imm", "metaroce.data.demand", "metaroce.data.payload_len",
			"metaroce.flags.first", "metaroce.flags.last", "metaroce.flags.retx"},
			[]string{"1834", "5", "1", "1000", "998", "4242", "8192", "0", "0x00007f0000001000", "0x00abcdef", "0", "0x00000000",
				"12500000", "4096", "1", "0", "1"}},
		{1, []string{"metaroce.data.token", "metaroce.data.imm", "metaroce.flags.imm", "metaroce.flags.last", "metaroce.data.payload_len"},
			[]string{"17", "0xdeadbeef", "1", "1", "100"}},
		{2, []string{"metaroce.sink.addr", "metaroce.sink.len", "metaroce.sink.lkey"},
			[]string{"0x00007f0000002000,0x00007f0000009000", "6000,2192", "0x00000011,0x00000012"}},
		{3, []string{"metaroce.data.offset", "metaroce.data.addr", "metaroce.data.payload_len"},
			[]string{"4096", "0x00007f0000003000", "4096"}},
		{4, []string{"metaroce.ack.cack", "metaroce.ack.echo_ts", "metaroce.ack.ce_count", "metaroce.ack.rx_count", "metaroce.ack.rate_hint",
			"metaroce.ack.records", "metaroce.ack.reserved", "metaroce.ack.sack_count", "metaroce.ack.sack_set", "metaroce.ack.sacked_psn", "metaroce.flags.ece"},
			[]string{"1834", "123456789", "3", "1900", "1250000", "0", "0x000000", "5", "{1836,1838-1840,2090}", "1836,1838,1839,1840,2090", "1"}},
		// PSN arithmetic wraps: cack 2^32-1, bit 0 = PSN 0.
		{5, []string{"metaroce.ack.cack", "metaroce.ack.rate_hint", "metaroce.ack.sack_set", "metaroce.ack.sacked_psn"},
			[]string{"4294967295", "4294967295", "{0}", "0"}},
		{6, []string{"metaroce.psn", "metaroce.nak.reason", "metaroce.nak.reserved", "metaroce.nak.stream", "metaroce.nak.msn",
			"metaroce.nak.dsn", "metaroce.nak.echo_ts"}, []string{"1834", "1", "0x00", "3", "77", "901", "55"}},
		{7, []string{"metaroce.psn"}, []string{"1834"}},
		{8, []string{"metaroce.setup.src_conn", "metaroce.setup.ack_delay", "metaroce.setup.nonce", "metaroce.setup.paths",
			"metaroce.setup.ports", "metaroce.setup.reserved2", "metaroce.setup.mtu", "metaroce.setup.msg_window",
			"metaroce.setup.dsn_window", "metaroce.setup.line_rate", "metaroce.setup.service", "metaroce.setup.reserved3"},
			[]string{"7", "1340", "0x0123456789abcdef", "16", "4", "0x00", "4096", "64", "4096", "100000", "18515", "0x0000"}},
		{9, []string{"metaroce.setup.src_conn", "metaroce.setup.paths"}, []string{"7", "16"}},
		{13, []string{"metaroce.ack.records", "metaroce.ack.record.path", "metaroce.ack.record.gen", "metaroce.ack.record.cack",
			"metaroce.ack.record.ce_count", "metaroce.ack.record.flags.ece", "metaroce.ack.record.sack_set", "metaroce.flags.busy"},
			[]string{"2", "3,200", "1,0", "7,9", "1,0", "0,1", "{10}", "1"}},
	}
	for _, c := range checks {
		rows := fields(t, file, c.fields...)
		if d := cmp.Diff(c.want, rows[c.pkt]); d != "" {
			t.Errorf("packet %d (%s) fields %v (-want +got):\n%s", c.pkt, names[c.pkt], c.fields, d)
		}
	}

	// The Info column names the type and the decision-relevant fields.
	info := runTshark(t, file, "-T", "fields", "-e", "_ws.col.Info")
	lines := strings.Split(strings.TrimSpace(info), "\n")
	for i, want := range []string{
		"WRITE path 9/2 psn 1834 conn 4 msn 1000 off 0/8192 len 4096 [FIRST,RETX]",
		"", "", "",
		"ACK path 9/2 conn 7 cack 1834 sack {1836,1838-1840,2090} hint 10 Gb/s [ECE]",
	} {
		if want != "" && lines[i] != want {
			t.Errorf("info %d = %q, want %q", i, lines[i], want)
		}
	}
}

// TestDissectBadPackets: corruption and truncation are reported, not
// silently decoded.
func TestDissectBadPackets(t *testing.T) {
	tshark(t)
	pkts, _ := everyType()
	good := frame(pkts[0], 49152)
	corrupt := append([]byte(nil), good...)
	corrupt[len(corrupt)-100] ^= 0x10   // a payload bit: only the CRC can tell
	short := frame(pkts[4][:40], 49153) // an ACK cut short
	badVer := frame(pkts[7], 49154)
	badVer[header.IPv4MinSize+header.UDPSize] = (wire.Version+1)<<4 | 7
	file := writeCapture(t, [][]byte{corrupt, short, badVer})
	rows := fields(t, file, "metaroce.crc.status", "_ws.expert.message")
	want := [][]string{
		{"0", "Retransmission,CRC32C check failed (corrupted packet)"},
		{"", "Packet shorter than its type's header and trailer"},
		{"", "Unsupported MetaRoCE version"},
	}
	if d := cmp.Diff(want, rows); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}

// TestDissectGarbage: truncated, bit-flipped and random MetaRoCE payloads
// are reported by the dissector's own expert items, never by a Lua error,
// a dissector bug or an exception (which tshark shows as "[Malformed
// Packet").
func TestDissectGarbage(t *testing.T) {
	tshark(t)
	pkts, _ := everyType()
	rng := rand.New(rand.NewPCG(1, 2))
	var framed [][]byte
	for _, p := range pkts {
		sealed := make([]byte, len(p)+wire.TrailerSize)
		copy(sealed, p)
		wire.Seal(sealed, len(p))
		// Every truncation of the first 80 bytes (an empty UDP payload
		// reaches no dissector).
		for n := 1; n < min(len(sealed), 80); n++ {
			framed = append(framed, udpFrame(sealed[:n]))
		}
		// Bit flips anywhere, including the version/type byte.
		for i := 0; i < 20; i++ {
			m := append([]byte(nil), sealed...)
			m[rng.IntN(len(m))] ^= 1 << rng.IntN(8)
			framed = append(framed, udpFrame(m))
		}
	}
	for i := 0; i < 200; i++ {
		b := make([]byte, 1+rng.IntN(200))
		for j := range b {
			b[j] = byte(rng.Uint32())
		}
		if len(b) > 0 && i%2 == 0 {
			b[0] = wire.Version<<4 | byte(rng.IntN(16)) // this version, any type
		}
		framed = append(framed, udpFrame(b))
	}
	file := writeCapture(t, framed)
	verbose := runTshark(t, file, "-V")
	for _, bad := range []string{"Lua Error", "Dissector bug", "[Malformed Packet"} {
		if i := strings.Index(verbose, bad); i >= 0 {
			t.Fatalf("tshark reports %q:\n%s", bad, verbose[max(0, i-2500):min(len(verbose), i+300)])
		}
	}
	if got := strings.Count(verbose, "MetaRoCE (mrlab wire format)"); got != len(framed) {
		t.Errorf("%d MetaRoCE trees for %d packets", got, len(framed))
	}
}

// udpFrame wraps raw bytes (a MetaRoCE payload, valid or not) in IPv4/UDP
// to the MetaRoCE port.
func udpFrame(pl []byte) []byte {
	n := header.IPv4MinSize + header.UDPSize + len(pl)
	b := make([]byte, n)
	header.IPv4(b).Encode(&header.IPv4Fields{TotalLength: uint16(n), Protocol: header.IPv4ProtoUDP,
		Src: netip.MustParseAddr("198.18.0.1"), Dst: netip.MustParseAddr("198.18.0.2")})
	header.UDP(b[header.IPv4MinSize:]).Encode(50000, wire.UDPPort, len(pl))
	copy(b[header.IPv4MinSize+header.UDPSize:], pl)
	return b
}
