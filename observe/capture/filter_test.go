package capture

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/mrlab/mrlab/observe/filter"
	"github.com/mrlab/mrlab/transport/metaroce/wire"
)

// mrPacket is a MetaRoCE-shaped packet: path id and destination connection
// id at their header offsets.
func mrPacket(src, dst string, sport uint16, path uint8, conn uint32) []byte {
	pl := make([]byte, 32)
	wire.Header(pl).Put(&wire.Common{Type: wire.TypeWrite, Path: path, DstConn: conn})
	return udpPacket(src, dst, sport, metaRoCEPort, pl)
}

func rocePacket(src, dst string, qp uint32) []byte {
	bth := make([]byte, 12)
	bth[5], bth[6], bth[7] = byte(qp>>16), byte(qp>>8), byte(qp)
	return udpPacket(src, dst, 49152, roceV2Port, bth)
}

// icmpPacket is an IPv4 packet that is not UDP.
func icmpPacket(src, dst string) []byte {
	p := udpPacket(src, dst, 0, 0, []byte{8, 0, 0, 0})
	p[9] = 1 // protocol: ICMP
	return p
}

func TestFilterMatch(t *testing.T) {
	names := map[string]netip.Addr{"h0": netip.MustParseAddr("198.18.0.1"), "h1": netip.MustParseAddr("198.18.0.2")}
	resolve := func(n string) (netip.Addr, bool) { a, ok := names[n]; return a, ok }
	pkts := map[string][]byte{
		"mr h0->h1 path 9 conn 4":  mrPacket("198.18.0.1", "198.18.0.2", 50000, 9, 4),
		"mr h1->h0 path 9 conn 7":  mrPacket("198.18.0.2", "198.18.0.1", 50001, 9, 7),
		"mr h0->h2 path 3 conn 4":  mrPacket("198.18.0.1", "198.18.0.3", 50002, 3, 4),
		"roce h2->h3 qp 4":         rocePacket("198.18.0.3", "198.18.0.4", 4),
		"udp h2->h3 other port":    udpPacket("198.18.0.3", "198.18.0.4", 1000, 53, []byte("dns?")),
		"truncated mr h0->h1 conn": udpPacket("198.18.0.1", "198.18.0.2", 1, metaRoCEPort, []byte{1, 2}),
		"not even ip":              {0x45, 0},
		"icmp h0->h1":              icmpPacket("198.18.0.1", "198.18.0.2"),
	}
	cases := []struct {
		filter string
		want   []string
	}{
		{"", []string{"mr h0->h1 path 9 conn 4", "mr h1->h0 path 9 conn 7", "mr h0->h2 path 3 conn 4", "roce h2->h3 qp 4",
			"udp h2->h3 other port", "truncated mr h0->h1 conn", "not even ip", "icmp h0->h1"}},
		{"host=h1", []string{"mr h0->h1 path 9 conn 4", "mr h1->h0 path 9 conn 7", "truncated mr h0->h1 conn", "icmp h0->h1"}},
		{"host=198.18.0.4", []string{"roce h2->h3 qp 4", "udp h2->h3 other port"}},
		{"conn=4", []string{"mr h0->h1 path 9 conn 4", "mr h0->h2 path 3 conn 4", "roce h2->h3 qp 4"}},
		{"conn=4,conn=7,path=9", []string{"mr h0->h1 path 9 conn 4", "mr h1->h0 path 9 conn 7"}},
		{"host=h0,conn=4,host=h1", []string{"mr h0->h1 path 9 conn 4", "mr h0->h2 path 3 conn 4"}},
		{"port=53", []string{"udp h2->h3 other port"}},
		{"port=50001", []string{"mr h1->h0 path 9 conn 7"}},
		// pcap-filter(7)'s spelling, as tshark -f and tcpdump take it.
		{"udp port 4791", []string{"roce h2->h3 qp 4"}},
		{"port 4791 or port 53", []string{"roce h2->h3 qp 4", "udp h2->h3 other port"}},
		{"host h1 and udp", []string{"mr h0->h1 path 9 conn 4", "mr h1->h0 path 9 conn 7", "truncated mr h0->h1 conn"}},
		{"host h1", []string{"mr h0->h1 path 9 conn 4", "mr h1->h0 path 9 conn 7", "truncated mr h0->h1 conn", "icmp h0->h1"}},
		{"ip and (host 198.18.0.3 or host h1) and udp port 50002", []string{"mr h0->h2 path 3 conn 4"}},
		{"udp", []string{"mr h0->h1 path 9 conn 4", "mr h1->h0 path 9 conn 7", "mr h0->h2 path 3 conn 4", "roce h2->h3 qp 4",
			"udp h2->h3 other port", "truncated mr h0->h1 conn"}},
	}
	for _, tc := range cases {
		t.Run(tc.filter, func(t *testing.T) {
			f, err := ParseFilter(tc.filter, resolve)
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]bool{}
			for _, w := range tc.want {
				want[w] = true
			}
			for name, p := range pkts {
				if got := f.Match(p); got != want[name] {
					t.Errorf("%s: match %v, want %v", name, got, want[name])
				}
			}
		})
	}
}

func TestParseFilterErrors(t *testing.T) {
	for _, s := range []string{"host", "host=h9", "conn=-1", "path=256", "port=70000", "color=red", "host=::1",
		"tcp port 80", "src host h0", "not port 53", "host h0 or port 53", "port 70000", "host ::1", "udp or port 4", "port 4791 and", "host h9"} {
		if _, err := ParseFilter(s, nil); !errors.Is(err, filter.ErrBadFilter) {
			t.Errorf("ParseFilter(%q) = %v, want ErrBadFilter", s, err)
		}
	}
}

func TestFilterNoAllocs(t *testing.T) {
	f, _ := ParseFilter("host=198.18.0.1,conn=4,path=9", nil)
	p := mrPacket("198.18.0.1", "198.18.0.2", 50000, 9, 4)
	if a := testing.AllocsPerRun(100, func() { f.Match(p) }); a != 0 {
		t.Errorf("Match allocates %v", a)
	}
}

func FuzzFilterMatch(f *testing.F) {
	f.Add(mrPacket("198.18.0.1", "198.18.0.2", 50000, 9, 4))
	f.Add(rocePacket("198.18.0.3", "198.18.0.4", 4))
	f.Add([]byte{0x4f, 0, 0, 20})
	flt, _ := ParseFilter("host=198.18.0.1,conn=4,path=9,port=50000", nil)
	f.Fuzz(func(t *testing.T, b []byte) {
		flt.Match(b)
	})
}

// FuzzParseFilter: any string parses or is refused with ErrBadFilter,
// never panics, in either syntax.
func FuzzParseFilter(f *testing.F) {
	for _, s := range []string{"udp port 4791", "host h0 and (port 1 or port 2)", "host=h0,port=4", "((", "or", "and and", "udp or"} {
		f.Add(s)
	}
	resolve := func(n string) (netip.Addr, bool) { return netip.MustParseAddr("198.18.0.1"), n == "h0" }
	f.Fuzz(func(t *testing.T, s string) {
		if _, err := ParseFilter(s, resolve); err != nil && !errors.Is(err, filter.ErrBadFilter) {
			t.Errorf("ParseFilter(%q): %v, not ErrBadFilter", s, err)
		}
	})
}
