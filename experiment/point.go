package experiment

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/labs"
	"github.com/mrlab/mrlab/softnic"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/workload"
)

// Point is one simulation of an experiment: a built-in lab, a workload with
// its flags, and a seed. It is plain data: Command spells the `mrlab sim`
// command that runs the same simulation, so any row of a report can be
// reproduced, and a plan of points can be run anywhere and merged.
type Point struct {
	// Lab names a built-in lab ("incast/pfc"); every fabric and transport
	// setting comes from it.
	Lab string
	// Spec is the workload: Name, Transport, Size, Iterations or Duration,
	// QueueDepth, Conns (0: the lab's), From, To and Timeout are what the
	// command line carries. Spec.Seed is ignored: Seed seeds everything.
	// Spec.Payload is left off the command: results do not depend on it
	// (workload's TestPayloadModesAgree), only the run's speed and memory.
	Spec workload.Spec
	// Seed seeds the fabric, the NICs and the workload (mrlab sim --seed).
	Seed uint64
	// WhatIf changes the lab as mrlab sim's --set, --impair and --fault
	// do: an experiment that sweeps a setting over one bed (such as the
	// link rate) says so in the command, and a run's what-if (Config)
	// follows the experiment's own.
	WhatIf

	// parts is how many partitions the run may use (Config.Partitions;
	// 0 or 1: one plain loop), capped by the bed's hosts when partsAuto.
	// Not part of the command: results do not depend on it.
	parts     int
	partsAuto bool
}

// Args returns the `mrlab` arguments that run the point.
func (p Point) Args() []string {
	s := p.Spec
	a := []string{"sim", p.Lab, "--workload", string(s.Name), "--transport", s.Transport.String(),
		"--seed", strconv.FormatUint(p.Seed, 10)}
	if s.Size > 0 {
		a = append(a, "--size", strconv.Itoa(s.Size))
	}
	if s.Duration > 0 {
		a = append(a, "--duration", timeArg(s.Duration))
	} else if s.Iterations > 0 {
		a = append(a, "--iterations", strconv.Itoa(s.Iterations))
	}
	if s.QueueDepth > 0 {
		a = append(a, "--qd", strconv.Itoa(s.QueueDepth))
	}
	if s.Conns > 0 {
		a = append(a, "--conns", strconv.Itoa(s.Conns))
	}
	if len(s.From) > 0 {
		a = append(a, "--from", strings.Join(s.From, ","))
	}
	if len(s.To) > 0 {
		a = append(a, "--to", strings.Join(s.To, ","))
	}
	a = append(a, p.WhatIf.Args()...)
	return append(a, "--timeout", timeArg(p.timeout()))
}

// Command returns the shell command that runs the point; an argument a
// shell would split or expand is single-quoted.
func (p Point) Command() string {
	args := p.Args()
	for i, a := range args {
		if strings.ContainsAny(a, " \t'\"$`\\*?[]{}()<>|&;~#!") {
			args[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return "mrlab " + strings.Join(args, " ")
}

// defaultTimeout is mrlab sim's --timeout default.
const defaultTimeout = 10 * sim.Second

func (p Point) timeout() sim.Time {
	if p.Spec.Timeout > 0 {
		return p.Spec.Timeout
	}
	return defaultTimeout
}

// timeArg spells t so that sim.ParseTime reads it back exactly.
func timeArg(t sim.Time) string {
	if s := t.String(); mustParse(s) == t {
		return s
	}
	return strconv.FormatInt(int64(t), 10) + "ns"
}

func mustParse(s string) sim.Time {
	t, err := sim.ParseTime(s)
	if err != nil {
		return -1
	}
	return t
}

// probe is what an experiment attaches to a point's run to measure more
// than the workload's result. Probes only read: the simulation is the one
// the point's command runs.
type probe struct {
	// observe sees the fabric before anything is armed (an Observer).
	observe func(net *fabric.Network) error
	// start runs once the NICs exist, before the workload starts (to arm
	// samplers on the loop).
	start func(r *pointRun)
	// onMessage hears every completed application message.
	onMessage func(now sim.Time, bytes int)
}

// pointRun is a point being run: the lab, the built cluster and, once
// done, what the workload measured.
type pointRun struct {
	point Point
	lab   *labs.Lab
	loop  *sim.Loop
	net   *fabric.Network
	cl    *workload.Cluster
	// res and err are the workload's result and error, as `mrlab sim`
	// reports them; end is when the workload finished and t0 when its
	// measured part started (every connection established).
	res     *workload.Result
	err     error
	t0, end sim.Time
}

// run runs the point as `mrlab sim` does: the lab with the point's seed,
// lab.NewCluster (fault timeline armed), then the workload on a
// fresh loop. The error is for a point that could not run at all; a
// workload that failed after it started is in pointRun.err with what it
// measured.
func (p Point) run(pr probe) (*pointRun, error) {
	ovs, err := p.overrides()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p.Lab, err)
	}
	lab, err := labs.ResolveWith(p.Lab, ovs)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p.Lab, err)
	}
	if !labs.IsBuiltin(p.Lab) {
		return nil, fmt.Errorf("%s: an experiment's bed must be a built-in lab", p.Lab)
	}
	lab.Seed = p.Seed
	spec := p.Spec
	spec.Seed = p.Seed
	if spec.Transport == transport.RoCEv2 && lab.Transports.RoCEv2.SelectiveRepeat {
		// Selective repeat places kept packets from copies, whose
		// content a synthetic-payload NIC cannot follow (it tracks
		// content by where it lies in the received packet): real bytes.
		spec.Payload = softnic.PayloadBytes
	}
	spec.Timeout = p.timeout()
	spec.OnMessage = pr.onMessage
	r := &pointRun{point: p, lab: lab}
	if err := r.build(pr, spec); err != nil {
		return nil, fmt.Errorf("%s: %w", p.Lab, err)
	}
	if pr.start != nil {
		pr.start(r)
	}
	r.res, r.err = workload.Run(r.cl, spec)
	if r.res == nil {
		if r.err == nil {
			r.err = fmt.Errorf("%s: no result", p.Command())
		}
		return nil, fmt.Errorf("%s: %w", p.Command(), r.err)
	}
	r.end = r.loop.Now()
	r.t0 = r.end - r.res.Elapsed
	return r, nil
}

// partitionedRuns counts the points run on the partitioned engine (a
// test checks that the partitioned experiments really ran so).
var partitionedRuns atomic.Int64

// build builds the point's cluster: on the partitioned engine when the
// point may use more than one partition and its workload and probe are
// partition-safe (observers are: the fabric merges the partitions'
// records in one loop's order, and start's samplers run on the global
// loop, alone at barriers; an OnMessage hook is not), else on one plain
// loop. Both give the same result.
func (r *pointRun) build(pr probe, spec workload.Spec) error {
	p, lab := r.point, r.lab
	parts := p.parts
	if p.partsAuto {
		parts = min(parts, len(lab.Topology().Hosts)/hostsPerPartition)
	}
	if parts > 1 && workload.PartitionSafe(spec) == nil {
		if plan := lab.PlanPartitions(parts); plan.Parts > 1 {
			// A probe's observe only reads a fresh network: a lab the
			// engine refuses is built again on one loop.
			cl, net, err := lab.NewPartitionedCluster(plan, labs.ClusterSetup{
				OnGroup: func(g *sim.Group) { r.loop = g.Global() },
				Observe: pr.observe,
			})
			if err == nil {
				r.cl, r.net = cl, net
				partitionedRuns.Add(1)
				return nil
			}
			if !errors.Is(err, labs.ErrNotPartitionable) {
				return err
			}
		}
	}
	r.loop = sim.NewLoop()
	var err error
	r.cl, r.net, err = lab.NewCluster(r.loop, packet.NewPool(), labs.ClusterSetup{Observe: pr.observe})
	return err
}

// errText is a run's error as a row shows it ("" for none).
func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// sanityFailure is why the run failed goodput sanity, as its row records
// it (the rows' Sanity), or "": a bandwidth run on a bed with no loss on
// its links (no impairment loss or corruption, no fault timeline) whose
// goodput fell below workload.SanityFraction of what the bed's capacity
// and the workload allow with no loss (workload.Sanity) — a collapse no
// bed explains, so a bug. On a lossy bed a collapse is what the experiment
// measures (RoCEv2's go-back-N in the loss sweep): not judged here; the
// rows' goodput shows it. Nor is RoCEv2 with go-back-N on a fabric that
// drops under congestion (a link without PFC): its collapse when an
// incast overflows a queue is the baseline's known behaviour, which the
// incast experiment measures. MetaRoCE is judged on every loss-free bed,
// RoCEv2 on lossless (PFC) ones and with selective repeat.
func (r *pointRun) sanityFailure() string {
	if r.res == nil || r.res.Sanity.OK || !r.res.Sanity.Judged || len(r.lab.Faults) > 0 {
		return ""
	}
	lossless := true
	for _, k := range r.lab.Topology().Links {
		if imp := k.Params.Impair; imp.Loss != (fabric.LossModel{}) || imp.Corrupt > 0 {
			return ""
		}
		lossless = lossless && k.Params.PFC.XOff > 0
	}
	if r.point.Spec.Transport == transport.RoCEv2 && !r.lab.Transports.RoCEv2.SelectiveRepeat && !lossless {
		return ""
	}
	return r.res.Sanity.Why
}
