package capture

import (
	"bytes"
	"errors"
	"io"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/mrlab/mrlab/internal/header"
	"github.com/mrlab/mrlab/internal/sim"
)

// udpPacket builds an IPv4/UDP packet with payload.
func udpPacket(src, dst string, sport, dport uint16, payload []byte) []byte {
	n := header.IPv4MinSize + header.UDPSize + len(payload)
	b := make([]byte, n)
	header.IPv4(b).Encode(&header.IPv4Fields{TotalLength: uint16(n), Protocol: header.IPv4ProtoUDP,
		Src: netip.MustParseAddr(src), Dst: netip.MustParseAddr(dst)})
	header.UDP(b[header.IPv4MinSize:]).Encode(sport, dport, len(payload))
	copy(b[header.IPv4MinSize+header.UDPSize:], payload)
	return b
}

func TestWriterRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewWriter(&buf, "mrlab test")
	if err != nil {
		t.Fatal(err)
	}
	i0, _ := w.AddInterface(Interface{Name: "h0:0 tx", Description: "first"})
	i1, _ := w.AddInterface(Interface{Name: "h0:0 rx"})
	recs := []Record{
		{Iface: i0, Time: 12301, Data: udpPacket("198.18.0.1", "198.18.0.2", 49152, 53791, []byte("abc")), Flags: DirOutbound, PacketID: 7},
		{Iface: i1, Time: 1<<33 + 5, Data: udpPacket("198.18.0.2", "198.18.0.1", 49153, 53791, nil), Flags: DirInbound,
			Comment: []byte("dropped: queue full at p0-leaf0-spine1 (a->b)")},
		{Iface: i0, Time: 99, Data: []byte{1, 2, 3, 4, 5}, OrigLen: 9},
	}
	for i := range recs {
		if err := w.WritePacket(&recs[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.WriteStats(i0, Stats{Start: 1, End: 2, Received: 3, Lost: 1, Comment: "fabric dropped 1"}); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	raw := buf.Bytes()

	r, got, err := ReadAll(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	if r.Application != "mrlab test" {
		t.Errorf("application %q", r.Application)
	}
	wantIfaces := []ReadInterface{
		{LinkType: LinkTypeIPv4, Name: "h0:0 tx", Description: "first", TsResol: 9},
		{LinkType: LinkTypeIPv4, Name: "h0:0 rx", TsResol: 9},
	}
	if d := cmp.Diff(wantIfaces, r.Interfaces()); d != "" {
		t.Errorf("interfaces (-want +got):\n%s", d)
	}
	var want []Packet
	for _, rc := range recs {
		ol := rc.OrigLen
		if ol == 0 {
			ol = len(rc.Data)
		}
		want = append(want, Packet{Iface: rc.Iface, Time: rc.Time, Data: rc.Data, OrigLen: ol, Flags: rc.Flags,
			PacketID: rc.PacketID, Comment: string(rc.Comment)})
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("packets (-want +got):\n%s", d)
	}

	// gopacket's reader must agree on data, timestamps and link type.
	ng, err := pcapgo.NewNgReader(bytes.NewReader(raw), pcapgo.DefaultNgReaderOptions)
	if err != nil {
		t.Fatal(err)
	}
	if ng.LinkType() != layers.LinkTypeIPv4 {
		t.Errorf("pcapgo link type %v", ng.LinkType())
	}
	for i, rc := range recs {
		data, ci, err := ng.ReadPacketData()
		if err != nil {
			t.Fatalf("pcapgo packet %d: %v", i, err)
		}
		if !bytes.Equal(data, rc.Data) || ci.Timestamp.UnixNano() != int64(rc.Time) || ci.InterfaceIndex != rc.Iface {
			t.Errorf("pcapgo packet %d: data %x ts %d iface %d", i, data, ci.Timestamp.UnixNano(), ci.InterfaceIndex)
		}
	}
	if _, _, err := ng.ReadPacketData(); !errors.Is(err, io.EOF) {
		t.Errorf("pcapgo after last packet: %v", err)
	}
}

func TestWriterErrors(t *testing.T) {
	w, _ := NewWriter(io.Discard, "")
	if err := w.WritePacket(&Record{Iface: 0}); err == nil {
		t.Error("packet on undeclared interface accepted")
	}
	if err := w.WriteStats(3, Stats{}); err == nil {
		t.Error("stats on undeclared interface accepted")
	}
	// A long comment is truncated, not a failure.
	id, _ := w.AddInterface(Interface{Name: "x"})
	if err := w.WritePacket(&Record{Iface: id, Data: []byte{1}, Comment: bytes.Repeat([]byte("x"), 5000)}); err != nil {
		t.Error(err)
	}
	// Write errors stick.
	fw, _ := NewWriter(failWriter{}, "")
	id, _ = fw.AddInterface(Interface{Name: "x"})
	for i := 0; i < 5000 && fw.Err() == nil; i++ {
		fw.WritePacket(&Record{Iface: id, Data: make([]byte, 100)})
	}
	if fw.Err() == nil || fw.Flush() == nil {
		t.Error("write error not reported")
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestReaderRejects(t *testing.T) {
	var good bytes.Buffer
	w, _ := NewWriter(&good, "x")
	id, _ := w.AddInterface(Interface{Name: "i"})
	w.WritePacket(&Record{Iface: id, Data: []byte{1, 2, 3}})
	w.Flush()
	g := good.Bytes()
	cases := []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"pcap not pcapng", []byte{0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0, 0, 0, 0, 0}},
		{"truncated block", g[:len(g)-3]},
		{"bad magic", append(append([]byte{}, g[:8]...), append([]byte{1, 2, 3, 4}, g[12:]...)...)},
		{"huge length", append(append([]byte{}, g[:4]...), append([]byte{0xff, 0xff, 0xff, 0x7f}, g[8:]...)...)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := ReadAll(bytes.NewReader(tc.b)); err == nil {
				t.Error("no error")
			}
		})
	}
}

func TestWritePacketNoAllocs(t *testing.T) {
	w, _ := NewWriter(io.Discard, "")
	id, _ := w.AddInterface(Interface{Name: "x"})
	data := udpPacket("198.18.0.1", "198.18.0.2", 1, 2, make([]byte, 1000))
	com := []byte("CE marked at l0 (a->b)")
	r := Record{Iface: id, Data: data, PacketID: 3, Comment: com, Flags: DirInbound}
	allocs := testing.AllocsPerRun(1000, func() {
		r.Time += sim.Microsecond
		w.WritePacket(&r)
	})
	if allocs != 0 {
		t.Errorf("WritePacket allocates %v times per packet", allocs)
	}
}

func FuzzReader(f *testing.F) {
	var buf bytes.Buffer
	w, _ := NewWriter(&buf, "seed")
	id, _ := w.AddInterface(Interface{Name: "i", Description: "d"})
	w.WritePacket(&Record{Iface: id, Time: 5, Data: []byte{1, 2, 3}, Comment: []byte("c"), PacketID: 9})
	w.WriteStats(id, Stats{End: 9})
	w.Flush()
	f.Add(buf.Bytes())
	f.Add([]byte{0x0a, 0x0d, 0x0d, 0x0a, 28, 0, 0, 0, 0x4d, 0x3c, 0x2b, 0x1a})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, pkts, err := ReadAll(bytes.NewReader(b))
		if err != nil {
			return
		}
		for _, p := range pkts {
			if p.Iface < 0 || p.Iface >= len(r.Interfaces()) {
				t.Fatalf("packet on interface %d of %d", p.Iface, len(r.Interfaces()))
			}
		}
	})
}

func BenchmarkWritePacket(b *testing.B) {
	w, _ := NewWriter(io.Discard, "")
	id, _ := w.AddInterface(Interface{Name: "x"})
	r := Record{Iface: id, Data: udpPacket("198.18.0.1", "198.18.0.2", 1, 2, make([]byte, 4152)), PacketID: 3}
	b.SetBytes(int64(len(r.Data)))
	b.ReportAllocs()
	for b.Loop() {
		w.WritePacket(&r)
	}
}
