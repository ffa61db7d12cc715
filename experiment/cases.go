package experiment

import (
	"fmt"
	"net/netip"

	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/labs"
	"github.com/mrlab/mrlab/transport"
)

// Fabric kinds: a bed without PFC (drop-tail) or with PFC on every link.
const (
	FabricLossy    = "lossy"
	FabricLossless = "lossless (PFC)"
)

// side is one side of a comparison: a transport on a kind of fabric.
// modern marks RoCEv2 with the loss recovery of current NICs (selective
// repeat, adaptive retransmission, slow restart) on its own beds.
type side struct {
	kind   transport.Kind
	pfc    bool
	modern bool
}

// transport names the side's transport as rows show it: "rocev2-modern"
// for RoCEv2 with the loss recovery of current NICs.
func (s side) transport() string {
	if s.modern {
		return s.kind.String() + "-modern"
	}
	return s.kind.String()
}

func (s side) fabric() string {
	if s.pfc {
		return FabricLossless
	}
	return FabricLossy
}

func (s side) String() string { return s.transport() + " " + s.fabric() }

var (
	metaroceLossy  = side{transport.MetaRoCE, false, false}
	rocev2Lossy    = side{transport.RoCEv2, false, false}
	rocev2Lossless = side{transport.RoCEv2, true, false}
	rocev2Modern   = side{transport.RoCEv2, false, true}
)

// hostsByLeaf picks n hosts of a leaf/spine bed spread over its leaves,
// round robin starting from the second leaf, never host skip: the senders
// of an incast into skip.
func hostsByLeaf(leaves, perLeaf, n int, skip string) []string {
	var out []string
	for k := 0; len(out) < n && k < perLeaf; k++ {
		for l := 1; l <= leaves && len(out) < n; l++ {
			h := fmt.Sprintf("h%d", (l%leaves)*perLeaf+k)
			if h != skip {
				out = append(out, h)
			}
		}
	}
	return out
}

// hostNames returns h<from>..h<to-1>.
func hostNames(from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("h%d", i))
	}
	return out
}

// linkBytes reads a link direction's transmitted bytes.
func linkBytes(net *fabric.Network, link string, dir fabric.Direction) uint64 {
	lc, _ := net.Counters().Link(link, dir)
	return lc.TxBytes
}

// serialize returns how long n bytes take at rate.
func serialize(n int, rate float64) float64 { return float64(n) * 8 / rate * 1e9 }

// hostCapacity is what every host of a lab can receive at once: the sum
// of its host links' rates (one direction), in bit/s.
func hostCapacity(lab *labs.Lab) float64 {
	topo := lab.Topology()
	hosts := map[string]bool{}
	for _, h := range topo.Hosts {
		hosts[h.Name] = true
	}
	var c float64
	for _, k := range topo.Links {
		if hosts[k.A.Node] || hosts[k.B.Node] {
			c += k.Params.Rate
		}
	}
	return c
}

// hostAddrs maps a network's host addresses to host names.
func hostAddrs(net *fabric.Network) map[netip.Addr]string {
	m := map[netip.Addr]string{}
	for _, h := range net.Topology().Hosts {
		m[h.Addr] = h.Name
	}
	return m
}
