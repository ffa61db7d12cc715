package web

import (
	"strconv"

	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/sim"
)

// Topology is a lab's fabric as the web view needs it: names, ends and
// rates, in the fabric's own order. Link i's directions are the view's
// direction indices 2i (AtoB, from A to B) and 2i+1 (BtoA), as
// fabric.Port.Index numbers them.
type Topology struct {
	Name     string       `json:"name"`
	Planes   int          `json:"planes"`
	Hosts    []TopoHost   `json:"hosts"`
	Switches []TopoSwitch `json:"switches"`
	Links    []TopoLink   `json:"links"`
}

// TopoHost is a host: its name, address and number of NIC ports.
type TopoHost struct {
	Name  string `json:"name"`
	Addr  string `json:"addr"`
	Ports int    `json:"ports"`
}

// TopoSwitch is a switch and its plane.
type TopoSwitch struct {
	Name  string `json:"name"`
	Plane int    `json:"plane"`
	Role  string `json:"role"`
}

// TopoLink is a full-duplex link between two node ports.
type TopoLink struct {
	Name  string   `json:"name"`
	A     string   `json:"a"`
	APort int      `json:"a_port"`
	B     string   `json:"b"`
	BPort int      `json:"b_port"`
	Rate  float64  `json:"rate_bps"`
	Delay sim.Time `json:"delay_ns"`
	Queue int      `json:"queue_bytes"`
}

// TopologyOf converts a fabric topology.
func TopologyOf(t *fabric.Topology) Topology {
	out := Topology{Name: t.Name, Planes: max(t.Planes, 1)}
	for _, h := range t.Hosts {
		out.Hosts = append(out.Hosts, TopoHost{Name: h.Name, Addr: h.Addr.String(), Ports: h.Ports})
	}
	for _, s := range t.Switches {
		out.Switches = append(out.Switches, TopoSwitch{Name: s.Name, Plane: s.Plane, Role: s.Role})
	}
	for _, l := range t.Links {
		q := l.Params.QueueBytes
		if q == 0 {
			q = fabric.DefaultQueueBytes
		}
		out.Links = append(out.Links, TopoLink{Name: l.Name, A: l.A.Node, APort: l.A.Port, B: l.B.Node, BPort: l.B.Port,
			Rate: l.Params.Rate, Delay: l.Params.Delay, Queue: q})
	}
	return out
}

// NumDirs returns the number of link directions.
func (t *Topology) NumDirs() int { return 2 * len(t.Links) }

// DirName names direction d as captures and counters do: "link:AtoB".
func (t *Topology) DirName(d int) string {
	if d < 0 || d >= t.NumDirs() {
		return "dir(" + strconv.Itoa(d) + ")"
	}
	if d%2 == 0 {
		return t.Links[d/2].Name + ":AtoB"
	}
	return t.Links[d/2].Name + ":BtoA"
}
