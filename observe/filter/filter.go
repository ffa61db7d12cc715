// Package filter is the one filter grammar of mrlab's observability tools:
// packet captures (--capture-filter, mrlab capture --filter) and protocol
// traces (--trace-filter, mrlab trace --filter) read the same terms.
//
// A filter is comma-separated key=value terms:
//
//	host=h3  host=198.18.0.4  conn=4  path=9  port=49213  grep=SACK  re=entropy \d+ -> \d+
//
// Every term given must match; repeating host, conn, path or port widens
// that term (h3 or h7). re= takes the rest of the string, commas included,
// so it comes last. Each tool accepts the keys that make sense for what it
// filters and names them when it refuses one.
package filter

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Key is one filter key.
type Key uint8

// Filter keys.
const (
	Host Key = iota // a host name or IPv4 address
	Conn            // a local connection id (MetaRoCE connection id, RoCEv2 QPN)
	Path            // a MetaRoCE path id, 0..255
	Port            // a UDP port, source or destination
	Grep            // a substring of a trace line
	Re              // a regular expression a trace line matches
	numKeys
)

var keyNames = [numKeys]string{"host", "conn", "path", "port", "grep", "re"}

// String returns the key as a filter spells it.
func (k Key) String() string {
	if k < numKeys {
		return keyNames[k]
	}
	return "key?"
}

// keySet is a set of keys.
type keySet uint8

func (s keySet) has(k Key) bool { return s&(1<<k) != 0 }

func (s keySet) String() string {
	var names []string
	for k := range numKeys {
		if s.has(k) {
			names = append(names, keyNames[k])
		}
	}
	return strings.Join(names, ", ")
}

// ErrBadFilter is wrapped by every Parse error.
var ErrBadFilter = errors.New("bad filter")

// Terms is a parsed filter: what its terms asked for, as written. A field
// whose key the filter did not use is empty.
type Terms struct {
	Hosts []string // names or addresses, unresolved
	Conns []uint32
	Paths []int
	Ports []uint16
	Grep  string
	Re    *regexp.Regexp
}

// Parse parses s, accepting only the allowed keys.
func Parse(s string, allowed ...Key) (Terms, error) {
	var ok keySet
	for _, k := range allowed {
		ok |= 1 << k
	}
	return parse(s, ok)
}

func parse(s string, allowed keySet) (Terms, error) {
	var t Terms
	for s != "" {
		term := s
		if strings.HasPrefix(strings.TrimLeft(s, " \t"), "re=") {
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
			return t, fmt.Errorf("%w: term %q: want key=value (%s)", ErrBadFilter, term, allowed)
		}
		key := lookup(k)
		if key == numKeys || !allowed.has(key) {
			return t, fmt.Errorf("%w: unknown key %q in %q (want %s)", ErrBadFilter, k, term, allowed)
		}
		if err := t.add(key, v); err != nil {
			return t, fmt.Errorf("%w: %s=%q: %w", ErrBadFilter, k, v, err)
		}
	}
	return t, nil
}

func lookup(name string) Key {
	for k := range numKeys {
		if keyNames[k] == name {
			return k
		}
	}
	return numKeys
}

// numeric are the keys whose values are numbers: how many bits they take
// and what to say when a value is not one.
var numeric = [numKeys]struct {
	bits int
	want string
}{
	Conn: {32, "want a connection id"},
	Path: {8, "want a path id 0..255"},
	Port: {16, "want a UDP port"},
}

// add records one term's value.
func (t *Terms) add(k Key, v string) error {
	var n uint64
	if num := numeric[k]; num.bits > 0 {
		var err error
		if n, err = strconv.ParseUint(v, 10, num.bits); err != nil {
			return errors.New(num.want)
		}
	}
	switch k {
	case Host:
		t.Hosts = append(t.Hosts, v)
	case Conn:
		t.Conns = append(t.Conns, uint32(n))
	case Path:
		t.Paths = append(t.Paths, int(n))
	case Port:
		t.Ports = append(t.Ports, uint16(n))
	case Grep:
		t.Grep = v
	case Re:
		re, err := regexp.Compile(v)
		if err != nil {
			return err
		}
		t.Re = re
	}
	return nil
}
