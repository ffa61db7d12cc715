package labs

import (
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// An Override changes a lab from the command line: mrlab sim's --set,
// --impair and --fault. Each edits the lab file's YAML tree before it is
// decoded, so the result is checked exactly as the file is, and an error in
// what an override wrote names the flag instead of a file position:
//
//	--set links.default.rate=10gbt: links.default.rate: "10gbt" is not a rate (want e.g. 100gbit, ...)
//
// --set works on the tree, not on a list of known keys, so it reaches every
// key a lab file has, including keys added to lab files later.
type Override struct {
	// Flag is the override as the user wrote it, for errors.
	Flag string
	// edit changes the tree (root is the document's top mapping); mark
	// gives the nodes it creates their flag position.
	edit func(root *yaml.Node, mark func(*yaml.Node), l *Lab) error
	// needsLab: edit needs the lab as parsed without this override (the
	// links of a plane).
	needsLab bool
	// Faults counts the faults the override appends to the timeline.
	Faults int
}

// SetOverride is --set KEY=VALUE: KEY is a dotted path into the lab file
// (links.default.rate, topology.leafspine.planes, faults[0].at) and VALUE
// is YAML (10gbit, or a flow mapping such as {step: 64KiB}). Missing
// mappings along the path are created; list items must exist.
func SetOverride(flag, key, value string) (Override, error) {
	steps, err := parseKeyPath(key)
	if err != nil {
		return Override{}, fmt.Errorf("%s: %w", flag, err)
	}
	val, err := yamlValue(value)
	if err != nil {
		return Override{}, fmt.Errorf("%s: value %q: %w", flag, value, err)
	}
	return Override{Flag: flag, edit: func(root *yaml.Node, mark func(*yaml.Node), _ *Lab) error {
		v := cloneNode(val)
		mark(v)
		return setPath(root, steps, v, mark)
	}}, nil
}

// ImpairOverride is --impair TARGET=NETEM: TARGET is all (the lab-wide
// impair), host or fabric (that class of links), plane:N (every link of
// plane N), or a link name, optionally with :ab or :ba for one direction
// (applied as an impair fault at time 0, since a link's own impairment is
// both directions).
func ImpairOverride(flag, target, netem string) (Override, error) {
	o := Override{Flag: flag}
	text := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: netem}
	scalar := func(mark func(*yaml.Node)) *yaml.Node {
		v := cloneNode(text)
		mark(v)
		return v
	}
	switch {
	case target == "all":
		o.edit = func(root *yaml.Node, mark func(*yaml.Node), _ *Lab) error {
			return setPath(root, keys("impair"), scalar(mark), mark)
		}
	case target == "host" || target == "fabric":
		o.edit = func(root *yaml.Node, mark func(*yaml.Node), _ *Lab) error {
			return setPath(root, keys("links", target, "impair"), scalar(mark), mark)
		}
	case strings.HasPrefix(target, "plane:"):
		plane, err := strconv.Atoi(strings.TrimPrefix(target, "plane:"))
		if err != nil || plane < 0 {
			return o, fmt.Errorf("%s: %q: want plane:N with N a plane number", flag, target)
		}
		o.needsLab = true
		o.edit = func(root *yaml.Node, mark func(*yaml.Node), l *Lab) error {
			var names []string
			for _, k := range l.topo.Links {
				if p, ok := l.LinkPlanes()[k.Name]; ok && p == plane {
					names = append(names, k.Name)
				}
			}
			if len(names) == 0 {
				return fmt.Errorf("%s: lab %s has no links in plane %d", flag, l.Name, plane)
			}
			for _, name := range names {
				item := mapping(mark, "link", name, "impair", netem)
				if err := appendItem(root, keys("links", "overrides"), item, mark); err != nil {
					return err
				}
			}
			return nil
		}
	default:
		link, dir, hasDir := strings.Cut(target, ":")
		if link == "" {
			return o, fmt.Errorf("%s: want LINK[:ab|ba]=NETEM, all=, host=, fabric= or plane:N=", flag)
		}
		if !hasDir {
			o.edit = func(root *yaml.Node, mark func(*yaml.Node), _ *Lab) error {
				item := mapping(mark, "link", link, "impair", netem)
				return appendItem(root, keys("links", "overrides"), item, mark)
			}
			break
		}
		d, err := ParseDir(dir)
		if err != nil || d == DirBoth {
			return o, fmt.Errorf("%s: direction %q: want ab or ba (leave it out for both)", flag, dir)
		}
		o.Faults = 1
		o.edit = func(root *yaml.Node, mark func(*yaml.Node), _ *Lab) error {
			item := mapping(mark, "at", "0", "link", link, "action", "impair", "impair", netem, "dir", d.String())
			return appendItem(root, keys("faults"), item, mark)
		}
	}
	return o, nil
}

// FaultOverride is --fault 'AT TARGET NAME ACTION [NETEM] [dir ab|ba]': a
// fault in the words of a lab file's fault entry (its String form), e.g.
// "2ms link p0-leaf0-spine0 down", "1ms plane 1 down", "500us link h0-p0
// impair loss 5% dir ab". It is appended to the timeline.
func FaultOverride(flag, text string) (Override, error) {
	w := strings.Fields(text)
	if len(w) < 4 {
		return Override{}, fmt.Errorf("%s: want AT TARGET NAME ACTION [NETEM], e.g. '2ms link p0-leaf0-spine0 down' or '1ms plane 1 down'", flag)
	}
	kv := []string{"at", w[0], w[1], w[2], "action", w[3]}
	rest := w[4:]
	if n := len(rest); n >= 2 && rest[n-2] == "dir" {
		kv = append(kv, "dir", rest[n-1])
		rest = rest[:n-2]
	}
	if len(rest) > 0 {
		netem := strings.Join(rest, " ")
		if uq, err := strconv.Unquote(netem); err == nil {
			netem = uq
		}
		kv = append(kv, "impair", netem)
	}
	return Override{Flag: flag, Faults: 1, edit: func(root *yaml.Node, mark func(*yaml.Node), _ *Lab) error {
		return appendItem(root, keys("faults"), mapping(mark, kv...), mark)
	}}, nil
}

// ParseOverrides reads the command line's what-if flags as a user wrote
// them, --set KEY=VALUE, --impair TARGET=NETEM and --fault '...', in that
// order (the order mrlab sim and mrlab experiment apply them). A value
// without its = is an error naming the flag.
func ParseOverrides(sets, impairs, faults []string) ([]Override, error) {
	var ovs []Override
	add := func(o Override, err error) error {
		if err != nil {
			return err
		}
		ovs = append(ovs, o)
		return nil
	}
	for _, kv := range sets {
		flag := "--set " + kv
		key, value, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fmt.Errorf("%s: want KEY=VALUE, e.g. --set links.default.rate=25gbit", flag)
		}
		if err := add(SetOverride(flag, strings.TrimSpace(key), value)); err != nil {
			return nil, err
		}
	}
	for _, kv := range impairs {
		flag := "--impair " + kv
		target, netem, ok := strings.Cut(kv, "=")
		if !ok || strings.TrimSpace(netem) == "" {
			return nil, fmt.Errorf("%s: want TARGET=NETEM, e.g. --impair 'p0-leaf0-spine0=loss 1%%' or --impair 'fabric=delay 5us'", flag)
		}
		if err := add(ImpairOverride(flag, strings.TrimSpace(target), strings.TrimSpace(netem))); err != nil {
			return nil, err
		}
	}
	for _, f := range faults {
		if err := add(FaultOverride("--fault "+f, f)); err != nil {
			return nil, err
		}
	}
	return ovs, nil
}

// ResolveWith is Resolve with overrides applied, in order.
func ResolveWith(arg string, ovs []Override) (*Lab, error) {
	if len(ovs) == 0 {
		return Resolve(arg)
	}
	if arg == "" {
		arg = DefaultName
	}
	file := arg
	data, err := os.ReadFile(arg)
	if err != nil {
		if _, rerr := Resolve(arg); rerr != nil {
			return nil, rerr
		}
		if data, err = Source(arg); err != nil {
			return nil, err
		}
		file = path.Join(examplesDir, arg+".yaml")
	}
	return ParseWith(file, data, ovs)
}

// ParseWith is Parse with overrides applied to the file's tree, in order.
func ParseWith(file string, data []byte, ovs []Override) (*Lab, error) {
	var lab *Lab
	for i := range ovs {
		if ovs[i].needsLab && lab == nil {
			// The lab as it stands without the overrides that need it.
			var plain []Override
			for _, o := range ovs {
				if !o.needsLab {
					plain = append(plain, o)
				}
			}
			l, err := parseOverridden(file, data, plain, nil)
			if err != nil {
				return nil, err
			}
			lab = l
		}
	}
	return parseOverridden(file, data, ovs, lab)
}

// parseOverridden parses data with ovs edited in; lab (if any) is what
// edits that need a lab see.
func parseOverridden(file string, data []byte, ovs []Override, lab *Lab) (*Lab, error) {
	root, err := parseTree(file, data)
	if err != nil {
		return nil, err
	}
	d := newDecoder(file)
	for i, o := range ovs {
		d.flags = append(d.flags, o.Flag)
		line := -(i + 1)
		mark := func(n *yaml.Node) { markTree(n, line) }
		if err := o.edit(root, mark, lab); err != nil {
			return nil, err
		}
	}
	return decodeTree(d, file, root)
}

// keyStep is one step of a --set path: a mapping key, then an optional
// list index.
type keyStep struct {
	key   string
	index int // -1: none
}

// keys returns a path of plain mapping keys.
func keys(names ...string) []keyStep {
	steps := make([]keyStep, len(names))
	for i, n := range names {
		steps[i] = keyStep{key: n, index: -1}
	}
	return steps
}

// parseKeyPath reads "links.overrides[0].rate".
func parseKeyPath(key string) ([]keyStep, error) {
	if key == "" {
		return nil, fmt.Errorf("empty key (want a dotted path such as links.default.rate)")
	}
	var steps []keyStep
	for _, part := range strings.Split(key, ".") {
		st := keyStep{key: part, index: -1}
		if i := strings.IndexByte(part, '['); i >= 0 {
			if !strings.HasSuffix(part, "]") {
				return nil, fmt.Errorf("key %q: %q: want NAME[INDEX]", key, part)
			}
			n, err := strconv.Atoi(part[i+1 : len(part)-1])
			if err != nil || n < 0 {
				return nil, fmt.Errorf("key %q: %q: want a list index from 0", key, part)
			}
			st.key, st.index = part[:i], n
		}
		if st.key == "" {
			return nil, fmt.Errorf("key %q: empty name in the path", key)
		}
		steps = append(steps, st)
	}
	return steps, nil
}

// yamlValue parses a --set value as one YAML node.
func yamlValue(value string) (*yaml.Node, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(value), &doc); err != nil {
		return nil, err
	}
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		return doc.Content[0], nil
	}
	// An empty value: YAML's null, which a field reports as missing.
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: ""}, nil
}

// setPath sets the node at steps under root to v, creating mappings on the
// way.
func setPath(root *yaml.Node, steps []keyStep, v *yaml.Node, mark func(*yaml.Node)) error {
	n := root
	for i, st := range steps {
		last := i == len(steps)-1
		if n.Kind != yaml.MappingNode {
			return fmt.Errorf("%s is not a mapping (it holds %s)", pathString(steps[:i]), kindName(n))
		}
		child := lookup(n, st.key)
		if child == nil {
			if st.index >= 0 {
				return fmt.Errorf("%s: no list to index", pathString(steps[:i+1]))
			}
			if last {
				n.Content = append(n.Content, keyNode(st.key, mark), v)
				return nil
			}
			child = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
			mark(child)
			n.Content = append(n.Content, keyNode(st.key, mark), child)
		}
		if st.index >= 0 {
			if child.Kind != yaml.SequenceNode {
				return fmt.Errorf("%s is not a list", pathString(append(steps[:i:i], keyStep{key: st.key, index: -1})))
			}
			if st.index >= len(child.Content) {
				return fmt.Errorf("%s: index %d out of range (the list has %d items)", pathString(steps[:i+1]), st.index, len(child.Content))
			}
			if last {
				child.Content[st.index] = v
				return nil
			}
			n = child.Content[st.index]
			continue
		}
		if last {
			replace(n, st.key, v)
			return nil
		}
		n = child
	}
	return nil
}

// appendItem appends item to the list at steps, creating it if missing.
func appendItem(root *yaml.Node, steps []keyStep, item *yaml.Node, mark func(*yaml.Node)) error {
	n := root
	for i, st := range steps {
		if n.Kind != yaml.MappingNode {
			return fmt.Errorf("%s is not a mapping", pathString(steps[:i]))
		}
		child := lookup(n, st.key)
		if child == nil {
			kind, tag := yaml.MappingNode, "!!map"
			if i == len(steps)-1 {
				kind, tag = yaml.SequenceNode, "!!seq"
			}
			child = &yaml.Node{Kind: kind, Tag: tag}
			mark(child)
			n.Content = append(n.Content, keyNode(st.key, mark), child)
		}
		n = child
	}
	if n.Kind != yaml.SequenceNode {
		return fmt.Errorf("%s is not a list", pathString(steps))
	}
	n.Content = append(n.Content, item)
	return nil
}

// lookup returns the value of key in mapping n (aliases followed), or nil.
func lookup(n *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			v := n.Content[i+1]
			for v.Kind == yaml.AliasNode && v.Alias != nil {
				v = v.Alias
			}
			return v
		}
	}
	return nil
}

// replace sets key's value in mapping n.
func replace(n *yaml.Node, key string, v *yaml.Node) {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			n.Content[i+1] = v
			return
		}
	}
}

func keyNode(key string, mark func(*yaml.Node)) *yaml.Node {
	k := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key}
	mark(k)
	return k
}

// mapping builds a flow mapping of string pairs.
func mapping(mark func(*yaml.Node), kv ...string) *yaml.Node {
	m := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	for i := 0; i+1 < len(kv); i += 2 {
		m.Content = append(m.Content, keyNode(kv[i], mark), &yaml.Node{Kind: yaml.ScalarNode, Value: kv[i+1]})
	}
	// The values' tags stay empty: they resolve as in a file (0 is an
	// int, 1ms a string).
	mark(m)
	return m
}

func pathString(steps []keyStep) string {
	var b strings.Builder
	for i, st := range steps {
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(st.key)
		if st.index >= 0 {
			fmt.Fprintf(&b, "[%d]", st.index)
		}
	}
	if b.Len() == 0 {
		return "the lab file"
	}
	return b.String()
}

// cloneNode deep-copies n.
func cloneNode(n *yaml.Node) *yaml.Node {
	c := *n
	c.Content = make([]*yaml.Node, len(n.Content))
	for i, x := range n.Content {
		c.Content[i] = cloneNode(x)
	}
	return &c
}

// markTree gives n and everything under it line, a negative number that
// decoder.errorf maps to an override's flag.
func markTree(n *yaml.Node, line int) {
	n.Line, n.Column = line, 0
	for _, c := range n.Content {
		markTree(c, line)
	}
}
