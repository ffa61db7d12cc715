package prototrace

import (
	"bytes"
	"regexp"
	"slices"

	"github.com/mrlab/mrlab/observe/filter"
)

// Filter selects trace lines. Every non-empty field must match; the zero
// Filter passes everything.
type Filter struct {
	// Hosts keeps lines of connections with either end among these hosts
	// (the tracing host or its peer).
	Hosts []string
	// Conns keeps lines of these local connection ids.
	Conns []uint32
	// Paths keeps lines about these paths ("path N: ..." messages); lines
	// about no particular path are dropped when Paths is set.
	Paths []int
	// Contains keeps lines containing this substring.
	Contains string
	// Match keeps lines matching this regular expression.
	Match *regexp.Regexp
}

// ParseFilter parses the --trace-filter syntax (package filter's grammar)
// with the keys host, conn, path, grep and re:
//
//	host=h3  conn=4  path=9  grep=SACK  re=entropy \d+ -> \d+
//
// Errors wrap filter.ErrBadFilter.
func ParseFilter(s string) (Filter, error) {
	t, err := filter.Parse(s, filter.Host, filter.Conn, filter.Path, filter.Grep, filter.Re)
	if err != nil {
		return Filter{}, err
	}
	return Filter{Hosts: t.Hosts, Conns: t.Conns, Paths: t.Paths, Contains: t.Grep, Match: t.Re}, nil
}

// hostsOnly reports whether every line traced by host passes the host
// filter regardless of the peer.
func (f *Filter) hostsOnly(host string) bool {
	return len(f.Hosts) == 0 || slices.Contains(f.Hosts, host)
}

func (f *Filter) host(peer string) bool {
	return len(f.Hosts) == 0 || (peer != "" && slices.Contains(f.Hosts, peer))
}

func (f *Filter) conn(c uint32) bool {
	return len(f.Conns) == 0 || slices.Contains(f.Conns, c)
}

func (f *Filter) path(msg []byte) bool {
	if len(f.Paths) == 0 {
		return true
	}
	p, ok := pathPrefix(msg)
	return ok && slices.Contains(f.Paths, p)
}

func (f *Filter) text(line []byte) bool {
	if f.Contains != "" && !bytes.Contains(line, []byte(f.Contains)) {
		return false
	}
	return f.Match == nil || f.Match.Match(line)
}
