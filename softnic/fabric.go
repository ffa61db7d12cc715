package softnic

import (
	"fmt"

	"github.com/mrlab/mrlab/fabric"
)

var (
	_ Wire        = (*fabric.Port)(nil)
	_ upper       = (*fabric.Port)(nil)
	_ fabric.Node = (*NIC)(nil)
)

// Attach connects the NIC to its host (the host named like the NIC) in a
// fabric: the fabric delivers the host's packets to the NIC, and the NIC
// sends on the host's ports, port p on plane p.
func (n *NIC) Attach(net *fabric.Network) error {
	ports, err := net.Attach(n.name, n)
	if err != nil {
		return fmt.Errorf("attaching NIC %q: %w", n.name, err)
	}
	wires := make([]Wire, len(ports))
	for i, p := range ports {
		if p == nil {
			return fmt.Errorf("attaching NIC %q: port %d is not wired", n.name, i)
		}
		wires[i] = p
	}
	return n.SetWires(wires...)
}
