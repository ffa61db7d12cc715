package labs

import (
	"fmt"
	"strconv"

	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/sim"
)

// Target is what a fault acts on.
type Target uint8

// Fault targets.
const (
	TargetLink   Target = iota + 1 // one link, by name
	TargetSwitch                   // a switch and every link on it
	TargetPlane                    // every switch and link of one plane
)

// String returns the target's lab-file key: "link", "switch" or "plane".
func (t Target) String() string {
	switch t {
	case TargetLink:
		return "link"
	case TargetSwitch:
		return "switch"
	case TargetPlane:
		return "plane"
	}
	return "target(" + strconv.Itoa(int(t)) + ")"
}

// Action is what a fault does to its target.
type Action uint8

// Fault actions.
const (
	ActionDown   Action = iota + 1 // fail it: packets sent into it are dropped
	ActionUp                       // repair it
	ActionImpair                   // replace its netem impairment
)

// String returns the action's lab-file spelling.
func (a Action) String() string {
	switch a {
	case ActionDown:
		return "down"
	case ActionUp:
		return "up"
	case ActionImpair:
		return "impair"
	}
	return "action(" + strconv.Itoa(int(a)) + ")"
}

// ParseAction parses "down", "up" or "impair".
func ParseAction(s string) (Action, error) {
	for a := ActionDown; a <= ActionImpair; a++ {
		if s == a.String() {
			return a, nil
		}
	}
	return 0, fmt.Errorf("unknown fault action %q (want down, up or impair)", s)
}

// Dir selects which directions of a link an impairment applies to. Its
// zero value is both, so a Fault built in code impairs both directions
// unless it says otherwise. A link's A->B direction is from its first
// endpoint (a) to its second (b); builders make the lower tier the A end.
type Dir uint8

// Link directions.
const (
	DirBoth Dir = iota // both directions
	DirAB              // a -> b only
	DirBA              // b -> a only
)

// String returns the direction's lab-file spelling: "both", "ab", "ba".
func (d Dir) String() string {
	switch d {
	case DirBoth:
		return "both"
	case DirAB:
		return "ab"
	case DirBA:
		return "ba"
	}
	return "dir(" + strconv.Itoa(int(d)) + ")"
}

// Direction returns the fabric's name for d.
func (d Dir) Direction() fabric.Direction {
	switch d {
	case DirAB:
		return fabric.AtoB
	case DirBA:
		return fabric.BtoA
	}
	return fabric.Both
}

// ParseDir parses a direction as lab files write it: "both", "ab" or "ba"
// (fabric's spellings "AtoB" and "BtoA" are accepted too).
func ParseDir(s string) (Dir, error) {
	switch s {
	case "both":
		return DirBoth, nil
	case "ab", "AtoB":
		return DirAB, nil
	case "ba", "BtoA":
		return DirBA, nil
	}
	return 0, fmt.Errorf("unknown direction %q (want both, ab or ba)", s)
}

// Fault is one event of a lab's fault timeline.
type Fault struct {
	At     sim.Time
	Target Target
	// Name is the link's or switch's name (TargetLink, TargetSwitch).
	Name string
	// Plane is the plane number (TargetPlane).
	Plane  int
	Action Action
	// Impair is the new impairment (ActionImpair); ImpairText its netem
	// spelling as written ("none" clears).
	Impair     fabric.Impairment
	ImpairText string
	// Dir limits an impairment of a link to one direction.
	Dir Dir
	// Line is the fault's line in the lab file (0 if not from a file: built
	// in code, or added by a command-line override).
	Line int
}

// Subject names the fault's target: "link p0-leaf0-spine1", "plane 1".
func (f *Fault) Subject() string {
	if f.Target == TargetPlane {
		return "plane " + strconv.Itoa(f.Plane)
	}
	return f.Target.String() + " " + f.Name
}

// String describes the fault: `2ms link p0-leaf0-spine1 down`,
// `1ms link h0-p0 impair "loss random 1%"`.
func (f *Fault) String() string {
	s := f.At.String() + " " + f.Subject() + " " + f.Action.String()
	if f.Action == ActionImpair {
		s += " " + strconv.Quote(f.ImpairText)
		if f.Dir != DirBoth {
			s += " dir " + f.Dir.String()
		}
	}
	return s
}
