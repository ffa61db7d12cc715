package main

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/fabric/partition"
	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/labs"
	"github.com/mrlab/mrlab/observe/capture"
	"github.com/mrlab/mrlab/softnic"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/workload"
)

// compareWorkload is `mrlab sim`'s default: the demo permutation run once
// with MetaRoCE and once with RoCEv2 on the same lab and seed.
const compareWorkload = "compare"

// rdmaFlags are mrlab's own flags of the RDMA workloads (package
// workload); perftest's are in perftest.go.
func rdmaFlags() []cli.Flag {
	c := "RDMA workloads"
	return []cli.Flag{
		&cli.StringFlag{Name: "streams", Category: c, Usage: "ordered streams per connection (MetaRoCE, 1..1024)", DefaultText: "1"},
		&cli.StringFlag{Name: "paths", Category: c, Usage: "MetaRoCE paths per connection (1..256)", DefaultText: "8 per plane, at least 16"},
		&cli.StringSliceFlag{Name: "from", Category: c, Usage: "sending hosts (point-to-point, incast) or participants (collectives)"},
		&cli.StringSliceFlag{Name: "to", Category: c, Usage: "receiving host(s)"},
		&cli.StringFlag{Name: "timeout", Category: c, Value: "10s", Usage: "virtual-time limit of the run"},
		&cli.StringFlag{Name: "payload", Category: c, Usage: "synthetic (memory content tracked, not stored or copied) or bytes (every byte real); results do not depend on it",
			DefaultText: fmt.Sprintf("bytes up to %d hosts, synthetic above", bytePayloadHosts)},
	}
}

// isRDMAWorkload reports whether name is run by package workload.
func isRDMAWorkload(name string) bool {
	if name == compareWorkload {
		return true
	}
	_, err := workload.ParseName(name)
	return err == nil
}

func rdmaWorkloadUsage() []string {
	u := []string{fmt.Sprintf("  %-11s %s", compareWorkload, "(default) MetaRoCE and RoCEv2 side by side: a permutation of 64 KiB WRITEs on the same lab and seed")}
	for _, n := range workload.Names() {
		u = append(u, fmt.Sprintf("  %-11s %s", n, rdmaUsage[n]))
	}
	return u
}

var rdmaUsage = map[workload.Name]string{
	workload.WriteBW:     "perftest ib_write_bw: --from host WRITEs to --to host",
	workload.SendBW:      "perftest ib_send_bw: SENDs matched to posted RECVs",
	workload.ReadBW:      "perftest ib_read_bw: --from host READs from --to host",
	workload.WriteLat:    "perftest ib_write_lat: ping-pong WRITEs, latency percentiles",
	workload.SendLat:     "perftest ib_send_lat: ping-pong SENDs into posted RECVs",
	workload.ReadLat:     "perftest ib_read_lat: one READ at a time, round-trip latency",
	workload.Permutation: "every host WRITEs to another (a random permutation)",
	workload.Incast:      "N-to-1: every --from host WRITEs to one --to host",
	workload.AllToAll:    "each host sends --size/N to every other host",
	workload.AllReduce:   "ring all-reduce (reduce-scatter + all-gather) of a --size vector",
}

// bytePayloadHosts is the largest lab whose RDMA workloads `mrlab sim`
// runs with real payload bytes by default: small labs are the ones people
// read packet by packet; larger ones run synthetic (same results, no
// payload memory).
const bytePayloadHosts = 16

// rdmaSpec reads the RDMA workload flags for a lab of hosts hosts:
// perftest's, then mrlab's.
func rdmaSpec(c *cli.Context, name string, seed uint64, hosts int) (perftestRun, error) {
	p, err := readPerftest(c, "sim", workload.Name(name))
	if err != nil {
		return p, err
	}
	s := &p.Spec
	if name == compareWorkload {
		d := workload.DemoSpec()
		s.Name = d.Name
		s.Size = cmp.Or(s.Size, d.Size)
		s.Iterations = cmp.Or(s.Iterations, d.Iterations)
		s.QueueDepth = cmp.Or(s.QueueDepth, d.QueueDepth)
		if p.Sweep || p.Infinite {
			return p, usagef("sim: --all and --run_infinitely run one perftest test: add --workload write_bw (or another)")
		}
	} else if p.Sweep && !workload.Name(name).IsPerftest() {
		return p, usagef("sim: --all sweeps the perftest tests' message size; %s takes --size", name)
	}
	s.Seed = seed
	if c.IsSet("streams") {
		n, err := strconv.Atoi(c.String("streams"))
		if err != nil || n < 1 || n > 1024 {
			return p, usagef("sim: --streams %q: want a whole number from 1 to 1024", c.String("streams"))
		}
		s.Streams = n
	}
	s.From = c.StringSlice("from")
	s.To = c.StringSlice("to")
	t, err := sim.ParseTime(c.String("timeout"))
	if err != nil || t <= 0 {
		return p, usagef("sim: --timeout %q: want a positive duration such as 10s", c.String("timeout"))
	}
	s.Timeout = t
	if hosts > bytePayloadHosts {
		s.Payload = softnic.PayloadSynthetic
	}
	if c.IsSet("payload") {
		if s.Payload, err = softnic.ParsePayloadMode(c.String("payload")); err != nil {
			return p, usageError{fmt.Errorf("sim: --payload: %w", err)}
		}
	}
	if p.Infinite {
		// Until interrupted, or until --timeout if given.
		s.Duration = 1 << 62
		if c.IsSet("timeout") {
			s.Duration = t
		}
		s.Timeout = s.Duration + 10*sim.Second
		s.Interval = p.Interval
	}
	return p, nil
}

// rdmaAction runs an RDMA workload (or the comparison) on lab.
//
// The steps: read the flags (newRDMARun), run the comparison, the
// endless run or each size (runSizes) on clusters from build, gather the
// observers', faults' and trace hashes' report (extras), write the
// results (writeResults) and judge them (verdict).
func rdmaAction(c *cli.Context, lab *labs.Lab, name string) error {
	r, err := newRDMARun(c, lab, name)
	if err != nil {
		return err
	}
	spec := r.p.Spec
	var results []*workload.Result
	var runErr error
	switch {
	case name == compareWorkload:
		results, runErr = workload.CompareWith(r.build, spec, runner(c, "sim compare on "+lab.Name), r.kinds...)
	case r.p.Infinite:
		spec.Transport = r.transport()
		return runInfinitely(c, r.build, spec, r.p)
	default:
		spec.Transport = r.transport()
		var err error
		if results, runErr, err = r.runSizes(spec); err != nil {
			return err
		}
	}
	extra, traceHashes, err := r.extras(results)
	if err != nil && runErr == nil {
		runErr = err
	}
	if len(results) > 0 {
		if err := r.writeResults(results, &extra, traceHashes); err != nil {
			return err
		}
		if name != compareWorkload {
			if err := writeOutJSON(r.p, results[len(results)-1]); err != nil && runErr == nil {
				runErr = err
			}
		}
	}
	return r.verdict(results, runErr)
}

// rdmaRun is one RDMA workload command: its flags, and what building its
// clusters leaves for the report.
type rdmaRun struct {
	c     *cli.Context
	lab   *labs.Lab
	name  string
	p     perftestRun
	paths int              // --paths; 0: the lab's
	kinds []transport.Kind // the transports to run, in order
	// obs and loop belong to the last cluster built; with observation on
	// there is exactly one.
	obs    *simObserver
	loop   *sim.Loop
	faults *faultLog           // the last run's (every run fires the same timeline)
	hashes []*fabric.TraceHash // one per run, in the order of the runs
	// plan is where the runs' clusters run: more than one partition on
	// the partitioned engine, else one plain loop (same result).
	plan *partition.Plan
}

// newRDMARun reads the RDMA workload flags for lab and refuses the
// combinations that cannot be observed.
func newRDMARun(c *cli.Context, lab *labs.Lab, name string) (*rdmaRun, error) {
	p, err := rdmaSpec(c, name, lab.Seed, len(lab.Topology().Hosts))
	if err != nil {
		return nil, err
	}
	noteIgnored(c, c.App.ErrWriter, false)
	r := &rdmaRun{c: c, lab: lab, name: name, p: p, kinds: []transport.Kind{transport.MetaRoCE, transport.RoCEv2}}
	if c.IsSet("paths") {
		n, err := strconv.Atoi(c.String("paths"))
		if err != nil || n < 1 || n > 256 {
			return nil, usagef("sim: --paths %q: want a whole number from 1 to 256", c.String("paths"))
		}
		r.paths = n
	}
	if c.IsSet("transport") {
		k, err := transport.ParseKind(c.String("transport"))
		if err != nil {
			return nil, usageError{fmt.Errorf("sim: --transport: %w", err)}
		}
		r.kinds = []transport.Kind{k}
	}
	if name == compareWorkload && len(r.kinds) > 1 && observing(c) {
		return nil, usagef("sim: captures, telemetry, traces and recordings follow one run: add --transport or --workload NAME")
	}
	if p.Sweep && observing(c) {
		return nil, usagef("sim: captures, telemetry and traces follow one run: drop --all")
	}
	asked, explicit, err := askedPartitions(c, "sim", lab)
	if err != nil {
		return nil, err
	}
	var why string
	switch {
	case c.IsSet("trace") || c.IsSet("record") || c.IsSet("web"):
		// Trace hashes, captures and telemetry run partitioned: the
		// partitions' records merge in one loop's order (fabric).
		why = "transport traces and recordings see one global order: not partition-safe yet"
	case p.Infinite:
		why = "an endless run reports intervals as it goes"
	default:
		if err := workload.PartitionSafe(p.Spec); err != nil {
			why = err.Error()
		}
	}
	r.plan = planPartitions(c.App.ErrWriter, "sim", lab, asked, explicit, why)
	return r, nil
}

// transport is the transport of a run that is not the comparison: the
// lab's, or --transport's.
func (r *rdmaRun) transport() transport.Kind {
	if r.c.IsSet("transport") {
		return r.kinds[0]
	}
	return r.lab.Transport
}

// build builds a cluster of the lab on a new loop, with the NIC options
// the flags ask for and the observers attached.
func (r *rdmaRun) build() (*workload.Cluster, error) {
	nic := func(o *workload.NICOptions) {
		o.PathMTU = r.p.MTU
		if r.paths > 0 {
			o.MetaRoCE.Paths = r.paths
		}
	}
	if r.plan != nil && r.plan.Parts > 1 {
		// Observers as on one loop (no transport tracer or recording:
		// planPartitions made the plan one partition otherwise), on the
		// group's global loop; observe arms the fault timeline there.
		observed := false
		cl, _, err := r.lab.NewPartitionedCluster(r.plan, labs.ClusterSetup{
			NIC: nic, NoFaults: true,
			OnGroup: func(g *sim.Group) { r.loop = g.Global() },
			Observe: func(net *fabric.Network) error { observed = true; return r.observe(net) },
		})
		if err == nil {
			r.obs.AttachCluster(cl)
			return cl, nil
		}
		if !errors.Is(err, labs.ErrNotPartitionable) || observed {
			return nil, err
		}
		fmt.Fprintf(r.c.App.ErrWriter, "mrlab: sim %s: running on 1 partition: %v (the result is the same)\n", r.lab.Name, err)
		r.plan = r.lab.PlanPartitions(1)
	}
	r.loop = sim.NewLoop()
	cl, _, err := r.lab.NewCluster(r.loop, packet.NewPool(), labs.ClusterSetup{
		Observe:  r.observe,
		NoFaults: true,
		NIC: func(o *workload.NICOptions) {
			nic(o)
			o.TraceFor = r.obs.Tracer
		},
	})
	if err != nil {
		return nil, err
	}
	r.obs.AttachCluster(cl)
	return cl, nil
}

// observe attaches the trace hash, the recording and the other observers
// the flags ask for to a new cluster's network, and arms the lab's fault
// timeline.
func (r *rdmaRun) observe(net *fabric.Network) error {
	c, lab := r.c, r.lab
	var extra fabric.Observer
	if c.Bool("trace-hash") {
		h := fabric.NewTraceHash()
		r.hashes = append(r.hashes, h)
		extra = h
	}
	kind := lab.Transport
	if len(r.kinds) == 1 {
		kind = r.kinds[0]
	}
	rec, err := openRecording(c, r.loop, net, lab, r.name, kind, true)
	if err != nil {
		return err
	}
	if r.obs, err = openSimObserver(c, r.loop, net, capture.Tee(extra, rec.FabricObserver())); err != nil {
		return err
	}
	r.obs.recording = rec
	// The fault timeline is armed here rather than by lab.NewCluster so the
	// recording and the fault log hear of each fault. With --no-faults
	// oneLab kept only the flags' faults.
	if len(lab.Faults) > 0 {
		r.faults = &faultLog{}
		return lab.ScheduleFaults(r.loop, net, rec.faultReport(r.faults.record))
	}
	return nil
}

// runSizes runs spec once, or with --all once per perftest size, each on
// a cluster of its own; it stops at the first error. runErr is a run's
// error, reported with the results so far; buildErr a cluster that could
// not be built, which ends the command at once.
func (r *rdmaRun) runSizes(spec workload.Spec) (results []*workload.Result, runErr, buildErr error) {
	sizes := []int{spec.Size}
	if r.p.Sweep {
		sizes = workload.SweepSizes()
	}
	for _, size := range sizes {
		s := spec
		s.Size = size
		cl, err := r.build()
		if err != nil {
			return results, nil, err
		}
		res, err := runner(r.c, fmt.Sprintf("sim %s %s on %s", r.name, labs.FormatSize(size), r.lab.Name))(cl, s)
		if res != nil {
			if r.p.NoPeak {
				res.BWPeakGbps = 0
			}
			results = append(results, res)
		}
		if err != nil {
			if r.p.Sweep {
				err = fmt.Errorf("size %d: %w", size, err)
			}
			return results, err, nil
		}
	}
	return results, nil, nil
}

// extras gathers what follows the results: the observers' report, the
// faults fired (and those after the run's end) and each run's trace hash,
// by transport. The error is the observers' closing.
func (r *rdmaRun) extras(results []*workload.Result) (Report, map[string]string, error) {
	var extra Report
	var err error
	if r.obs != nil {
		err = r.obs.Close(r.loop.Now(), &extra)
	}
	if r.faults != nil && !r.p.Sweep {
		r.faults.report(&extra)
		t := extra.tables[len(extra.tables)-1]
		for _, f := range r.lab.Faults {
			if f.At > r.loop.Now() {
				t.Add(f.At, strings.TrimPrefix(f.String(), f.At.String()+" "), "not reached: after the run's end at "+r.loop.Now().String())
			}
		}
	}
	// Trace hashes per run: a run's hash is its packet trace's fingerprint.
	traceHashes := map[string]string{}
	if len(results) == len(r.hashes) && !r.p.Sweep {
		for i, h := range r.hashes {
			traceHashes[results[i].Transport] = fmt.Sprintf("%016x", h.Sum())
			extra.Fact("trace_hash_"+results[i].Transport, "trace hash "+results[i].Transport,
				fmt.Sprintf("%016x (%d events)", h.Sum(), h.Events()))
		}
	}
	return extra, traceHashes, err
}

// writeResults writes the results as JSON (one object, whatever the
// number of runs), as the comparison table or as perftest's, then the
// extra report.
func (r *rdmaRun) writeResults(results []*workload.Result, extra *Report, traceHashes map[string]string) error {
	c := r.c
	var err error
	switch {
	case c.Bool("json"):
		err = workload.WriteJSON(c.App.Writer, simResults{Workload: r.name, Lab: r.lab.Name, Seed: r.lab.Seed,
			Results: results, TraceHashes: traceHashes})
	case r.name == compareWorkload:
		err = workload.WriteComparison(c.App.Writer, results)
	default:
		err = workload.WritePerftest(c.App.Writer, results, r.p.Format, true)
	}
	if err != nil {
		return err
	}
	if !c.Bool("json") && !extra.Empty() {
		fmt.Fprintln(c.App.Writer)
		return extra.WriteText(c.App.Writer)
	}
	return nil
}

// verdict is the command's error: the run's (a bad spec is a usage
// error), a failed data check, or with --strict an implausible goodput.
func (r *rdmaRun) verdict(results []*workload.Result, runErr error) error {
	if runErr != nil {
		if errors.Is(runErr, workload.ErrBadSpec) {
			// --from h9 and the like: a mistake in the command line.
			return usageError{fmt.Errorf("sim %s: %w", r.name, runErr)}
		}
		return fmt.Errorf("sim %s: %w", r.name, runErr)
	}
	for _, res := range results {
		if !res.Check.OK {
			return fmt.Errorf("sim %s: %s: data check failed", r.name, strings.ToLower(res.Transport))
		}
	}
	return checkSanity(r.c, r.name, results)
}

// checkSanity warns about every run whose goodput is implausibly low for
// its lab (workload.Sanity) and, with --strict, fails.
func checkSanity(c *cli.Context, name string, results []*workload.Result) error {
	var bad error
	for _, r := range results {
		if r.Sanity.OK {
			continue
		}
		fmt.Fprintf(c.App.ErrWriter, "mrlab: warning: sim %s: %s %s: %s\n", name, strings.ToLower(r.Transport), labs.FormatSize(r.Size), r.Sanity.Why)
		if bad == nil {
			bad = fmt.Errorf("sim %s: %s: %s (--strict)", name, strings.ToLower(r.Transport), r.Sanity.Why)
		}
	}
	if c.Bool("strict") {
		return bad
	}
	return nil
}

// runner returns workload.Run with progress on stderr (see progress) and
// an end on SIGINT or SIGTERM (the run then fails as interrupted).
func runner(c *cli.Context, label string) func(*workload.Cluster, workload.Spec) (*workload.Result, error) {
	return func(cl *workload.Cluster, spec workload.Spec) (*workload.Result, error) {
		if cl.Group != nil {
			return workload.Run(cl, spec) // partitioned: no progress line
		}
		var (
			res  *workload.Result
			rerr error
			fin  bool
		)
		if err := workload.Start(cl, spec, func(r *workload.Result, err error) { res, rerr, fin = r, err, true }); err != nil {
			return nil, err
		}
		ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
		defer stop()
		prog := newProgress(c.App.ErrWriter, label+" ("+spec.Transport.String()+")", 0)
		defer prog.finish()
		for steps := 1; !fin; steps++ {
			if !cl.Loop.Step() {
				return res, fmt.Errorf("%s at %v: %w", spec.Name, cl.Loop.Now(), workload.ErrStalled)
			}
			if steps%(1<<14) == 0 {
				prog.update(cl.Loop.Now())
				if ctx.Err() != nil {
					return res, fmt.Errorf("%s: interrupted at %v virtual", spec.Name, cl.Loop.Now())
				}
			}
		}
		return res, rerr
	}
}

// runInfinitely runs a bandwidth test until interrupted (or until its
// virtual-time --timeout), printing perftest's line every interval.
func runInfinitely(c *cli.Context, build func() (*workload.Cluster, error), spec workload.Spec, p perftestRun) error {
	cl, err := build()
	if err != nil {
		return err
	}
	w := c.App.Writer
	fmt.Fprintln(w, " WARNING: BW peak won't be measured in this run.")
	spec.OnBegin = func(r *workload.Result) {
		_ = workload.WritePerftestHeader(w, r, p.Format)
	}
	spec.OnInterval = func(iv workload.Interval) { fmt.Fprintln(w, p.Format.IntervalLine(iv)) }
	var (
		fin  bool
		rerr error
	)
	if err := workload.Start(cl, spec, func(_ *workload.Result, err error) { fin, rerr = true, err }); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	for steps := 0; !fin; steps++ {
		if steps%4096 == 0 && ctx.Err() != nil {
			break
		}
		if !cl.Loop.Step() {
			return fmt.Errorf("sim %s: %w", spec.Name, workload.ErrStalled)
		}
	}
	fmt.Fprintln(w, "---------------------------------------------------------------------------------------")
	if rerr != nil && !errors.Is(rerr, workload.ErrDataDiff) {
		return fmt.Errorf("sim %s: %w", spec.Name, rerr)
	}
	return rerr
}

// observing reports whether any flag asks to see inside the run.
func observing(c *cli.Context) bool {
	for _, f := range []string{"capture", "telemetry", "plot-dir", "trace", "record", "web"} {
		if c.IsSet(f) {
			return true
		}
	}
	return false
}

// simResults is `mrlab sim --json` for the RDMA workloads: one object with
// a result per transport run (per message size with --all).
type simResults struct {
	Workload    string             `json:"workload"`
	Lab         string             `json:"lab"`
	Seed        uint64             `json:"seed"`
	Results     []*workload.Result `json:"results"`
	TraceHashes map[string]string  `json:"trace_hashes,omitempty"`
}
