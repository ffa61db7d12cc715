package labs

import (
	"github.com/mrlab/mrlab/fabric"
)

// maxLinks bounds a lab's size. The builders accept parameters whose
// product is millions of links; a lab that big is a typo, and building it
// would take the machine's memory before saying so.
const maxLinks = 1 << 18

// builderLinks returns how many links the builder will make.
func (t *topoSpec) builderLinks() int {
	switch t.builder {
	case "leafspine":
		ls := t.leafSpine
		return ls.planes * ls.leaves * (ls.hostsPerLeaf + ls.spines)
	case "backtoback":
		return t.backToBack.planes
	case "fattree":
		k := t.fatTree.k
		return t.fatTree.planes * 3 * k * k * k / 4
	}
	return 0
}

// runBuilder runs the topology's builder with the lab's link classes. A
// builder's refusal is placed at its key in the file.
func (t *topoSpec) runBuilder(d *decoder, s *spec) *fabric.Topology {
	if n := t.builderLinks(); n > maxLinks {
		d.errorf(t.builderNode, "topology."+t.builder, "would make %d links; mrlab labs have at most %d", n, maxLinks)
		return nil
	}
	host, fab := s.classParams(true), s.classParams(false)
	var topo *fabric.Topology
	var err error
	switch t.builder {
	case "leafspine":
		ls := t.leafSpine
		if ls.oversubNode != nil && s.linkFab.rate != nil {
			d.errorf(ls.oversubNode, "topology.leafspine.oversubscription",
				"sets the fabric links' rate, and so does links.fabric.rate: keep one")
			return nil
		}
		topo, err = fabric.LeafSpine(fabric.LeafSpineParams{
			Name: s.name, Planes: ls.planes, Leaves: ls.leaves, Spines: ls.spines, HostsPerLeaf: ls.hostsPerLeaf,
			HostLink: host, FabricLink: fab, Oversubscription: ls.oversub,
		})
	case "backtoback":
		// Both ends are hosts: these are host links.
		topo, err = fabric.BackToBack(fabric.BackToBackParams{Name: s.name, Planes: t.backToBack.planes, Link: host})
	case "fattree":
		topo, err = fabric.FatTree(fabric.FatTreeParams{
			Name: s.name, K: t.fatTree.k, Planes: t.fatTree.planes, HostLink: host, FabricLink: fab,
		})
	default:
		d.errorf(t.builderNode, "topology."+t.builder, "unknown builder")
		return nil
	}
	if err != nil {
		d.errorf(t.builderNode, "topology."+t.builder, "%v", err)
		return nil
	}
	return topo
}
