package prototrace

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
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

// ErrBadFilter is wrapped by every ParseFilter error.
var ErrBadFilter = errors.New("bad trace filter")

// ParseFilter parses the --trace-filter syntax: comma-separated terms
//
//	host=h3  conn=4  path=9  grep=SACK  re=entropy \d+ -> \d+
//
// Repeating host, conn or path widens that term (h3 or h7); re= takes the
// rest of the string, commas included, so it must come last.
func ParseFilter(s string) (Filter, error) {
	var f Filter
	for s != "" {
		term := s
		if strings.HasPrefix(s, "re=") {
			s = ""
		} else if i := strings.IndexByte(s, ','); i >= 0 {
			term, s = s[:i], s[i+1:]
		} else {
			s = ""
		}
		term = strings.TrimSpace(term)
		if term == "" {
			continue
		}
		k, v, ok := strings.Cut(term, "=")
		if !ok || v == "" {
			return f, fmt.Errorf("%w: term %q: want key=value (host, conn, path, grep, re)", ErrBadFilter, term)
		}
		switch k {
		case "host":
			f.Hosts = append(f.Hosts, v)
		case "conn":
			n, err := strconv.ParseUint(v, 10, 32)
			if err != nil {
				return f, fmt.Errorf("%w: conn=%q: want a connection id", ErrBadFilter, v)
			}
			f.Conns = append(f.Conns, uint32(n))
		case "path":
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return f, fmt.Errorf("%w: path=%q: want a path index", ErrBadFilter, v)
			}
			f.Paths = append(f.Paths, n)
		case "grep":
			f.Contains = v
		case "re":
			re, err := regexp.Compile(v)
			if err != nil {
				return f, fmt.Errorf("%w: re=%q: %w", ErrBadFilter, v, err)
			}
			f.Match = re
		default:
			return f, fmt.Errorf("%w: unknown key %q in %q (want host, conn, path, grep, re)", ErrBadFilter, k, term)
		}
	}
	return f, nil
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
