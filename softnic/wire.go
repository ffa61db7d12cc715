package softnic

import (
	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
)

// Wire is what the NIC needs from one of its ports' outgoing links. The
// fabric's *fabric.Port satisfies it; tests use a fake.
//
// Transmission is pull-style: the NIC sends while the wire is idle and then
// waits for the wire's idle callback, so it never floods its own uplink.
type Wire interface {
	// Send hands p to the link; the wire owns p afterwards.
	Send(now sim.Time, p *packet.Buffer)
	// Idle reports whether the link can take another packet now.
	Idle() bool
	// SetOnIdle registers the callback run whenever the link becomes idle.
	SetOnIdle(fn func(now sim.Time))
	// Rate is the link's rate in bits per second.
	Rate() float64
}

// upper is implemented by wires that can fail (the fabric's ports). The NIC
// keeps host traffic off a port that is down and tells the transports
// that watch their ports (transport.PortWatcher), as a NIC's port state
// (its PHY's link) is known to its transport engine; failures past the
// port (a switch, a link further on) transports find by themselves.
type upper interface{ Up() bool }

// HostPort is the NIC's netdev side: where packets that are not for an RDMA
// transport go (the kernel's TUN device in live labs). Deliver must not keep
// ip after it returns.
type HostPort interface {
	Deliver(now sim.Time, ip []byte)
}
