package labs

import (
	"github.com/mrlab/mrlab/fabric"
)

// runBuilder runs the topology's builder. (Placeholder until fabric's
// builders land.)
func (t *topoSpec) runBuilder(d *decoder, s *spec) *fabric.Topology {
	d.errorf(t.builderNode, "topology."+t.builder, "builder not available yet")
	return nil
}
