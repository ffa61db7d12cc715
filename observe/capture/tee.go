package capture

import (
	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/internal/tee"
)

// Tee returns an Observer that passes every event to each of obs in order
// (a trace hash, a capture and telemetry can then watch the same network).
// Nil observers are skipped; with none left Tee returns nil, so the network
// keeps its zero-cost path, and with one it returns that one unwrapped.
func Tee(obs ...fabric.Observer) fabric.Observer {
	return tee.Join(func(k []fabric.Observer) fabric.Observer { return observers(k) }, obs...)
}

type observers []fabric.Observer

var _ fabric.Observer = observers(nil)

func (t observers) Observe(now sim.Time, ev fabric.Event, pt fabric.Point, p *packet.Buffer, reason fabric.DropReason) {
	for _, o := range t {
		o.Observe(now, ev, pt, p, reason)
	}
}
