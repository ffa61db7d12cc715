package softnic

import (
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
)

// The NIC's own port state, told to the transports that act on it
// (transport.PortWatcher): a NIC knows at once when its link goes down,
// as a real NIC's PHY does.

// checkPort notes a change of pt's link state and tells every
// connection that watches its NIC's ports (transport.PortWatcher). The
// wire calls the port's idle callback when its link goes down or comes
// back, and the NIC looks whenever it is about to send, so a change is
// seen at once.
func (n *NIC) checkPort(now sim.Time, pt *nicPort) {
	if pt.up == nil || pt.up.Up() != pt.down {
		return
	}
	pt.down = !pt.down
	up := n.PortsUp()
	for _, c := range n.conns {
		if c == nil {
			continue
		}
		if w, ok := c.tc.(transport.PortWatcher); ok {
			w.SetPortsUp(now, up)
			n.afterIO(now, c)
		}
	}
}

// tellPorts gives a new connection its NIC's port state if a port is
// down (a transport that is not told assumes every port is up).
func (n *NIC) tellPorts(now sim.Time, c *Conn) {
	for i := range n.ports {
		if n.ports[i].down {
			if w, ok := c.tc.(transport.PortWatcher); ok {
				w.SetPortsUp(now, n.PortsUp())
			}
			return
		}
	}
}
