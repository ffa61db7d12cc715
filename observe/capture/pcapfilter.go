package capture

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/mrlab/mrlab/observe/filter"
)

// A capture filter may also be written as tcpdump and tshark's -f take it
// (pcap-filter(7)), for the primitives a lab's packets need:
//
//	udp port 4791    port 4791 or port 4792    host h3 and udp port 4791
//	host 198.18.0.4  udp    ip
//
// These are translated to the Filter above, not compiled to BPF: libpcap
// would need cgo, and a lab's packets are IPv4 (and mostly UDP) anyway.
// Primitives are joined with "and"; "or" joins primitives of one kind
// (host or port), optionally in parentheses. Anything else (src, dst,
// not, tcp, net, byte offsets...) is refused with the word it stopped at,
// never read as something wider.

// isPcapFilter says s is written in pcap's syntax rather than key=value.
func isPcapFilter(s string) bool {
	return s != "" && !strings.Contains(s, "=")
}

// parsePcapFilter translates a pcap-filter(7) expression of the supported
// primitives.
func parsePcapFilter(s string, hostAddr func(name string) (netip.Addr, bool)) (*Filter, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %q: %s (pcap syntax: host H, port N, udp [port N], ip, joined by and; or between hosts or between ports; or mrlab's host=, conn=, path=, port=)",
			filter.ErrBadFilter, s, fmt.Sprintf(format, args...))
	}
	f := &Filter{}
	words := strings.Fields(strings.NewReplacer("(", " ( ", ")", " ) ").Replace(s))
	for _, conj := range splitWords(words, "and", "&&") {
		if len(conj) >= 2 && conj[0] == "(" && conj[len(conj)-1] == ")" {
			conj = conj[1 : len(conj)-1]
		}
		alts := splitWords(conj, "or", "||")
		kind := ""
		for _, p := range alts {
			if len(p) == 0 {
				return nil, bad("an empty term")
			}
			if p[0] == "udp" {
				if len(p) == 1 {
					if len(alts) > 1 {
						return nil, bad("udp in an or")
					}
					f.UDP = true
					continue
				}
				p = p[1:] // udp port N: ports are UDP's
			}
			var k string
			switch {
			case len(p) == 1 && p[0] == "ip":
				if len(alts) > 1 {
					return nil, bad("ip in an or")
				}
				continue // every packet of a lab is IPv4
			case len(p) == 2 && p[0] == "port":
				n, err := strconv.ParseUint(p[1], 10, 16)
				if err != nil {
					return nil, bad("port %q: want 0..65535", p[1])
				}
				f.Ports = append(f.Ports, uint16(n))
				k = "port"
			case len(p) == 2 && p[0] == "host":
				a, err := netip.ParseAddr(p[1])
				if err != nil {
					var found bool
					if hostAddr != nil {
						a, found = hostAddr(p[1])
					}
					if !found {
						return nil, bad("host %q: not an IPv4 address or a host of the lab", p[1])
					}
				}
				if !a.Is4() {
					return nil, bad("host %q: not IPv4", p[1])
				}
				f.Hosts = append(f.Hosts, a)
				k = "host"
			default:
				return nil, bad("unsupported at %q", strings.Join(p, " "))
			}
			if kind != "" && kind != k {
				return nil, bad("or between a %s and a %s (it would widen the filter; mrlab's filters and their terms)", kind, k)
			}
			kind = k
		}
	}
	return f, nil
}

// splitWords splits words at any of the separators (at the top level of
// parentheses).
func splitWords(words []string, seps ...string) [][]string {
	var out [][]string
	cur := []string{}
	depth := 0
	for _, w := range words {
		switch {
		case w == "(":
			depth++
		case w == ")":
			depth--
		}
		if depth == 0 && (w == seps[0] || w == seps[1]) {
			out = append(out, cur)
			cur = []string{}
			continue
		}
		cur = append(cur, w)
	}
	return append(out, cur)
}
