package capture

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/mrlab/mrlab/fabric"
)

// Spec is a capture point as a user names it:
//
//	h0          every NIC port of host h0, both directions
//	h0:1        NIC port 1 (plane 1) of h0
//	leaf0       every port of switch leaf0, plus the switch's own drops
//	leaf0:3     port 3 of leaf0
//	LINK        both directions of the link named LINK
//	LINK:AtoB   only the A->B direction (LINK:BtoA the other; ab and ba
//	            are accepted too)
type Spec struct {
	Name string
	// Port selects one port of a node; -1 means all.
	Port int
	// Dir selects a link direction: "" both, "AtoB" or "BtoA".
	Dir string
}

// String returns the spec as the user wrote it.
func (s Spec) String() string {
	switch {
	case s.Dir != "":
		return s.Name + ":" + s.Dir
	case s.Port >= 0:
		return s.Name + ":" + strconv.Itoa(s.Port)
	}
	return s.Name
}

// FileName is the capture file a spec writes in a capture directory:
// "h0.pcapng", "leaf0_3.pcapng", "p0-leaf0-spine1_AtoB.pcapng".
func (s Spec) FileName() string {
	return strings.ReplaceAll(s.String(), ":", "_") + ".pcapng"
}

// ErrBadSpec is wrapped by every spec parsing and resolution error.
var ErrBadSpec = errors.New("bad capture point")

// ParseSpec parses one capture point.
func ParseSpec(s string) (Spec, error) {
	s = strings.TrimSpace(s)
	sp := Spec{Name: s, Port: -1}
	if s == "" {
		return sp, fmt.Errorf("%w: empty name", ErrBadSpec)
	}
	if i := strings.LastIndexByte(s, ':'); i >= 0 {
		name, q := s[:i], s[i+1:]
		if name == "" {
			return sp, fmt.Errorf("%w %q: empty name before ':'", ErrBadSpec, s)
		}
		sp.Name = name
		switch strings.ToLower(q) {
		case "ab", "atob":
			sp.Dir = "AtoB"
		case "ba", "btoa":
			sp.Dir = "BtoA"
		default:
			n, err := strconv.Atoi(q)
			if err != nil || n < 0 {
				return sp, fmt.Errorf("%w %q: after ':' want a port number or AtoB/BtoA, got %q", ErrBadSpec, s, q)
			}
			sp.Port = n
		}
	}
	return sp, nil
}

// ParseSpecs parses a comma-separated list of capture points, as given to
// --capture. Duplicates are an error: each point writes one file.
func ParseSpecs(list string) ([]Spec, error) {
	var out []Spec
	seen := map[string]bool{}
	for _, f := range strings.Split(list, ",") {
		if strings.TrimSpace(f) == "" {
			continue
		}
		sp, err := ParseSpec(f)
		if err != nil {
			return nil, err
		}
		if seen[sp.String()] {
			return nil, fmt.Errorf("%w %q: listed twice", ErrBadSpec, sp.String())
		}
		seen[sp.String()] = true
		out = append(out, sp)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no capture points in %q", ErrBadSpec, list)
	}
	return out, nil
}

// Dir is one direction of a fabric link, as a capture sees it.
type Dir struct {
	// Index is fabric.Point.Link for events on this direction.
	Index int
	Link  string
	// Reverse is true for the B->A direction.
	Reverse  bool
	From, To fabric.Endpoint
}

// Label is how annotations name the direction: "p0-leaf0-spine1 (a->b)".
func (d Dir) Label() string {
	if d.Reverse {
		return d.Link + " (b->a)"
	}
	return d.Link + " (a->b)"
}

// Layout is what a capture needs to know of a network: its link directions
// and which names are nodes.
type Layout struct {
	Dirs []Dir
	// Nodes are host and switch names.
	Nodes []string
}

// LayoutOf describes a topology for capture before it is built, with the
// fabric's numbering of link directions: link i's A->B direction is
// observation point 2i, its B->A direction 2i+1. A built network's
// NetworkLayout is the same.
func LayoutOf(t *fabric.Topology) Layout {
	var l Layout
	for _, h := range t.Hosts {
		l.Nodes = append(l.Nodes, h.Name)
	}
	for _, s := range t.Switches {
		l.Nodes = append(l.Nodes, s.Name)
	}
	for i, k := range t.Links {
		l.Dirs = append(l.Dirs,
			Dir{Index: 2*i + int(fabric.AtoB), Link: k.Name, From: k.A, To: k.B},
			Dir{Index: 2*i + int(fabric.BtoA), Link: k.Name, Reverse: true, From: k.B, To: k.A})
	}
	return l
}

// NetworkLayout describes a built network for capture, taking each link
// direction's observation index from the network itself.
func NetworkLayout(n *fabric.Network) Layout {
	t := n.Topology()
	var l Layout
	for _, h := range t.Hosts {
		l.Nodes = append(l.Nodes, h.Name)
	}
	for _, s := range t.Switches {
		l.Nodes = append(l.Nodes, s.Name)
	}
	for i := 0; ; i++ {
		p := n.PortAt(i)
		if p == nil {
			break
		}
		l.Dirs = append(l.Dirs, Dir{Index: p.Index(), Link: p.Link(), Reverse: p.Direction() == fabric.BtoA,
			From: p.Local(), To: p.Remote()})
	}
	return l
}

// tapRole says where a tap sits on a direction, which decides the event
// it records a packet at.
type tapRole uint8

const (
	// roleTx: the sending side of a node's port. A packet is recorded when
	// its serialization starts, as tcpdump on an egress interface sees
	// it, or when the port drops it before that (queue full, loss at
	// enqueue, link down). What happens to it on the wire afterwards
	// (corruption, duplication, loss in flight) is the receiving side's
	// to show.
	roleTx tapRole = iota
	// roleRx: the receiving side of a node's port. A packet is recorded
	// when it arrives, with what happened to it on the way (CE mark,
	// corruption, duplication), or when it is dropped on the way.
	roleRx
	// roleLink: a link direction as a whole: recorded like roleRx (at
	// arrival, or at the drop), so every event on the link annotates it.
	roleLink
)

// resolved is one pcapng interface of a spec: a link direction or the
// node itself.
type resolved struct {
	dir   int // index into Layout.Dirs, or -1 for the node's own events
	role  tapRole
	iface Interface
	flags uint32
	node  string
	port  int // the node's port, for ordering
}

// resolve turns a spec into the interfaces it captures, in a stable order.
func (l *Layout) resolve(sp Spec) ([]resolved, error) {
	isNode := false
	for _, n := range l.Nodes {
		if n == sp.Name {
			isNode = true
			break
		}
	}
	var out []resolved
	if isNode {
		if sp.Dir != "" {
			return nil, fmt.Errorf("%w %q: %s is a node; AtoB/BtoA select a link direction", ErrBadSpec, sp, sp.Name)
		}
		for i, d := range l.Dirs {
			switch {
			case d.From.Node == sp.Name && (sp.Port < 0 || d.From.Port == sp.Port):
				out = append(out, resolved{dir: i, role: roleTx, flags: DirOutbound, port: d.From.Port, iface: Interface{
					Name:        fmt.Sprintf("%s:%d tx", d.From.Node, d.From.Port),
					Description: fmt.Sprintf("%s:%d -> %s:%d, link %s", d.From.Node, d.From.Port, d.To.Node, d.To.Port, d.Label()),
				}})
			case d.To.Node == sp.Name && (sp.Port < 0 || d.To.Port == sp.Port):
				out = append(out, resolved{dir: i, role: roleRx, flags: DirInbound, port: d.To.Port, iface: Interface{
					Name:        fmt.Sprintf("%s:%d rx", d.To.Node, d.To.Port),
					Description: fmt.Sprintf("%s:%d <- %s:%d, link %s", d.To.Node, d.To.Port, d.From.Node, d.From.Port, d.Label()),
				}})
			}
		}
		if len(out) == 0 {
			return nil, fmt.Errorf("%w %q: %s has no port %d", ErrBadSpec, sp, sp.Name, sp.Port)
		}
		// Ports in order, tx before rx.
		sort.SliceStable(out, func(i, j int) bool {
			a, b := out[i], out[j]
			if a.port != b.port {
				return a.port < b.port
			}
			return a.role < b.role
		})
		if sp.Port < 0 {
			out = append(out, resolved{dir: -1, node: sp.Name, iface: Interface{
				Name:        sp.Name,
				Description: "drops and events at node " + sp.Name + " itself",
			}})
		}
		return out, nil
	}
	if sp.Port >= 0 {
		return nil, fmt.Errorf("%w %q: no host or switch named %q", ErrBadSpec, sp, sp.Name)
	}
	for i, d := range l.Dirs {
		if d.Link != sp.Name || (sp.Dir == "AtoB" && d.Reverse) || (sp.Dir == "BtoA" && !d.Reverse) {
			continue
		}
		name := d.Link + ":AtoB"
		if d.Reverse {
			name = d.Link + ":BtoA"
		}
		out = append(out, resolved{dir: i, role: roleLink, iface: Interface{
			Name:        name,
			Description: fmt.Sprintf("link %s, %s:%d -> %s:%d", d.Label(), d.From.Node, d.From.Port, d.To.Node, d.To.Port),
		}})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w %q: no host, switch or link named %q", ErrBadSpec, sp, sp.Name)
	}
	return out, nil
}
