package labs

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/sim"
)

// nodeBudget bounds how many YAML nodes one Parse visits. Aliases let a
// few hundred bytes describe an exponentially large tree (the "billion
// laughs"); a real lab file is a few hundred nodes.
const nodeBudget = 200_000

// decoder walks a lab file's YAML tree. Every problem it finds is recorded
// with the position of the node at fault and the dotted path of the field;
// decoding carries on past a problem so one run reports them all.
type decoder struct {
	errorList
	budget int
	// flags are the command-line overrides whose nodes carry line -(i+1)
	// (see Override): their problems name the flag, not a position.
	flags []string
}

func newDecoder(file string) *decoder {
	return &decoder{errorList: errorList{file: file}, budget: nodeBudget}
}

// errorf records a problem at node n.
func (d *decoder) errorf(n *yaml.Node, field, format string, args ...any) {
	line, col := 0, 0
	if n != nil {
		line, col = n.Line, n.Column
	}
	before := len(d.errs)
	d.add(line, col, field, format, args...)
	if len(d.errs) > before {
		d.flagged(d.errs, line)
	}
}

// warnf records a warning at node n.
func (d *decoder) warnf(n *yaml.Node, field, format string, args ...any) {
	line, col := 0, 0
	if n != nil {
		line, col = n.Line, n.Column
	}
	d.errorList.warnf(line, col, field, format, args...)
	d.flagged(d.warns, line)
}

// flagged attributes the last of es to an override's flag when line says
// the node came from one.
func (d *decoder) flagged(es []*Error, line int) {
	if i := -line - 1; line < 0 && i < len(d.flags) && len(es) > 0 {
		e := es[len(es)-1]
		e.Flag, e.Line, e.Col = d.flags[i], 0, 0
	}
}

// deref follows aliases and charges the node budget. It returns nil when
// the budget is spent (and says so once).
func (d *decoder) deref(n *yaml.Node) *yaml.Node {
	for hops := 0; n != nil && n.Kind == yaml.AliasNode; hops++ {
		if hops > 100 {
			return nil
		}
		n = n.Alias
	}
	d.budget--
	if d.budget == 0 {
		d.errorf(n, "", "document too large (more than %d nodes after expanding aliases)", nodeBudget)
	}
	if d.budget <= 0 {
		return nil
	}
	return n
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func index(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }

// kindName names a node's kind for "want X, got Y" messages.
func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if isNull(n) {
			return "nothing"
		}
		return fmt.Sprintf("%q", n.Value)
	}
	return "something else"
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// pair is one key/value of a mapping.
type pair struct{ key, val *yaml.Node }

// pairs returns the key/value pairs of mapping n with merge keys ("<<")
// expanded: merged keys come first and explicit keys replace them. It
// reports duplicate explicit keys and non-string keys.
func (d *decoder) pairs(n *yaml.Node, path string) []pair {
	var merged, own []pair
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := d.deref(n.Content[i]), n.Content[i+1]
		if k == nil {
			return nil
		}
		if k.Kind != yaml.ScalarNode {
			d.errorf(k, path, "a key must be a plain string, not %s", kindName(k))
			continue
		}
		if k.ShortTag() == "!!merge" {
			merged = append(merged, d.mergePairs(v, path)...)
			continue
		}
		own = append(own, pair{k, v})
	}
	seen := make(map[string]bool, len(own))
	for _, p := range own {
		if seen[p.key.Value] {
			d.errorf(p.key, join(path, p.key.Value), "duplicate key")
		}
		seen[p.key.Value] = true
	}
	out := make([]pair, 0, len(merged)+len(own))
	for _, p := range merged {
		if !seen[p.key.Value] {
			seen[p.key.Value] = true
			out = append(out, p)
		}
	}
	return append(out, own...)
}

// mergePairs expands a merge key's value: a mapping or a list of mappings.
func (d *decoder) mergePairs(v *yaml.Node, path string) []pair {
	v = d.deref(v)
	if v == nil {
		return nil
	}
	switch v.Kind {
	case yaml.MappingNode:
		return d.pairs(v, path)
	case yaml.SequenceNode:
		var out []pair
		for _, m := range v.Content {
			out = append(out, d.mergePairs(m, path)...)
		}
		return out
	}
	d.errorf(v, path, "a merge key (<<) needs a mapping, got %s", kindName(v))
	return nil
}

// fieldFunc decodes the value of one known key; path is the key's full path.
type fieldFunc func(v *yaml.Node, path string)

// mapping decodes mapping n, calling fields[key] for every key in file
// order, and reports unknown keys at the key's position. It returns the
// known keys present (valid or not: a bad value is reported by its
// fieldFunc, and must not also be reported missing), or nil (after
// reporting) if n is not a mapping.
func (d *decoder) mapping(n *yaml.Node, path string, fields map[string]fieldFunc) map[string]bool {
	n = d.deref(n)
	if n == nil {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		d.errorf(n, path, "want a mapping (key: value, ...), got %s", kindName(n))
		return nil
	}
	present := map[string]bool{}
	for _, p := range d.pairs(n, path) {
		f, ok := fields[p.key.Value]
		if !ok {
			names := make([]string, 0, len(fields))
			for k := range fields {
				names = append(names, k)
			}
			d.errorf(p.key, join(path, p.key.Value), "unknown field%s (want one of %s)", suggest(p.key.Value, names), keyList(fields))
			continue
		}
		present[p.key.Value] = true
		f(p.val, join(path, p.key.Value))
	}
	return present
}

func keyList(fields map[string]fieldFunc) string {
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return strings.Join(keys, ", ")
}

// list decodes sequence n, calling f for every element.
func (d *decoder) list(n *yaml.Node, path string, f func(i int, v *yaml.Node, path string)) {
	n = d.deref(n)
	if n == nil {
		return
	}
	if isNull(n) {
		return // "faults:" with nothing after it is an empty list
	}
	if n.Kind != yaml.SequenceNode {
		d.errorf(n, path, "want a list, got %s", kindName(n))
		return
	}
	for i, v := range n.Content {
		f(i, v, index(path, i))
	}
}

// scalar returns n if it is a non-null scalar, and reports otherwise.
func (d *decoder) scalar(n *yaml.Node, path string) (*yaml.Node, bool) {
	n = d.deref(n)
	if n == nil {
		return nil, false
	}
	if n.Kind != yaml.ScalarNode {
		d.errorf(n, path, "want a single value, got %s", kindName(n))
		return nil, false
	}
	if isNull(n) {
		d.errorf(n, path, "missing value")
		return nil, false
	}
	return n, true
}

// str decodes a string.
func (d *decoder) str(n *yaml.Node, path string, dst *string) bool {
	s, ok := d.scalar(n, path)
	if ok {
		*dst = s.Value
	}
	return ok
}

// uint64 decodes an unsigned integer.
func (d *decoder) uint64(n *yaml.Node, path string, dst *uint64) bool {
	s, ok := d.scalar(n, path)
	if !ok {
		return false
	}
	v, err := strconv.ParseUint(s.Value, 0, 64)
	if err != nil {
		d.errorf(s, path, "%q is not an unsigned integer", s.Value)
		return false
	}
	*dst = v
	return true
}

// int decodes an integer in [lo, hi].
func (d *decoder) int(n *yaml.Node, path string, lo, hi int, dst *int) bool {
	s, ok := d.scalar(n, path)
	if !ok {
		return false
	}
	v, err := strconv.ParseInt(s.Value, 0, 64)
	if err != nil {
		d.errorf(s, path, "%q is not an integer", s.Value)
		return false
	}
	if v < int64(lo) || v > int64(hi) {
		d.errorf(s, path, "%d is out of range (want %d to %d)", v, lo, hi)
		return false
	}
	*dst = int(v)
	return true
}

// float decodes a number in [lo, hi].
func (d *decoder) float(n *yaml.Node, path string, lo, hi float64, dst *float64) bool {
	s, ok := d.scalar(n, path)
	if !ok {
		return false
	}
	v, err := strconv.ParseFloat(s.Value, 64)
	if err != nil || math.IsNaN(v) {
		d.errorf(s, path, "%q is not a number", s.Value)
		return false
	}
	if v < lo || v > hi {
		d.errorf(s, path, "%g is out of range (want %g to %g)", v, lo, hi)
		return false
	}
	*dst = v
	return true
}

// fraction decodes a probability written as 0.1 or "10%".
func (d *decoder) fraction(n *yaml.Node, path string, dst *float64) bool {
	return decodeScalar(d, n, path, dst, parseFraction, "")
}

// duration decodes a sim.Time ("2ms", "150us", "0").
func (d *decoder) duration(n *yaml.Node, path string, dst *sim.Time) bool {
	return decodeScalar(d, n, path, dst, sim.ParseTime, "a duration (want e.g. 2ms, 150us, 1.5s)")
}

// rate decodes a positive rate in tc's spelling ("100gbit", "5mbit").
func (d *decoder) rate(n *yaml.Node, path string, dst *float64) bool {
	s, ok := d.scalar(n, path)
	if !ok {
		return false
	}
	r, err := fabric.ParseRate(s.Value)
	if err != nil || r <= 0 {
		d.errorf(s, path, "%q is not a rate (want e.g. 100gbit, 25gbit, 400mbit)", s.Value)
		return false
	}
	if msg, ok := BytesRateNote(s.Value, r); ok {
		d.warnf(s, path, "%s", msg)
	}
	*dst = r
	return true
}

// size decodes a byte count ("512KiB", "1MB", "9000").
func (d *decoder) size(n *yaml.Node, path string, dst *int) bool {
	return decodeScalar(d, n, path, dst, ParseSize, "a size (want e.g. 512KiB, 1MB or plain bytes)")
}

// decodeScalar decodes a scalar with parse into dst. A value parse refuses
// is reported as "<value> is not <what>", or with parse's own message
// when what is empty.
func decodeScalar[T any](d *decoder, n *yaml.Node, path string, dst *T, parse func(string) (T, error), what string) bool {
	s, ok := d.scalar(n, path)
	if !ok {
		return false
	}
	v, err := parse(s.Value)
	if err != nil {
		if what == "" {
			d.errorf(s, path, "%v", err)
		} else {
			d.errorf(s, path, "%q is not %s", s.Value, what)
		}
		return false
	}
	*dst = v
	return true
}

// parseFraction parses "0.25" or "25%" into 0.25, which must be in [0, 1].
func parseFraction(s string) (float64, error) {
	t, pct := strings.CutSuffix(strings.TrimSpace(s), "%")
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || math.IsNaN(v) {
		return 0, fmt.Errorf("%q is not a probability (want e.g. 0.1 or 10%%)", s)
	}
	if pct {
		v /= 100
	}
	if v < 0 || v > 1 {
		return 0, fmt.Errorf("%q is out of range (want 0 to 1, or 0%% to 100%%)", s)
	}
	return v, nil
}
