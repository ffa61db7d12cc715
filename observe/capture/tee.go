package capture

import (
	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
)

// Tee returns an Observer that passes every event to each of obs in order
// (a trace hash, a capture and telemetry can then watch the same network).
// Nil observers are skipped; with none left Tee returns nil, so the network
// keeps its zero-cost path, and with one it returns that one unwrapped.
func Tee(obs ...fabric.Observer) fabric.Observer {
	var keep tee
	for _, o := range obs {
		if o != nil {
			keep = append(keep, o)
		}
	}
	switch len(keep) {
	case 0:
		return nil
	case 1:
		return keep[0]
	}
	return keep
}

type tee []fabric.Observer

var _ fabric.Observer = tee(nil)

func (t tee) Observe(now sim.Time, ev fabric.Event, pt fabric.Point, p *packet.Buffer, reason fabric.DropReason) {
	for _, o := range t {
		o.Observe(now, ev, pt, p, reason)
	}
}
