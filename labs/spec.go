package labs

import (
	"net/netip"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
)

// spec is a lab file as written, with the YAML nodes of everything that a
// later check (a dangling name, a builder's refusal) may have to point at.
type spec struct {
	root      *yaml.Node
	name      string
	desc      string
	seed      uint64
	transport transport.Kind
	detection sim.Time
	topo      topoSpec
	impair    *impairSpec // lab-wide, every link
	linkDef   linkSpec    // links.default
	linkHost  linkSpec    // links.host
	linkFab   linkSpec    // links.fabric
	overrides []overrideSpec
	faults    []faultSpec
	// transports is the transports section (zero: every default).
	transports Transports
}

// topoSpec is the topology section: one builder, or explicit lists.
type topoSpec struct {
	node        *yaml.Node
	builder     string // "leafspine", "backtoback", "fattree", or "" for explicit
	builderNode *yaml.Node
	leafSpine   leafSpineSpec
	backToBack  backToBackSpec
	fatTree     fatTreeSpec
	planes      int
	planesNode  *yaml.Node
	hosts       []hostSpec
	switches    []switchSpec
	links       []explicitLinkSpec
}

// leafSpineSpec holds topology.leafspine's parameters.
type leafSpineSpec struct {
	planes, leaves, spines, hostsPerLeaf int
	oversub                              float64
	oversubNode                          *yaml.Node
}

// backToBackSpec holds topology.backtoback's parameters.
type backToBackSpec struct {
	planes int
}

// fatTreeSpec holds topology.fattree's parameters.
type fatTreeSpec struct {
	k, planes int
}

type hostSpec struct {
	node     *yaml.Node
	name     string
	nameNode *yaml.Node
	addr     netip.Addr
	addrNode *yaml.Node
	ports    int
}

type switchSpec struct {
	node      *yaml.Node
	name      string
	nameNode  *yaml.Node
	plane     int
	planeNode *yaml.Node
	role      string
}

type endpointSpec struct {
	node *yaml.Node
	ep   fabric.Endpoint
}

type explicitLinkSpec struct {
	node     *yaml.Node
	name     string
	nameNode *yaml.Node
	a, b     endpointSpec
	params   linkSpec
}

// impairSpec is a parsed netem string and where it was written.
type impairSpec struct {
	text string
	imp  fabric.Impairment
}

// linkSpec is a set of link parameters, each optional: applying it to a
// fabric.LinkParams overwrites only what the file set.
type linkSpec struct {
	rate   *float64
	delay  *sim.Time
	queue  *int
	ecn    *fabric.ECNConfig
	impair *impairSpec
	pfc    *fabric.PFCConfig
	lossAt *fabric.LossPoint
}

// apply overwrites the parameters s sets.
func (s *linkSpec) apply(p *fabric.LinkParams) {
	if s.rate != nil {
		p.Rate = *s.rate
	}
	if s.delay != nil {
		p.Delay = *s.delay
	}
	if s.queue != nil {
		p.QueueBytes = *s.queue
	}
	if s.ecn != nil {
		p.ECN = *s.ecn
	}
	if s.impair != nil {
		p.Impair = s.impair.imp
	}
	if s.pfc != nil {
		p.PFC = *s.pfc
	}
	if s.lossAt != nil {
		p.LossAt = *s.lossAt
	}
}

type overrideSpec struct {
	node     *yaml.Node
	link     string
	linkNode *yaml.Node
	params   linkSpec
}

type faultSpec struct {
	node       *yaml.Node
	path       string
	at         sim.Time
	target     Target
	targets    int // how many of link/switch/plane were given
	name       string
	nameNode   *yaml.Node
	plane      int
	action     Action
	actionNode *yaml.Node
	impair     *impairSpec
	impairNode *yaml.Node
	dir        Dir
	dirNode    *yaml.Node
}

// decode reads the whole file into s.
func (s *spec) decode(d *decoder, root *yaml.Node) {
	s.root = root
	s.seed = 1
	s.transport = transport.MetaRoCE
	has := d.mapping(root, "", map[string]fieldFunc{
		"name": func(v *yaml.Node, p string) {
			if d.str(v, p, &s.name) {
				if err := ValidName(s.name); err != nil {
					d.errorf(v, p, "%v", err)
				}
			}
		},
		"description": func(v *yaml.Node, p string) { d.str(v, p, &s.desc) },
		"seed":        func(v *yaml.Node, p string) { d.uint64(v, p, &s.seed) },
		"transport": func(v *yaml.Node, p string) {
			var t string
			if d.str(v, p, &t) {
				k, err := transport.ParseKind(t)
				if err != nil {
					d.errorf(v, p, "%q is not a transport (want metaroce or rocev2)", t)
				}
				s.transport = k
			}
		},
		"detection_delay": func(v *yaml.Node, p string) {
			if d.duration(v, p, &s.detection) && s.detection == 0 {
				// fabric reads 0 as "the default"; a file saying 0 means
				// routing reacts at once, which fabric spells negative.
				s.detection = -1
			}
		},
		"topology": func(v *yaml.Node, p string) { s.topo.decode(d, v, p) },
		"links":    func(v *yaml.Node, p string) { s.decodeLinks(d, v, p) },
		"impair": func(v *yaml.Node, p string) {
			s.impair = decodeImpair(d, v, p)
		},
		"faults": func(v *yaml.Node, p string) {
			d.list(v, p, func(i int, v *yaml.Node, p string) {
				s.faults = append(s.faults, decodeFault(d, v, p))
			})
		},
		"transports": func(v *yaml.Node, p string) { s.decodeTransports(d, v, p) },
	})
	if has == nil {
		return
	}
	if !has["name"] {
		d.errorf(root, "name", "missing (every lab needs a name)")
	}
	if !has["topology"] {
		d.errorf(root, "topology", "missing (want a builder such as leafspine: {...}, or hosts/switches/links)")
	}
}

func (s *spec) decodeLinks(d *decoder, v *yaml.Node, p string) {
	d.mapping(v, p, map[string]fieldFunc{
		"default": func(v *yaml.Node, p string) { s.linkDef.decode(d, v, p, nil) },
		"host":    func(v *yaml.Node, p string) { s.linkHost.decode(d, v, p, nil) },
		"fabric":  func(v *yaml.Node, p string) { s.linkFab.decode(d, v, p, nil) },
		"overrides": func(v *yaml.Node, p string) {
			d.list(v, p, func(i int, v *yaml.Node, p string) {
				o := overrideSpec{node: v}
				has := o.params.decode(d, v, p, map[string]fieldFunc{
					"link": func(v *yaml.Node, p string) {
						if d.str(v, p, &o.link) {
							o.linkNode = v
						}
					},
				})
				if has != nil && !has["link"] {
					d.errorf(v, p+".link", "missing (which link does this override?)")
				}
				s.overrides = append(s.overrides, o)
			})
		},
	})
}

// decode reads link parameters from v; extra adds keys of the enclosing
// object (an explicit link's name and ends, an override's link).
func (s *linkSpec) decode(d *decoder, v *yaml.Node, path string, extra map[string]fieldFunc) map[string]bool {
	fields := map[string]fieldFunc{
		"rate": func(v *yaml.Node, p string) {
			var r float64
			if d.rate(v, p, &r) {
				s.rate = &r
			}
		},
		"delay": func(v *yaml.Node, p string) {
			var t sim.Time
			if d.duration(v, p, &t) {
				s.delay = &t
			}
		},
		"queue": func(v *yaml.Node, p string) {
			var q int
			if d.size(v, p, &q) {
				if q == 0 {
					d.errorf(v, p, "a queue must hold at least one packet")
					return
				}
				s.queue = &q
			}
		},
		"ecn": func(v *yaml.Node, p string) {
			if e, ok := decodeECN(d, v, p); ok {
				s.ecn = &e
			}
		},
		"impair": func(v *yaml.Node, p string) {
			if i := decodeImpair(d, v, p); i != nil {
				s.impair = i
			}
		},
		"pfc": func(v *yaml.Node, p string) {
			if c, ok := decodePFC(d, v, p); ok {
				s.pfc = &c
			}
		},
		// loss_at: wire (default) or enqueue (tc-netem's drop before the
		// queue); see fabric.LossPoint.
		"loss_at": func(v *yaml.Node, p string) {
			var t string
			if d.str(v, p, &t) {
				l, err := fabric.ParseLossPoint(t)
				if err != nil || t == "" {
					d.errorf(v, p, "%q is not a loss point (want wire: lost frames use the wire and fail the far port's FCS, or enqueue: tc-netem's drop before the queue)", t)
					return
				}
				s.lossAt = &l
			}
		},
	}
	for k, f := range extra {
		fields[k] = f
	}
	return d.mapping(v, path, fields)
}

// decodeECN reads "off", {step: SIZE} or {red: {min:, max:, pmax:, weight:}}.
func decodeECN(d *decoder, v *yaml.Node, path string) (fabric.ECNConfig, bool) {
	if n := d.deref(v); n != nil && n.Kind == yaml.ScalarNode && !isNull(n) {
		if n.Value == "off" || n.Value == "false" {
			return fabric.ECNConfig{Mode: fabric.ECNOff}, true
		}
		d.errorf(n, path, "%q is not an ECN setting (want off, {step: 64KiB} or {red: {min:, max:, pmax:}})", n.Value)
		return fabric.ECNConfig{}, false
	}
	var e fabric.ECNConfig
	modes := 0
	has := d.mapping(v, path, map[string]fieldFunc{
		"step": func(v *yaml.Node, p string) {
			modes++
			e.Mode = fabric.ECNStep
			if d.size(v, p, &e.K) && e.K == 0 {
				d.errorf(v, p, "the marking threshold must be above 0")
			}
		},
		"red": func(v *yaml.Node, p string) {
			modes++
			e.Mode = fabric.ECNRED
			bad := len(d.errs)
			has := d.mapping(v, p, map[string]fieldFunc{
				"min":    func(v *yaml.Node, p string) { d.size(v, p, &e.Min) },
				"max":    func(v *yaml.Node, p string) { d.size(v, p, &e.Max) },
				"pmax":   func(v *yaml.Node, p string) { d.fraction(v, p, &e.PMax) },
				"weight": func(v *yaml.Node, p string) { d.fraction(v, p, &e.Weight) },
			})
			switch {
			case has == nil:
			case !has["min"]:
				d.errorf(v, p+".min", "missing")
			case !has["max"]:
				d.errorf(v, p+".max", "missing")
			case !has["pmax"]:
				d.errorf(v, p+".pmax", "missing")
			case len(d.errs) == bad && e.Max <= e.Min:
				d.errorf(v, p, "max (%d bytes) must be above min (%d bytes)", e.Max, e.Min)
			}
		},
	})
	if has == nil {
		return e, false
	}
	if modes != 1 {
		d.errorf(v, path, "want exactly one of step or red")
		return e, false
	}
	return e, true
}

// decodeImpair reads a netem-spelled impairment ("loss random 1%"), or
// "none" for no impairment.
func decodeImpair(d *decoder, v *yaml.Node, path string) *impairSpec {
	n, ok := d.scalar(v, path)
	if !ok {
		return nil
	}
	text := strings.TrimSpace(n.Value)
	if text == "none" || text == "" {
		return &impairSpec{text: "none"}
	}
	imp, err := fabric.ParseImpairment(text)
	if err != nil {
		// The parser's message quotes the string and names the bad word.
		d.errorf(n, path, "%v", err)
		return nil
	}
	if f := strings.Fields(text); len(f) > 1 {
		for i, w := range f[:len(f)-1] {
			if w != "rate" {
				continue
			}
			if r, err := fabric.ParseRate(f[i+1]); err == nil {
				if msg, ok := BytesRateNote(f[i+1], r); ok {
					d.warnf(n, path, "%s", msg)
				}
			}
		}
	}
	return &impairSpec{text: text, imp: imp}
}

func (t *topoSpec) decode(d *decoder, v *yaml.Node, path string) {
	t.node = v
	builders := 0
	builder := func(name string, f func(v *yaml.Node, p string)) fieldFunc {
		return func(v *yaml.Node, p string) {
			builders++
			if t.builder != "" {
				d.errorf(v, p, "topology already uses the %s builder (want one builder, or explicit hosts/switches/links)", t.builder)
				return
			}
			t.builder, t.builderNode = name, v
			f(v, p)
		}
	}
	var explicit *yaml.Node
	has := d.mapping(v, path, map[string]fieldFunc{
		"leafspine": builder("leafspine", func(v *yaml.Node, p string) {
			ls := &t.leafSpine
			ls.planes, ls.spines = 1, 1
			has := d.mapping(v, p, map[string]fieldFunc{
				"planes":         func(v *yaml.Node, p string) { d.int(v, p, 1, 64, &ls.planes) },
				"leaves":         func(v *yaml.Node, p string) { d.int(v, p, 1, 1024, &ls.leaves) },
				"spines":         func(v *yaml.Node, p string) { d.int(v, p, 1, 1024, &ls.spines) },
				"hosts_per_leaf": func(v *yaml.Node, p string) { d.int(v, p, 1, 1024, &ls.hostsPerLeaf) },
				"oversubscription": func(v *yaml.Node, p string) {
					if d.float(v, p, 0.01, 1000, &ls.oversub) {
						ls.oversubNode = v
					}
				},
			})
			if has == nil {
				return
			}
			if !has["leaves"] {
				d.errorf(v, p+".leaves", "missing")
			}
			if !has["hosts_per_leaf"] {
				d.errorf(v, p+".hosts_per_leaf", "missing")
			}
		}),
		"backtoback": builder("backtoback", func(v *yaml.Node, p string) {
			b := &t.backToBack
			b.planes = 1
			if n := d.deref(v); n != nil && isNull(n) {
				return // "backtoback:" alone means the defaults
			}
			d.mapping(v, p, map[string]fieldFunc{
				"planes": func(v *yaml.Node, p string) { d.int(v, p, 1, 64, &b.planes) },
			})
		}),
		"fattree": builder("fattree", func(v *yaml.Node, p string) {
			f := &t.fatTree
			f.planes = 1
			bad := len(d.errs)
			has := d.mapping(v, p, map[string]fieldFunc{
				"k":      func(v *yaml.Node, p string) { d.int(v, p, 2, 64, &f.k) }, // fabric's maxFatTreeK: 65,536 hosts a plane
				"planes": func(v *yaml.Node, p string) { d.int(v, p, 1, 64, &f.planes) },
			})
			if has != nil && !has["k"] {
				d.errorf(v, p+".k", "missing")
			} else if len(d.errs) == bad && f.k%2 != 0 {
				d.errorf(v, p+".k", "%d is odd (a fat tree needs an even k)", f.k)
			}
		}),
		"planes": func(v *yaml.Node, p string) {
			if d.int(v, p, 1, 64, &t.planes) {
				t.planesNode = v
			}
		},
		"hosts": func(v *yaml.Node, p string) {
			explicit = v
			d.list(v, p, func(i int, v *yaml.Node, p string) { t.hosts = append(t.hosts, decodeHost(d, v, p)) })
		},
		"switches": func(v *yaml.Node, p string) {
			explicit = v
			d.list(v, p, func(i int, v *yaml.Node, p string) { t.switches = append(t.switches, decodeSwitch(d, v, p)) })
		},
		"links": func(v *yaml.Node, p string) {
			explicit = v
			d.list(v, p, func(i int, v *yaml.Node, p string) { t.links = append(t.links, decodeExplicitLink(d, v, p)) })
		},
	})
	if has == nil {
		return
	}
	switch {
	case builders > 0 && explicit != nil:
		d.errorf(explicit, path, "give either a builder (%s) or explicit hosts/switches/links, not both", t.builder)
	case builders > 0 && t.planesNode != nil:
		d.errorf(t.planesNode, path+".planes", "set planes inside the builder (%s: {planes: N})", t.builder)
	case builders == 0 && len(t.hosts) == 0:
		d.errorf(v, path, "no hosts (want a builder such as leafspine: {...}, or hosts/switches/links)")
	}
}

func decodeHost(d *decoder, v *yaml.Node, path string) hostSpec {
	h := hostSpec{node: v, ports: 1}
	has := d.mapping(v, path, map[string]fieldFunc{
		"name": func(v *yaml.Node, p string) {
			if d.str(v, p, &h.name) {
				h.nameNode = v
			}
		},
		"addr": func(v *yaml.Node, p string) {
			n, ok := d.scalar(v, p)
			if !ok {
				return
			}
			a, err := netip.ParseAddr(n.Value)
			if err != nil || !a.Is4() {
				d.errorf(n, p, "%q is not an IPv4 address", n.Value)
				return
			}
			h.addr, h.addrNode = a, n
		},
		"ports": func(v *yaml.Node, p string) { d.int(v, p, 1, 64, &h.ports) },
	})
	if has != nil && !has["name"] {
		d.errorf(v, path+".name", "missing")
	}
	return h
}

func decodeSwitch(d *decoder, v *yaml.Node, path string) switchSpec {
	s := switchSpec{node: v, role: "switch"}
	has := d.mapping(v, path, map[string]fieldFunc{
		"name": func(v *yaml.Node, p string) {
			if d.str(v, p, &s.name) {
				s.nameNode = v
			}
		},
		"plane": func(v *yaml.Node, p string) {
			if d.int(v, p, 0, 63, &s.plane) {
				s.planeNode = v
			}
		},
		"role": func(v *yaml.Node, p string) { d.str(v, p, &s.role) },
	})
	if has != nil && !has["name"] {
		d.errorf(v, path+".name", "missing")
	}
	return s
}

func decodeExplicitLink(d *decoder, v *yaml.Node, path string) explicitLinkSpec {
	l := explicitLinkSpec{node: v}
	endpoint := func(dst *endpointSpec) fieldFunc {
		return func(v *yaml.Node, p string) {
			n, ok := d.scalar(v, p)
			if !ok {
				return
			}
			node, port, found := strings.Cut(n.Value, ":")
			pn, err := strconv.Atoi(port)
			if !found || node == "" || err != nil || pn < 0 || pn > 1<<16 {
				d.errorf(n, p, "%q is not an endpoint (want NODE:PORT, e.g. h0:0 or leaf0:3)", n.Value)
				return
			}
			*dst = endpointSpec{node: n, ep: fabric.Endpoint{Node: node, Port: pn}}
		}
	}
	has := l.params.decode(d, v, path, map[string]fieldFunc{
		"name": func(v *yaml.Node, p string) {
			if d.str(v, p, &l.name) {
				l.nameNode = v
			}
		},
		"a": endpoint(&l.a),
		"b": endpoint(&l.b),
	})
	if has != nil && !has["a"] {
		d.errorf(v, path+".a", "missing (want NODE:PORT)")
	}
	if has != nil && !has["b"] {
		d.errorf(v, path+".b", "missing (want NODE:PORT)")
	}
	return l
}

func decodeFault(d *decoder, v *yaml.Node, path string) faultSpec {
	f := faultSpec{node: v, path: path}
	target := func(t Target) fieldFunc {
		return func(v *yaml.Node, p string) {
			f.targets++
			f.target = t
			if t == TargetPlane {
				if d.int(v, p, 0, 63, &f.plane) {
					f.nameNode = v
				}
				return
			}
			if d.str(v, p, &f.name) {
				f.nameNode = v
			}
		}
	}
	has := d.mapping(v, path, map[string]fieldFunc{
		"at":     func(v *yaml.Node, p string) { d.duration(v, p, &f.at) },
		"link":   target(TargetLink),
		"switch": target(TargetSwitch),
		"plane":  target(TargetPlane),
		"action": func(v *yaml.Node, p string) {
			var s string
			if !d.str(v, p, &s) {
				return
			}
			a, err := ParseAction(s)
			if err != nil {
				d.errorf(v, p, "%q is not an action (want down, up or impair)", s)
				return
			}
			f.action, f.actionNode = a, v
		},
		"impair": func(v *yaml.Node, p string) {
			f.impairNode = v
			f.impair = decodeImpair(d, v, p)
		},
		"dir": func(v *yaml.Node, p string) {
			var s string
			if !d.str(v, p, &s) {
				return
			}
			dir, err := ParseDir(s)
			if err != nil {
				d.errorf(v, p, "%q is not a direction (want both, ab or ba)", s)
				return
			}
			f.dir, f.dirNode = dir, v
		},
	})
	if has == nil {
		return f
	}
	if !has["at"] {
		d.errorf(v, path+".at", "missing (when does it happen? e.g. at: 2ms)")
	}
	switch f.targets {
	case 0:
		d.errorf(v, path, "missing a target (want one of link, switch or plane)")
	case 1:
	default:
		d.errorf(v, path, "more than one target (want one of link, switch or plane)")
	}
	switch {
	case !has["action"]:
		d.errorf(v, path+".action", "missing (want down, up or impair)")
	case f.actionNode == nil:
		// a bad action, already reported
	case f.action == ActionImpair && f.impairNode == nil:
		d.errorf(f.actionNode, path+".impair", "missing (action impair needs impair: \"<netem spec>\", or none)")
	case f.action != ActionImpair && f.impairNode != nil:
		d.errorf(f.impairNode, path+".impair", "only meaningful with action: impair")
	}
	if f.dirNode != nil && (f.action != ActionImpair || f.target != TargetLink) {
		d.errorf(f.dirNode, path+".dir", "only meaningful for action: impair on a link")
	}
	return f
}
