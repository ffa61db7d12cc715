package metaroce

import (
	"math/bits"

	"github.com/mrlab/mrlab/internal/sim"
)

// The sender's own ports (spec §10, "A local port that is down"). The NIC
// knows at once when one of its links goes down; the paths on that port
// then carry nothing (every packet sent there is lost at the port), so
// waiting for their probes to go unanswered (a PTO and more) only delays
// what they hold. SetPortsUp is how the NIC says so.

// SetPortsUp implements transport.PortWatcher: up has bit i set for each
// NIC port whose link is up (the NIC tells each of its connections the
// same). Paths on a port that went down take no new data from now on, and
// their outstanding chunks move to paths that deliver at once (the path
// starts a new generation, as after a timeout, so nothing of its old
// sequence space is waited for). Their timers stop: nothing can leave by
// the port. When the port comes back, its paths probe (Probing) and return
// to service when a probe is answered, as a path that timed out does: the
// route past the port may still be down. A connection none of whose ports
// is up keeps its paths as they are, so that they time out and its
// give-up clock runs as for any route that died.
func (c *Conn) SetPortsUp(now sim.Time, up uint32) {
	c.now = now
	ports := c.cfg.Ports
	all := ^uint32(0)
	if ports < 32 {
		all = uint32(1)<<ports - 1
	}
	down := ^up & all
	if down == all {
		down = 0 // nothing to move to: the paths time out as before
	}
	c.proto.portsDown = down // NIC-wide: paths allocated later start so (ensurePaths)
	changed := false
	for i := range c.s.paths {
		p := &c.s.paths[i]
		isDown := down>>(p.plane(ports)%32)&1 != 0
		switch {
		case isDown && !p.portDown:
			c.localPortDown(p)
		case !isDown && p.portDown:
			c.localPortUp(p)
		default:
			continue
		}
		changed = true
	}
	if changed {
		c.s.pathsChanged()
		if c.cfg.Trace != nil {
			c.tracef("local ports down %#b", down)
		}
	}
}

// localPortDown takes p out of service while its port is down: what it
// holds moves to the retransmit queue and it starts a new generation on
// the same entropy (the entropy is not to blame).
func (c *Conn) localPortDown(p *sndPath) {
	p.portDown, p.probeWant = true, false
	if !p.used() {
		return
	}
	moved := c.abandon(p)
	p.gen++
	p.sb.restart()
	p.tlpSent, p.tlps, p.suspect, p.silentLoss = false, 0, false, false
	p.lastCE, p.lastRx = 0, 0
	p.roundPkts, p.roundCE, p.roundEnd, p.markRounds, p.heavy = 0, 0, 0, 0, false
	p.genSent, p.genLost = 0, 0
	p.rackAt = 0
	c.flagPath(p)
	c.armPath(p)
	if c.cfg.Trace != nil && moved > 0 {
		c.tracef("path %d: local port down, %d chunks moved to other paths (gen %d)", p.id, moved, p.gen)
	}
}

// localPortUp returns p to service by way of a probe.
func (c *Conn) localPortUp(p *sndPath) {
	c.use(p)
	p.portDown = false
	if p.state == PathActive || p.state == PathDraining {
		p.state = PathProbing
		p.timeouts = 0
	}
	c.probeSoon(p)
	c.armPath(p)
}

// livePorts is how many of the connection's ports are not known down.
func (c *Conn) livePorts() int {
	return max(c.cfg.Ports-bits.OnesCount32(c.proto.portsDown), 1)
}
