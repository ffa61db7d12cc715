package capture

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/mrlab/mrlab/internal/header"
	"github.com/mrlab/mrlab/observe/filter"
	"github.com/mrlab/mrlab/transport/metaroce/wire"
)

// Filter selects packets by host, connection and path. Every non-empty
// field must match; the zero Filter matches every packet.
type Filter struct {
	// Hosts keeps packets from or to any of these addresses.
	Hosts []netip.Addr
	// Conns keeps transport packets addressed to any of these connection
	// ids: MetaRoCE's destination connection id, RoCEv2's destination QP.
	// A connection's two ends have their own ids; name both to see both
	// directions.
	Conns []uint32
	// Paths keeps MetaRoCE packets of these path ids (data on the path and
	// the ACKs for it).
	Paths []int
	// Ports keeps UDP packets with any of these source or destination
	// ports (a path's entropy is its source port).
	Ports []uint16
	// UDP keeps only UDP packets (pcap's "udp").
	UDP bool
}

var _ Matcher = (*Filter)(nil)

// ParseFilter parses the filter syntax of --capture-filter and `mrlab
// capture --filter` (package filter's grammar) with the keys host, conn,
// path and port:
//
//	host=h3  host=198.18.0.4  conn=4  path=9  port=49213
//
// or in pcap-filter(7)'s syntax for the primitives a lab needs, as tshark
// -f and tcpdump take it ("udp port 4791", "host h3 and port 4791"; see
// parsePcapFilter). hostAddr resolves host names (nil accepts addresses
// only). Errors wrap filter.ErrBadFilter.
func ParseFilter(s string, hostAddr func(name string) (netip.Addr, bool)) (*Filter, error) {
	if isPcapFilter(s) {
		return parsePcapFilter(s, hostAddr)
	}
	t, err := filter.Parse(s, filter.Host, filter.Conn, filter.Path, filter.Port)
	if err != nil {
		return nil, err
	}
	f := &Filter{Conns: t.Conns, Paths: t.Paths, Ports: t.Ports}
	for _, h := range t.Hosts {
		a, err := netip.ParseAddr(h)
		if err != nil {
			var found bool
			if hostAddr != nil {
				a, found = hostAddr(h)
			}
			if !found {
				return nil, fmt.Errorf("%w: host=%q: not an IPv4 address or a host of the lab", filter.ErrBadFilter, h)
			}
		}
		if !a.Is4() {
			return nil, fmt.Errorf("%w: host=%q: not IPv4", filter.ErrBadFilter, h)
		}
		f.Hosts = append(f.Hosts, a)
	}
	return f, nil
}

// Empty reports whether the filter matches everything.
func (f *Filter) Empty() bool {
	return len(f.Hosts) == 0 && len(f.Conns) == 0 && len(f.Paths) == 0 && len(f.Ports) == 0 && !f.UDP
}

// Transport ports the filter understands.
const (
	// metaRoCEPort is MetaRoCE's UDP destination port.
	metaRoCEPort = wire.UDPPort
	// roceV2Port is IANA's RoCEv2 port.
	roceV2Port = 4791
)

// MetaRoCE common-header offsets (from the start of the UDP payload) the
// filter reads, as wire.Header lays them out.
const (
	mrPathOff = 2
	mrConnOff = 4
	mrMinLen  = 8
)

// Match implements Matcher. It reads only IPv4, UDP and the first bytes of
// the transport header, and never allocates.
func (f *Filter) Match(ip []byte) bool {
	if f == nil || f.Empty() {
		return true
	}
	if len(ip) < header.IPv4MinSize {
		return false
	}
	v := header.IPv4(ip)
	if len(f.Hosts) > 0 {
		src, dst := v.Src(), v.Dst()
		if !slices.Contains(f.Hosts, src) && !slices.Contains(f.Hosts, dst) {
			return false
		}
	}
	if len(f.Conns) == 0 && len(f.Paths) == 0 && len(f.Ports) == 0 && !f.UDP {
		return true
	}
	hl := v.HeaderLength()
	if v.Protocol() != header.IPv4ProtoUDP || hl < header.IPv4MinSize || len(ip) < hl+header.UDPSize {
		return false
	}
	u := header.UDP(ip[hl:])
	sport, dport := u.SrcPort(), u.DstPort()
	if len(f.Ports) > 0 && !slices.Contains(f.Ports, sport) && !slices.Contains(f.Ports, dport) {
		return false
	}
	if len(f.Conns) == 0 && len(f.Paths) == 0 {
		return true
	}
	pl := ip[hl+header.UDPSize:]
	var conn uint32
	path := -1
	switch dport {
	case metaRoCEPort:
		if len(pl) < mrMinLen {
			return false
		}
		h := wire.Header(pl)
		conn, path = h.DstConn(), int(h.Path())
	case roceV2Port:
		if len(pl) < 8 {
			return false
		}
		conn = uint32(pl[5])<<16 | uint32(pl[6])<<8 | uint32(pl[7])
	default:
		return false
	}
	if len(f.Conns) > 0 && !slices.Contains(f.Conns, conn) {
		return false
	}
	return len(f.Paths) == 0 || slices.Contains(f.Paths, path)
}
