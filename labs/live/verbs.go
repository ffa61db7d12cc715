package live

import (
	"fmt"
	"net"
	"path/filepath"
	"time"

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

// verbsLagLimit is how far behind the wall clock, as a fraction of a
// measurement's lab time, the lab may fall before a verbs client's
// figures are reported as lagging: by that fraction at most is any rate or
// duration measured over the interval off.
const verbsLagLimit = 0.01

// watchTiming follows the loop's lateness for a verbs client's WATCH.
// Loop goroutine. The pacer keeps only the run's worst lateness: if it
// grew during the watch it is the interval's; otherwise events late by
// more than the threshold bound the interval's worst from below, as does
// how far behind the loop is at the end.
func (p *Pacer) watchTiming() func() uverbs.Timing {
	lab0, wall0 := p.loop.Now(), p.elapsed()
	events0, late0, max0 := p.lag.Events, p.lag.EventsLate, p.lag.MaxLag
	return func() uverbs.Timing {
		t := uverbs.Timing{LabTime: time.Duration(p.loop.Now() - lab0), WallTime: time.Duration(p.elapsed() - wall0),
			Events: p.lag.Events - events0, EventsLate: p.lag.EventsLate - late0, Limit: verbsLagLimit}
		if p.lag.MaxLag > max0 {
			t.MaxLateness = p.lag.MaxLag
		}
		if t.EventsLate > 0 {
			t.MaxLateness = max(t.MaxLateness, p.cfg.LagThreshold)
		}
		if behind := time.Duration(p.elapsed() - p.loop.Now()); behind > t.MaxLateness {
			t.MaxLateness = behind
		}
		limit := time.Duration(verbsLagLimit * float64(t.LabTime))
		t.Lagging = t.MaxLateness > limit || t.WallTime-t.LabTime > limit
		return t
	}
}
