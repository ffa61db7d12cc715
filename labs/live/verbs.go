package live

import (
	"fmt"
	"net"
	"path/filepath"

	"github.com/mrlab/mrlab/internal/verbsabi"
	"github.com/mrlab/mrlab/labs/hostns"
	"github.com/mrlab/mrlab/labs/uverbs"
)

// startVerbs serves the verbs endpoint in every host's namespace
// (package uverbs): the NIC's door for programs running in the host. The
// pacer polls the endpoints' rings between events. Labs on fake devices
// (no namespaces) serve none.
func (l *Lab) startVerbs() error {
	vh, ok := l.eng.(VerbsHost)
	if !ok || len(l.nss) != len(l.hosts) {
		return nil
	}
	set := uverbs.NewSet(l.pacer)
	l.verbs = set
	for i, h := range l.hosts {
		ns := l.nss[i]
		var ln *net.UnixListener
		if err := ns.Do(func() (err error) {
			ln, err = uverbs.Listen(verbsabi.SocketName)
			return err
		}); err != nil {
			return fmt.Errorf("lab %s host %s: %w", l.name, h.label, err)
		}
		id, err := uverbs.NetnsOf(filepath.Join(hostns.NetnsDir, ns.Name()))
		if err != nil {
			ln.Close()
			return fmt.Errorf("lab %s host %s: %w", l.name, h.label, err)
		}
		if _, err := set.Add(uverbs.Config{Host: h.label, NIC: vh.NIC(i), Netns: id, Trace: vh.Tracer(i), Logf: l.opts.Logf,
			Watch: l.pacer.watchTiming}, ln); err != nil {
			ln.Close()
			return err
		}
	}
	l.pacer.SetPoller(set)
	return nil
}

// watchTiming follows the loop's lateness for a verbs client's WATCH, as
// perf runs over the control socket are followed (lagWatch): every event
// the loop runs meanwhile counts. Loop goroutine.
func (p *Pacer) watchTiming() func() uverbs.Timing {
	w := p.watch()
	return func() uverbs.Timing {
		t := w.stop()
		return uverbs.Timing{LabTime: t.LabTime, WallTime: t.WallTime, MaxLateness: t.MaxLateness,
			Events: t.Events, EventsLate: t.EventsLate, Lagging: t.Lagging(), Limit: MaxLagFraction, LoopStarved: t.LoopStarved()}
	}
}
