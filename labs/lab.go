// Package labs reads, checks and builds mrlab labs: a YAML file names a
// topology (a builder with parameters, or explicit hosts, switches and
// links), link parameters with per-link overrides, netem-style impairments
// and a timed fault timeline. Parse checks everything a lab file can get
// wrong — unknown keys, bad values, dangling names — and reports each with
// its file:line:col and field. Build turns a lab into a running
// fabric.Network on any sim.Scheduler; ScheduleFaults arms its timeline.
//
// Example labs ship embedded in the binary (Builtin, Names); Resolve finds a
// lab by path or built-in name, and falls back to the default lab.
package labs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"

	"go.yaml.in/yaml/v3"

	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
)

// Lab is a parsed and checked lab. Its fields are what the file said (with
// defaults filled in); Topology gives the resolved fabric. A Lab is not
// modified by Build, so one Lab may be built many times (the same lab with
// other seeds). Callers may change Seed and Faults before building.
type Lab struct {
	// File is where the lab came from: a path, or "labs/examples/NAME.yaml"
	// for built-ins.
	File string
	// Name is the lab's name (required in the file).
	Name string
	// Description is a free-text line for listings.
	Description string
	// Seed seeds every random stream of the run (loss, ECMP salts,
	// workloads). Default 1.
	Seed uint64
	// Transport is the default transport for workloads. Default MetaRoCE.
	Transport transport.Kind
	// DetectionDelay is how long switches keep hashing onto a failed port
	// before routing around it (packets sent there are black-holed). As in
	// fabric.BuildOptions: 0 means fabric.DefaultDetectionDelay, negative
	// means at once (a file's "detection_delay: 0").
	DetectionDelay sim.Time
	// Builder names the topology builder ("leafspine", "backtoback",
	// "fattree") or is "explicit".
	Builder string
	// Faults is the timeline, in file order.
	Faults []Fault
	// Transports holds the transports section: every NIC's MetaRoCE and
	// RoCEv2 options and RoCEv2's queue pairs per host pair.
	Transports Transports
	// Warnings are things the file says that are valid but probably not
	// meant (a rate in tc's bytes-per-second spelling), with their
	// positions, for commands to print.
	Warnings []*Error

	topo *fabric.Topology
}

// Topology returns a copy of the lab's resolved topology, with every
// link's parameters final (defaults, class settings, overrides and the
// lab-wide impairment applied). The caller may modify it.
func (l *Lab) Topology() *fabric.Topology {
	t := *l.topo
	t.Hosts = append([]fabric.Host(nil), l.topo.Hosts...)
	t.Switches = append([]fabric.Switch(nil), l.topo.Switches...)
	t.Links = append([]fabric.Link(nil), l.topo.Links...)
	return &t
}

// Load reads and parses the lab file at path.
func Load(path string) (*Lab, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("loading lab: %w", err)
	}
	return Parse(path, data)
}

// Parse parses and checks a lab file's contents; file names it in errors.
// The error is a *Error, or a join of several (see Errors).
func Parse(file string, data []byte) (*Lab, error) {
	root, err := parseTree(file, data)
	if err != nil {
		return nil, err
	}
	return decodeTree(newDecoder(file), file, root)
}

// parseTree reads a lab file's one YAML document and returns its top node.
func parseTree(file string, data []byte) (*yaml.Node, error) {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &Error{File: file, Msg: "empty lab file (want at least name: and topology:)"}
		}
		return nil, syntaxErrorIn(file, data, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, &Error{File: file, Line: extra.Line, Col: extra.Column, Msg: "more than one YAML document (a lab file holds one)"}
	} else if !errors.Is(err, io.EOF) {
		return nil, syntaxError(file, err)
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	return root, nil
}

// decodeTree decodes and checks a lab file's tree.
func decodeTree(d *decoder, file string, root *yaml.Node) (*Lab, error) {
	s := &spec{}
	s.decode(d, root)
	if err := d.err(); err != nil {
		return nil, err
	}
	lab, err := s.resolve(d)
	if err != nil {
		return nil, err
	}
	lab.File = file
	lab.Warnings = d.warns
	return lab, nil
}

// Summary counts what a lab holds, for listings and `mrlab lab show`.
type Summary struct {
	Name      string
	Builder   string
	Planes    int
	Hosts     int
	Switches  int
	Links     int
	HostLinks int // links with a host at one end
	Faults    int
	// SwitchesByRole counts switches per role ("leaf": 4, "spine": 4).
	SwitchesByRole map[string]int
}

// Summary counts the lab's hosts, switches, links and planes.
func (l *Lab) Summary() Summary {
	s := Summary{
		Name: l.Name, Builder: l.Builder, Planes: l.topo.Planes,
		Hosts: len(l.topo.Hosts), Switches: len(l.topo.Switches), Links: len(l.topo.Links),
		Faults: len(l.Faults), SwitchesByRole: map[string]int{},
	}
	hosts := hostSet(l.topo)
	for _, k := range l.topo.Links {
		if hosts[k.A.Node] || hosts[k.B.Node] {
			s.HostLinks++
		}
	}
	for _, sw := range l.topo.Switches {
		s.SwitchesByRole[sw.Role]++
	}
	return s
}

// Roles returns the switch roles in the summary, sorted.
func (s Summary) Roles() []string {
	r := make([]string, 0, len(s.SwitchesByRole))
	for k := range s.SwitchesByRole {
		r = append(r, k)
	}
	sort.Strings(r)
	return r
}

func hostSet(t *fabric.Topology) map[string]bool {
	m := make(map[string]bool, len(t.Hosts))
	for _, h := range t.Hosts {
		m[h.Name] = true
	}
	return m
}
