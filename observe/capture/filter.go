package capture

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/mrlab/mrlab/internal/header"
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
}

var _ Matcher = (*Filter)(nil)

// ErrBadFilter is wrapped by every ParseFilter error.
var ErrBadFilter = errors.New("bad capture filter")

// ParseFilter parses the filter syntax of --capture-filter and `mrlab
// capture --filter`: comma-separated terms, repeated keys widen the term:
//
//	host=h3  host=198.18.0.4  conn=4  path=9  port=49213
//
// hostAddr resolves host names (nil accepts addresses only).
func ParseFilter(s string, hostAddr func(name string) (netip.Addr, bool)) (*Filter, error) {
	f := &Filter{}
	for _, term := range strings.Split(s, ",") {
		term = strings.TrimSpace(term)
		if term == "" {
			continue
		}
		k, v, ok := strings.Cut(term, "=")
		if !ok || v == "" {
			return nil, fmt.Errorf("%w: term %q: want key=value (host, conn, path, port)", ErrBadFilter, term)
		}
		switch k {
		case "host":
			a, err := netip.ParseAddr(v)
			if err != nil {
				var found bool
				if hostAddr != nil {
					a, found = hostAddr(v)
				}
				if !found {
					return nil, fmt.Errorf("%w: host=%q: not an IPv4 address or a host of the lab", ErrBadFilter, v)
				}
			}
			if !a.Is4() {
				return nil, fmt.Errorf("%w: host=%q: not IPv4", ErrBadFilter, v)
			}
			f.Hosts = append(f.Hosts, a)
		case "conn":
			n, err := strconv.ParseUint(v, 10, 32)
			if err != nil {
				return nil, fmt.Errorf("%w: conn=%q: want a connection id", ErrBadFilter, v)
			}
			f.Conns = append(f.Conns, uint32(n))
		case "path":
			n, err := strconv.ParseUint(v, 10, 8)
			if err != nil {
				return nil, fmt.Errorf("%w: path=%q: want a path id 0..255", ErrBadFilter, v)
			}
			f.Paths = append(f.Paths, int(n))
		case "port":
			n, err := strconv.ParseUint(v, 10, 16)
			if err != nil {
				return nil, fmt.Errorf("%w: port=%q: want a UDP port", ErrBadFilter, v)
			}
			f.Ports = append(f.Ports, uint16(n))
		default:
			return nil, fmt.Errorf("%w: unknown key %q in %q (want host, conn, path, port)", ErrBadFilter, k, term)
		}
	}
	return f, nil
}

// Empty reports whether the filter matches everything.
func (f *Filter) Empty() bool {
	return len(f.Hosts) == 0 && len(f.Conns) == 0 && len(f.Paths) == 0 && len(f.Ports) == 0
}

// Transport ports the filter understands.
const (
	// MetaRoCEPort is MetaRoCE's UDP destination port.
	MetaRoCEPort = wire.UDPPort
	// RoCEv2Port is IANA's RoCEv2 port.
	RoCEv2Port = 4791
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
	if len(f.Conns) == 0 && len(f.Paths) == 0 && len(f.Ports) == 0 {
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
	case MetaRoCEPort:
		if len(pl) < mrMinLen {
			return false
		}
		h := wire.Header(pl)
		conn, path = h.DstConn(), int(h.Path())
	case RoCEv2Port:
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
