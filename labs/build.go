package labs

import (
	"fmt"

	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
)

// Build builds the lab's fabric on s, with every link's final parameters
// and the lab's seed and failure-detection delay. Hosts have no NICs yet:
// attach them with Network.Attach. Build does not arm the fault timeline
// (see ScheduleFaults).
func (l *Lab) Build(s sim.Scheduler, pool *packet.Pool) (*fabric.Network, error) {
	n, err := fabric.Build(s, pool, l.topo, fabric.BuildOptions{Seed: l.Seed, DetectionDelay: l.DetectionDelay})
	if err != nil {
		return nil, fmt.Errorf("building lab %s: %w", l.Name, err)
	}
	return n, nil
}

// Faulter is what a fault acts on. *fabric.Network is one; the live
// runtime's control server and tests may wrap or fake it.
type Faulter interface {
	SetLinkUp(now sim.Time, link string, up bool) error
	SetSwitchUp(now sim.Time, sw string, up bool) error
	SetPlaneUp(now sim.Time, plane int, up bool) error
	SetImpairment(link string, dir fabric.Direction, imp fabric.Impairment) error
}

var _ Faulter = (*fabric.Network)(nil)

// Apply performs one fault now. Down and up act on a link, a switch (and
// so every link on it) or a whole plane. Impair replaces the netem
// impairment of a link (in f.Dir), or of every link on a switch or in a
// plane (both directions). Apply checks f's names against the lab, so it
// serves faults typed at a running lab as well as the timeline.
func (l *Lab) Apply(now sim.Time, f *Fault, n Faulter) error {
	up := f.Action == ActionUp
	var err error
	switch {
	case f.Action != ActionDown && f.Action != ActionUp && f.Action != ActionImpair:
		err = fmt.Errorf("unknown action %v", f.Action)
	case f.Action == ActionImpair:
		var links []string
		links, err = l.linksOf(f)
		for _, k := range links {
			dir := fabric.Both
			if f.Target == TargetLink {
				dir = f.Dir.Direction()
			}
			if err = n.SetImpairment(k, dir, f.Impair); err != nil {
				break
			}
		}
	case f.Target == TargetLink:
		if _, err = l.linksOf(f); err == nil {
			err = n.SetLinkUp(now, f.Name, up)
		}
	case f.Target == TargetSwitch:
		if _, err = l.linksOf(f); err == nil {
			err = n.SetSwitchUp(now, f.Name, up)
		}
	case f.Target == TargetPlane:
		if _, err = l.linksOf(f); err == nil {
			err = n.SetPlaneUp(now, f.Plane, up)
		}
	default:
		err = fmt.Errorf("unknown target %v", f.Target)
	}
	if err != nil {
		return fmt.Errorf("fault %v: %w", f, err)
	}
	return nil
}

// linksOf returns the links a fault touches, or an error if its target is
// not in the lab.
func (l *Lab) linksOf(f *Fault) ([]string, error) {
	planeOf := make(map[string]int, len(l.topo.Switches))
	for _, sw := range l.topo.Switches {
		planeOf[sw.Name] = sw.Plane
	}
	var out []string
	switch f.Target {
	case TargetLink:
		for _, k := range l.topo.Links {
			if k.Name == f.Name {
				return []string{k.Name}, nil
			}
		}
		return nil, fmt.Errorf("no link named %q in lab %s", f.Name, l.Name)
	case TargetSwitch:
		if _, ok := planeOf[f.Name]; !ok {
			return nil, fmt.Errorf("no switch named %q in lab %s", f.Name, l.Name)
		}
		for _, k := range l.topo.Links {
			if k.A.Node == f.Name || k.B.Node == f.Name {
				out = append(out, k.Name)
			}
		}
	case TargetPlane:
		if f.Plane < 0 || f.Plane >= l.topo.Planes {
			return nil, fmt.Errorf("no plane %d in lab %s (it has %d)", f.Plane, l.Name, l.topo.Planes)
		}
		for _, k := range l.topo.Links {
			if p, ok := linkPlane(k, planeOf); ok && p == f.Plane {
				out = append(out, k.Name)
			}
		}
	default:
		return nil, fmt.Errorf("unknown target %v", f.Target)
	}
	return out, nil
}

// linkPlane returns the plane of a link: that of a switch at either end.
// Host-to-host links (back to back) carry the plane of the host port.
func linkPlane(k fabric.Link, planeOf map[string]int) (int, bool) {
	if p, ok := planeOf[k.A.Node]; ok {
		return p, true
	}
	if p, ok := planeOf[k.B.Node]; ok {
		return p, true
	}
	return k.A.Port, true
}

// LinkPlanes maps every link's name to its plane: the plane of the
// switch at either end, or for a host-to-host link the host's port
// number (port i is the NIC's plane-i port).
func (l *Lab) LinkPlanes() map[string]int {
	planeOf := make(map[string]int, len(l.topo.Switches))
	for _, sw := range l.topo.Switches {
		planeOf[sw.Name] = sw.Plane
	}
	out := make(map[string]int, len(l.topo.Links))
	for _, k := range l.topo.Links {
		out[k.Name], _ = linkPlane(k, planeOf)
	}
	return out
}

// FaultReport is told about each fault of a timeline when it fires, with
// the error applying it gave (nil on success).
type FaultReport func(now sim.Time, f *Fault, err error)

// scheduledFault is one armed fault of a timeline.
type scheduledFault struct {
	timer  sim.Timer
	lab    *Lab
	fault  Fault
	n      Faulter
	report FaultReport
}

func fireFault(now sim.Time, arg any) {
	sf := arg.(*scheduledFault)
	err := sf.lab.Apply(now, &sf.fault, sf.n)
	if sf.report != nil {
		sf.report(now, &sf.fault, err)
	}
}

// ScheduleFaults arms the lab's fault timeline on s against n. Fault
// times count from s.Now() (the start of the run); faults at the same time
// fire in file order. report, if not nil, hears of each fault as it
// fires. Every fault's target is checked first: nothing is armed if one
// is missing.
func (l *Lab) ScheduleFaults(s sim.Scheduler, n Faulter, report FaultReport) error {
	for i := range l.Faults {
		if _, err := l.linksOf(&l.Faults[i]); err != nil {
			return fmt.Errorf("scheduling faults of lab %s: fault %d (line %d): %w", l.Name, i, l.Faults[i].Line, err)
		}
	}
	start := s.Now()
	for _, f := range l.Faults {
		sf := &scheduledFault{lab: l, fault: f, n: n, report: report}
		sf.timer.Init(fireFault, sf)
		s.Arm(&sf.timer, start+f.At)
	}
	return nil
}
