// Package experiment reproduces the MetaRoCE seeds' claims in virtual time,
// side by side with the RoCEv2 baseline: goodput under random loss, scaling
// over planes, a plane failure, incast, collectives, and RoCEv2 as deployed
// (PFC, DCQCN) under congestion.
//
// An experiment is lab files plus workloads. Its beds are built-in labs
// (labs/examples/<experiment>/...) that set every fabric and transport
// setting; the experiment only picks which lab, workload, transport and
// seed each simulation runs — a Point — and measures. Every point is one
// `mrlab sim` command away (Point.Command), and that command runs the same
// simulation: both build the lab with labs.Lab.NewCluster. Each case
// runs with several seeds (in parallel on the local cores); tables show
// the median and the min-max over the seeds, and a target is met only if
// the median meets it and no seed falls below the seeds' own figure.
//
// Everything measured comes from the run: nothing here knows what a
// transport "should" achieve. Runs are deterministic: the same experiment,
// scale and seeds give the same rows.
package experiment

import (
	"errors"
	"fmt"
	"io"
	"runtime"
	"sort"
	"strings"

	"github.com/mrlab/mrlab/softnic"
)

// Scale selects how big an experiment runs.
type Scale uint8

// Scales.
const (
	// Full runs the scales the issue asks for (with link rates and sizes
	// scaled down as each report's setup says), in minutes on a 2-core box.
	Full Scale = iota
	// Quick is a smaller run for a first look: the same shape, fewer bytes
	// and hosts, in seconds to tens of seconds.
	Quick
	// Tiny runs in seconds, for tests: small beds or short runs, enough
	// for the claim tests' margins, fewer cases.
	Tiny
)

var scaleNames = [...]string{Full: "full", Quick: "quick", Tiny: "tiny"}

// String returns "full", "quick" or "tiny".
func (s Scale) String() string {
	if int(s) < len(scaleNames) {
		return scaleNames[s]
	}
	return fmt.Sprintf("scale(%d)", uint8(s))
}

// ParseScale parses a Scale's name.
func ParseScale(s string) (Scale, error) {
	for i, n := range scaleNames {
		if n == s {
			return Scale(i), nil
		}
	}
	return 0, fmt.Errorf("unknown scale %q (want full, quick or tiny)", s)
}

// DefaultSeeds is how many seeds every case runs with unless Config says.
const DefaultSeeds = 5

// Config configures one experiment run.
type Config struct {
	// Seed is the first seed (0 means 1); a case runs with seeds Seed,
	// Seed+1, ..., each seeding the fabric, the transports and the
	// workload (as `mrlab sim --seed`).
	Seed uint64
	// Seeds is how many seeds each case runs with (0 means DefaultSeeds).
	Seeds int
	// Scale selects the size of the run.
	Scale Scale
	// Jobs is how many independent simulations run at once, each on its
	// own goroutine and loop (0 means one per CPU). Results do not depend
	// on it.
	Jobs int
	// Progress, if set, gets one line per finished simulation.
	Progress io.Writer
	// Payload is how the workloads hold payload; `mrlab experiment`
	// runs synthetic unless told otherwise. Results do not depend on it.
	Payload softnic.PayloadMode
	// WhatIf changes every bed of the run (mrlab experiment's --set,
	// --impair and --fault), after the bed's own settings and alike for
	// every transport; a what-if touching a setting the experiment varies
	// (Experiment.Varies) is refused. The report says the run is a
	// what-if and lists it.
	WhatIf WhatIf
	// Partitions is how many partitions of the event engine each
	// simulation may run on (results do not depend on it): 0 picks one
	// per CPU left over by Jobs (so Jobs x partitions stays within the
	// CPUs). Either way a bed gets at most one per 16 hosts (a window of
	// a smaller bed holds too few events to pay for its barrier: a 2-host
	// bed runs ~10x slower on 2 partitions), and its plan may use fewer.
	// A point runs on one plain loop when its workload or its probe is
	// not partition-safe (pointRun.build).
	Partitions int
	// exactParts makes every bed take Partitions as asked (tests: small
	// beds on several partitions).
	exactParts bool

	// drive decides what runCases does with the points (sweep.go).
	drive driver
}

func (c Config) withDefaults() Config {
	if c.Seed == 0 {
		c.Seed = 1
	}
	if c.Seeds < 1 {
		c.Seeds = DefaultSeeds
	}
	if c.Jobs < 1 {
		c.Jobs = runtime.NumCPU()
	}
	return c
}

// seeds returns the seeds every case runs with.
// hostsPerPartition is the fewest hosts a partition gets when the count
// is picked for the bed (mrlab sim's rule): a window of a smaller bed
// holds too few events to pay for its barrier.
const hostsPerPartition = 16

// partitions returns the partitions a point may use, and whether the
// count is to be capped by the bed's size.
func (c Config) partitions() (int, bool) {
	if c.Partitions > 0 {
		return c.Partitions, !c.exactParts
	}
	jobs := c.Jobs
	if jobs < 1 {
		jobs = runtime.NumCPU()
	}
	return max(1, runtime.NumCPU()/jobs), true
}

func (c Config) seeds() []uint64 {
	out := make([]uint64, c.Seeds)
	for i := range out {
		out[i] = c.Seed + uint64(i)
	}
	return out
}

// Experiment is one reproducible claim.
type Experiment struct {
	// Name is the command-line name, e.g. "loss-sweep".
	Name string
	// Title is a one-line description.
	Title string
	// Claim is what the seeds report.
	Claim string
	// Target is what mrlab aims to show.
	Target string
	// Varies are the lab settings the experiment sets itself, bed by bed
	// or case by case: a what-if that touches one is refused (as is one
	// touching FixedKnobs).
	Varies []Knob
	run    func(cfg Config) (*Report, error)
}

// ErrUnknown is returned by Lookup for a name that is not an experiment.
var ErrUnknown = errors.New("unknown experiment")

var registry = map[string]Experiment{}

func register(e Experiment) { registry[e.Name] = e }

// All returns every experiment, sorted by name.
func All() []Experiment {
	out := make([]Experiment, 0, len(registry))
	for _, e := range registry {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Names returns the experiments' names, sorted.
func Names() []string {
	var out []string
	for _, e := range All() {
		out = append(out, e.Name)
	}
	return out
}

// Lookup returns the experiment called name.
func Lookup(name string) (Experiment, error) {
	e, ok := registry[name]
	if !ok {
		return Experiment{}, fmt.Errorf("%w %q (want one of %s)", ErrUnknown, name, strings.Join(Names(), ", "))
	}
	return e, nil
}
