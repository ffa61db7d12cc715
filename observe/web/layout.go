package web

import (
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/mrlab/mrlab/internal/natural"
)

// View is a topology laid out for drawing, in abstract units the page
// scales to fit. Each plane is drawn in a box of its own (all boxes the
// same size; the page arranges them in a grid that suits its window): in
// a box, the switches by tier (the highest at the top) and, at the
// bottom, the hosts' ports in that plane, each under the switch it hangs
// off. A host with a port in every plane appears once per plane; the
// side panel lists hosts once.
type View struct {
	Planes int `json:"planes"`
	// BoxW and BoxH are a plane box's size; node coordinates are within
	// their plane's box.
	BoxW float64 `json:"box_w"`
	BoxH float64 `json:"box_h"`
	// Top is the y of the highest tier's row in a box, Span the distance
	// from it down to the host row: the page may stretch that span to
	// fill its height.
	Top   float64    `json:"top"`
	Span  float64    `json:"span"`
	Nodes []ViewNode `json:"nodes"`
	// Links are in topology order: Links[i] draws topology link i, whose
	// directions are 2i and 2i+1.
	Links []ViewLink `json:"links"`
}

// ViewNode is a switch, or a host's port in one plane.
type ViewNode struct {
	// Name is the switch's or the host's name.
	Name string `json:"name"`
	// Label is what is drawn: the name without its plane prefix.
	Label string `json:"label"`
	Host  bool   `json:"host,omitempty"`
	// Port is the host's NIC port (hosts only).
	Port  int `json:"port,omitempty"`
	Plane int `json:"plane"`
	// Tier is 0 for host ports, 1 for switches next to hosts, and so on.
	Tier int `json:"tier"`
	// Pod is the fat-tree pod (from a "podN" in the name), or -1.
	Pod int     `json:"pod"`
	X   float64 `json:"x"`
	Y   float64 `json:"y"`
}

// ViewLink joins two nodes (indices into View.Nodes): A is the link's A
// end, so direction AtoB runs from Nodes[A] to Nodes[B].
type ViewLink struct {
	A     int `json:"a"`
	B     int `json:"b"`
	Plane int `json:"plane"`
}

// Layout geometry, in view units.
const (
	minHostGap = 14.0  // between host ports
	swGap      = 72.0  // between switches in a row
	rowGap     = 110.0 // between tiers
	pad        = 28.0  // inside a plane box
	titleH     = 18.0  // plane title above the rows
	minBoxW    = 480.0 // a plane box is at least this wide
)

var podRe = regexp.MustCompile(`pod(\d+)`)

// Layout places a topology's nodes for drawing. It is a pure function of
// the topology, so the same lab always looks the same.
func Layout(t *Topology) View {
	planes := max(t.Planes, 1)
	isHost := map[string]bool{}
	for _, h := range t.Hosts {
		isHost[h.Name] = true
	}
	swIdx := map[string]int{}
	for i, s := range t.Switches {
		swIdx[s.Name] = i
	}
	tiers := switchTiers(t, isHost, swIdx)

	var v View
	// Nodes: every switch, then host ports as links name them.
	nodeOf := map[string]int{}
	for i, s := range t.Switches {
		pod := -1
		if m := podRe.FindStringSubmatch(s.Name); m != nil {
			pod, _ = strconv.Atoi(m[1])
		}
		nodeOf[s.Name] = len(v.Nodes)
		v.Nodes = append(v.Nodes, ViewNode{Name: s.Name, Label: shortName(s.Name, s.Plane), Plane: clampPlane(s.Plane, planes),
			Tier: tiers[i], Pod: pod})
	}
	hostPort := func(name string, port, plane int) int {
		key := name + ":" + strconv.Itoa(port)
		if i, ok := nodeOf[key]; ok {
			return i
		}
		nodeOf[key] = len(v.Nodes)
		v.Nodes = append(v.Nodes, ViewNode{Name: name, Label: name, Host: true, Port: port, Plane: plane, Pod: -1})
		return len(v.Nodes) - 1
	}
	for _, l := range t.Links {
		plane := linkPlane(l, t, swIdx, planes)
		vl := ViewLink{Plane: plane}
		if isHost[l.A] {
			vl.A = hostPort(l.A, l.APort, plane)
		} else {
			vl.A = nodeOf[l.A]
		}
		if isHost[l.B] {
			vl.B = hostPort(l.B, l.BPort, plane)
		} else {
			vl.B = nodeOf[l.B]
		}
		v.Links = append(v.Links, vl)
	}

	// Each plane is laid out on its own, then boxes get one common size.
	maxTier := 0
	for _, n := range v.Nodes {
		maxTier = max(maxTier, n.Tier)
	}
	widths := make([]float64, planes)
	for p := range planes {
		widths[p] = layoutPlane(&v, p)
	}
	v.Planes = planes
	v.BoxW = slices.Max(widths) + 2*pad
	v.BoxH = float64(maxTier)*rowGap + 2*pad + titleH
	v.Top, v.Span = titleH+pad, float64(maxTier)*rowGap
	for i := range v.Nodes {
		n := &v.Nodes[i]
		// Center each plane's own width in the common box.
		n.X = round1(n.X + pad + (v.BoxW-2*pad-widths[n.Plane])/2)
		n.Y = round1(titleH + pad + float64(maxTier-n.Tier)*rowGap)
	}
	return v
}

// layoutPlane sets the X of plane p's nodes, from 0, and returns the width
// they span. Host ports sit in slots under the switch they hang off;
// tier-1 switches are centered over their hosts; higher tiers spread over
// their pod's span, or the whole width.
func layoutPlane(v *View, p int) float64 {
	tier1, hosts, upper := planeNodes(v, p)
	slices.SortFunc(tier1, byPodName(v))
	groups, loose := underSwitches(v, hosts)
	widest := len(tier1)
	for _, ns := range upper {
		widest = max(widest, len(ns))
	}
	w := placeTier1(v, tier1, groups, loose, widest)
	placeUpper(v, tier1, upper, w)
	return w
}

// planeNodes returns plane p's tier-1 switches, host ports and the
// switches of each higher tier, as indexes into v.Nodes.
func planeNodes(v *View, p int) (tier1, hosts []int, upper map[int][]int) {
	upper = map[int][]int{}
	for i, n := range v.Nodes {
		switch {
		case n.Plane != p:
		case n.Host:
			hosts = append(hosts, i)
		case n.Tier == 1:
			tier1 = append(tier1, i)
		default:
			upper[n.Tier] = append(upper[n.Tier], i)
		}
	}
	return tier1, hosts, upper
}

// byPodName orders switches by pod, then naturally by name.
func byPodName(v *View) func(a, b int) int {
	return func(a, b int) int {
		na, nb := &v.Nodes[a], &v.Nodes[b]
		if na.Pod != nb.Pod {
			return na.Pod - nb.Pod
		}
		return natural.Compare(na.Name, nb.Name)
	}
}

// byHost orders host ports naturally by host name, then by port.
func byHost(v *View) func(a, b int) int {
	return func(a, b int) int {
		if c := natural.Compare(v.Nodes[a].Name, v.Nodes[b].Name); c != 0 {
			return c
		}
		return v.Nodes[a].Port - v.Nodes[b].Port
	}
}

// underSwitches groups host ports by the tier-1 switch they hang off;
// loose are those that hang off none (back to back), sorted.
func underSwitches(v *View, hosts []int) (groups map[int][]int, loose []int) {
	under := map[int]int{}
	for _, l := range v.Links {
		for _, e := range [][2]int{{l.A, l.B}, {l.B, l.A}} {
			if v.Nodes[e[0]].Host && !v.Nodes[e[1]].Host && v.Nodes[e[1]].Tier == 1 {
				under[e[0]] = e[1]
			}
		}
	}
	groups = map[int][]int{}
	for _, h := range hosts {
		if s, ok := under[h]; ok {
			groups[s] = append(groups[s], h)
		} else {
			loose = append(loose, h)
		}
	}
	slices.SortFunc(loose, byHost(v))
	return groups, loose
}

// placeTier1 places the tier-1 switches side by side, each over its hosts'
// slots, and the loose hosts after them, and returns the plane's width:
// enough for every slot and for the widest tier's switches.
func placeTier1(v *View, tier1 []int, groups map[int][]int, loose []int, widest int) float64 {
	// Slots: a switch gets at least enough for its box.
	minSlots := int(math.Ceil(swGap / minHostGap))
	slots := 0
	for _, s := range tier1 {
		slots += max(len(groups[s]), minSlots)
	}
	slots += len(loose)
	w := max(float64(slots)*minHostGap, float64(widest)*swGap, minBoxW-2*pad)
	gap := w / float64(max(slots, 1))
	x := 0.0
	for _, s := range tier1 {
		g := groups[s]
		slices.SortFunc(g, byHost(v))
		n := max(len(g), minSlots)
		span := float64(n) * gap
		v.Nodes[s].X = x + span/2
		// Center the hosts under their switch.
		hx := x + (span-float64(len(g))*gap)/2
		for i, h := range g {
			v.Nodes[h].X = hx + (float64(i)+0.5)*gap
		}
		x += span
	}
	for i, h := range loose {
		v.Nodes[h].X = x + (float64(i)+0.5)*gap
	}
	if len(loose) > 0 && len(tier1) == 0 {
		// Hosts only (back to back): spread them over the width.
		for i, h := range loose {
			v.Nodes[h].X = (float64(i) + 0.5) * w / float64(len(loose))
		}
	}
	return w
}

// placeUpper spreads each higher tier's switches over their pod's span at
// tier 1, and those of no pod over the plane's width w.
func placeUpper(v *View, tier1 []int, upper map[int][]int, w float64) {
	type span struct{ lo, hi float64 }
	pods := map[int]*span{}
	for _, s := range tier1 {
		n := &v.Nodes[s]
		if n.Pod < 0 {
			continue
		}
		sp := pods[n.Pod]
		if sp == nil {
			sp = &span{n.X, n.X}
			pods[n.Pod] = sp
		}
		sp.lo, sp.hi = min(sp.lo, n.X), max(sp.hi, n.X)
	}
	for _, ns := range upper {
		slices.SortFunc(ns, byPodName(v))
		byPod := map[int][]int{}
		var rest []int
		for _, s := range ns {
			if sp := pods[v.Nodes[s].Pod]; sp != nil {
				byPod[v.Nodes[s].Pod] = append(byPod[v.Nodes[s].Pod], s)
			} else {
				rest = append(rest, s)
			}
		}
		for pod, g := range byPod {
			sp := pods[pod]
			spread(v, g, sp.lo-swGap/2, sp.hi+swGap/2)
		}
		spread(v, rest, 0, w)
	}
}

// spread places nodes evenly across [lo, hi].
func spread(v *View, ns []int, lo, hi float64) {
	step := (hi - lo) / float64(max(len(ns), 1))
	for i, s := range ns {
		v.Nodes[s].X = lo + (float64(i)+0.5)*step
	}
}

// switchTiers returns each switch's hop distance from the nearest host
// (1 for a switch with a host on it); switches no host reaches get one
// more than the highest tier.
func switchTiers(t *Topology, isHost map[string]bool, swIdx map[string]int) []int {
	tier := make([]int, len(t.Switches))
	adj := make([][]int, len(t.Switches))
	var queue []int
	for _, l := range t.Links {
		a, aok := swIdx[l.A]
		b, bok := swIdx[l.B]
		switch {
		case aok && bok:
			adj[a] = append(adj[a], b)
			adj[b] = append(adj[b], a)
		case aok && isHost[l.B] && tier[a] == 0:
			tier[a] = 1
			queue = append(queue, a)
		case bok && isHost[l.A] && tier[b] == 0:
			tier[b] = 1
			queue = append(queue, b)
		}
	}
	for len(queue) > 0 {
		u := queue[0]
		queue = queue[1:]
		for _, w := range adj[u] {
			if tier[w] == 0 {
				tier[w] = tier[u] + 1
				queue = append(queue, w)
			}
		}
	}
	top := 1
	for _, x := range tier {
		top = max(top, x)
	}
	for i := range tier {
		if tier[i] == 0 {
			tier[i] = top + 1
		}
	}
	return tier
}

// linkPlane is the plane a link is drawn in: its switch's, or for a link
// between two hosts the A end's port number.
func linkPlane(l TopoLink, t *Topology, swIdx map[string]int, planes int) int {
	if i, ok := swIdx[l.A]; ok {
		return clampPlane(t.Switches[i].Plane, planes)
	}
	if i, ok := swIdx[l.B]; ok {
		return clampPlane(t.Switches[i].Plane, planes)
	}
	return clampPlane(l.APort, planes)
}

func clampPlane(p, planes int) int { return min(max(p, 0), planes-1) }

// shortName drops a builder's "p<plane>-" prefix: the plane box says it.
func shortName(name string, plane int) string {
	return strings.TrimPrefix(name, "p"+strconv.Itoa(plane)+"-")
}

func round1(x float64) float64 { return math.Round(x*10) / 10 }
