package main

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/labs"
	"github.com/mrlab/mrlab/observe/capture"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/workload"
)

func init() { register(newSimCommand) }

// simEnv is what a workload gets to work with: the built lab on a virtual
// clock.
type simEnv struct {
	Lab       *labs.Lab
	Loop      *sim.Loop
	Pool      *packet.Pool
	Net       *fabric.Network
	Seed      uint64
	Duration  sim.Time
	Transport transport.Kind
	// Ctx gives access to the workload's own flags.
	Ctx *cli.Context
}

// simWorkload is traffic that `mrlab sim` drives through a lab.
type simWorkload interface {
	// Start attaches to the network's hosts and arms the first events at
	// env.Loop.Now().
	Start(env *simEnv) error
	// Stop ends new traffic; packets in flight drain afterwards.
	Stop()
	// Report adds the workload's results (one or more tables) to r.
	Report(env *simEnv, r *Report)
}

// workloadDef describes a workload `mrlab sim --workload NAME` can run.
type workloadDef struct {
	Name  string
	Usage string
	// Flags are added to the sim command; name them so they do not clash.
	Flags []cli.Flag
	// UsesTransport reports whether --transport means anything to it.
	UsesTransport bool
	New           func(env *simEnv) (simWorkload, error)
}

// workloads are the registered workloads, by name.
var workloads = map[string]workloadDef{}

// registerWorkload makes a workload available to `mrlab sim`. Call it
// from init.
func registerWorkload(w workloadDef) { workloads[w.Name] = w }

// allWorkloadNames lists every workload `mrlab sim` runs: the RDMA ones
// (package workload) and the registered fabric-only ones.
func allWorkloadNames() []string {
	names := []string{compareWorkload}
	for _, n := range workload.Names() {
		names = append(names, string(n))
	}
	return append(names, workloadNames()...)
}

func workloadNames() []string {
	names := make([]string, 0, len(workloads))
	for n := range workloads {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// defaultWorkload runs when --workload is not given: MetaRoCE and RoCEv2
// side by side (see rdma.go).
const defaultWorkload = compareWorkload

func newSimCommand() *cli.Command {
	var usage []string
	flags := []cli.Flag{
		&cli.Uint64Flag{Name: "seed", Usage: "seed of every random stream", DefaultText: "the lab's seed"},
		&cli.StringFlag{Name: "workload", Value: defaultWorkload, Usage: "traffic to run: " + strings.Join(allWorkloadNames(), ", ")},
		&cli.StringFlag{Name: "transport", Usage: "transport for workloads that use one: metaroce or rocev2", DefaultText: "the lab's transport"},
		&cli.BoolFlag{Name: "trace-hash", Usage: "hash every packet event into a trace hash (same lab and seed => same hash); slows the run"},
		&cli.BoolFlag{Name: "no-faults", Usage: "do not arm the lab's fault timeline"},
		&cli.BoolFlag{Name: "strict", Usage: fmt.Sprintf("exit non-zero when a bandwidth run's goodput is under %.0f%% of what the lab and workload allow with no loss (always a warning)", 100*workload.SanityFraction)},
		&cli.BoolFlag{Name: "json", Usage: "print one JSON object"},
		partitionsFlag(),
	}
	flags = append(flags, whatIfFlags()...)
	flags = append(flags, perftestFlags()...)
	flags = append(flags, rdmaFlags()...)
	flags = append(flags, ignoredFlags(false)...)
	flags = append(flags, observeFlags()...)
	flags = append(flags, webSimFlags()...)
	usage = append(usage, rdmaWorkloadUsage()...)
	for _, name := range workloadNames() {
		w := workloads[name]
		flags = append(flags, w.Flags...)
		usage = append(usage, fmt.Sprintf("  %-11s %s", w.Name, w.Usage))
	}
	return &cli.Command{
		Name:      "sim",
		Usage:     "run a lab in virtual time and report throughput, drops, ECN marks and plane use",
		ArgsUsage: "[FILE|NAME]",
		Description: "Runs the lab (default: the built-in " + labs.DefaultName + " lab) as fast as the CPU allows,\n" +
			"deterministically from its seed, with its fault timeline armed. Workloads:\n" + strings.Join(usage, "\n"),
		Flags:  flags,
		Action: simAction,
	}
}

func simAction(c *cli.Context) error {
	return serveAfterSim(c, simRun(c))
}

// simRun runs the workload and prints its report.
func simRun(c *cli.Context) error {
	lab, err := oneLab(c)
	if err != nil {
		return err
	}
	if c.IsSet("seed") {
		if c.Uint64("seed") == 0 {
			return usagef("sim: --seed 0: want a seed from 1 up (0 would silently mean the default)")
		}
		lab.Seed = c.Uint64("seed")
	}
	asked, explicit, err := askedPartitions(c, "sim", lab)
	if err != nil {
		return err
	}
	if name := c.String("workload"); isRDMAWorkload(name) {
		return rdmaAction(c, lab, name)
	}
	planPartitions(c.App.ErrWriter, "sim", lab, asked, explicit, "UDP workloads run on one loop")
	dur := 10 * sim.Millisecond
	if c.IsSet("duration") {
		dur, err = parseSeconds(c.String("duration"))
		if err != nil || dur <= 0 {
			return usagef("sim: --duration %q: want a positive duration such as 10ms", c.String("duration"))
		}
	}
	wdef, ok := workloads[c.String("workload")]
	if !ok {
		return usagef("sim: --workload %q: want one of %s", c.String("workload"), strings.Join(allWorkloadNames(), ", "))
	}
	kind := lab.Transport
	if c.IsSet("transport") {
		if kind, err = transport.ParseKind(c.String("transport")); err != nil {
			return usageError{fmt.Errorf("sim: --transport: %w", err)}
		}
		if !wdef.UsesTransport {
			return usagef("sim: workload %s sends plain UDP; --transport needs a transport workload", wdef.Name)
		}
	}
	res, err := runSim(c, lab, dur, wdef, kind, c.App.ErrWriter)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return res.WriteJSON(c.App.Writer)
	}
	return res.WriteText(c.App.Writer)
}

// drainLimit bounds how long after the workload stops a run waits for
// packets in flight, in virtual time.
const drainLimit = 100 * sim.Millisecond

// runSim builds the lab, runs the workload for dur, drains the fabric and
// reports. Progress goes to stderr (see progress).
func runSim(c *cli.Context, lab *labs.Lab, dur sim.Time, wdef workloadDef, kind transport.Kind, stderr io.Writer) (*Report, error) {
	loop := sim.NewLoop()
	pool := packet.NewPool()
	net, err := lab.Build(loop, pool)
	if err != nil {
		return nil, err
	}
	var hash *fabric.TraceHash
	var extra fabric.Observer
	if c.Bool("trace-hash") {
		hash = fabric.NewTraceHash()
		extra = hash
	}
	rec, err := openRecording(c, loop, net, lab, wdef.Name, kind, wdef.UsesTransport)
	if err != nil {
		return nil, err
	}
	obs, err := openSimObserver(c, loop, net, capture.Tee(extra, rec.FabricObserver()))
	if err != nil {
		return nil, err
	}
	obs.recording = rec
	env := &simEnv{Lab: lab, Loop: loop, Pool: pool, Net: net, Seed: lab.Seed, Duration: dur, Transport: kind, Ctx: c}
	w, err := wdef.New(env)
	if err != nil {
		return nil, fmt.Errorf("workload %s: %w", wdef.Name, err)
	}
	var log faultLog
	armed := len(lab.Faults) > 0 // --no-faults: oneLab kept only the flags' faults
	if armed {
		if err := lab.ScheduleFaults(loop, net, rec.faultReport(log.record)); err != nil {
			return nil, err
		}
	}
	if err := w.Start(env); err != nil {
		return nil, fmt.Errorf("workload %s: %w", wdef.Name, err)
	}

	// Run in slices so progress can follow virtual time.
	const slices = 200
	prog := newProgress(stderr, fmt.Sprintf("sim %s %s", wdef.Name, lab.Name), dur)
	for i := int64(1); i <= slices; i++ {
		loop.RunUntil(sim.Time(int64(dur) * i / slices))
		prog.update(loop.Now())
	}
	prog.finish()
	w.Stop()
	// Drain: let packets in flight arrive or drop, so "lost" means lost.
	// Faults armed after the workload's end stay unfired.
	for pool.Outstanding() > 0 && loop.Next() <= dur+drainLimit && loop.Step() {
	}

	r := &Report{}
	r.Fact("lab", "lab", lab.Name)
	r.Fact("seed", "seed", lab.Seed)
	r.Fact("duration", "duration", dur)
	r.Fact("workload", "workload", wdef.Name)
	if wdef.UsesTransport {
		r.Fact("transport", "transport", kind.String())
	}
	if w := describeOverrides(c); w != "" {
		r.Fact("what_if", "what-if", w)
	}
	r.Fact("events", "events", loop.Fired())
	if hash != nil {
		r.Fact("trace_hash", "trace hash", fmt.Sprintf("%016x", hash.Sum()))
		r.Fact("trace_events", "trace events", hash.Events())
	}
	w.Report(env, r)
	fabricReport(r, lab, net.Counters(), dur)
	if err := obs.Close(loop.Now(), r); err != nil {
		return nil, err
	}
	if armed {
		log.report(r)
		// Faults after the end of the run never fire; say so rather
		// than leave them out.
		t := r.tables[len(r.tables)-1]
		for _, f := range lab.Faults {
			if f.At > dur {
				t.Add(f.At, strings.TrimPrefix(f.String(), f.At.String()+" "), "not reached: after the run's "+dur.String())
			}
		}
	}
	return r, nil
}

// faultLog records the timeline's faults as they fire.
type faultLog struct {
	rows []faultRow
}

type faultRow struct {
	at    sim.Time
	fault string
	err   error
}

func (l *faultLog) record(now sim.Time, f *labs.Fault, err error) {
	// The fault without its time: the row has the time it fired.
	l.rows = append(l.rows, faultRow{now, strings.TrimPrefix(f.String(), f.At.String()+" "), err})
}

func (l *faultLog) report(r *Report) {
	t := r.Table("faults", "Faults fired", Col("at", "at", ""), Col("fault", "fault", ""), Col("result", "result", ""))
	for _, row := range l.rows {
		res := "ok"
		if row.err != nil {
			res = row.err.Error()
		}
		t.Add(row.at, row.fault, res)
	}
}

// fabricReport adds the fabric's drops by cause, ECN marks and per-plane
// utilisation over the run.
func fabricReport(r *Report, lab *labs.Lab, snap fabric.Snapshot, dur sim.Time) {
	drops := snap.Drops()
	dt := r.Table("drops", "Drops by cause", Col("cause", "cause", ""), Col("packets", "packets", ""))
	for reason := fabric.DropReason(1); int(reason) < fabric.NumDropReasons; reason++ {
		dt.Add(reason.String(), drops[reason])
	}
	dt.Add("total", drops.Total())

	planes := lab.LinkPlanes()
	topo := lab.Topology()
	hosts := map[string]bool{}
	for _, h := range topo.Hosts {
		hosts[h.Name] = true
	}
	type acc struct {
		hostBits, hostCap, fabBits, fabCap float64
		injected                           float64 // bits hosts sent into the plane
		marks, drops                       uint64
	}
	per := make([]acc, topo.Planes)
	secs := dur.Seconds()
	var marks uint64
	for _, lc := range snap.Links {
		marks += lc.ECNMarks
		p, ok := planes[lc.Link]
		if !ok || p < 0 || p >= len(per) {
			continue
		}
		a := &per[p]
		// Link.Rate is the current rate; a rate changed mid-run makes
		// this an approximation.
		if hosts[lc.From.Node] {
			a.injected += float64(lc.TxBytes) * 8
		}
		if hosts[lc.From.Node] || hosts[lc.To.Node] {
			a.hostBits += float64(lc.TxBytes) * 8
			a.hostCap += lc.Rate * secs
		} else {
			a.fabBits += float64(lc.TxBytes) * 8
			a.fabCap += lc.Rate * secs
		}
		a.marks += lc.ECNMarks
		a.drops += lc.Drops.Total()
	}
	r.Fact("ecn_marks", "ECN marks", marks)
	pt := r.Table("planes", "Planes (utilisation = bits sent / capacity, both directions of every link)",
		Col("plane", "plane", ""), Col("host_util", "host links %", "%.1f"), Col("fabric_util", "fabric links %", "%.1f"),
		Col("injected_gbps", "injected Gbit/s", "%.2f"), Col("ecn_marks", "ECN marks", ""), Col("drops", "link drops", ""))
	for p, a := range per {
		var fabUtil any = "-"
		if a.fabCap > 0 {
			fabUtil = 100 * a.fabBits / a.fabCap
		}
		var hostUtil any = "-"
		if a.hostCap > 0 {
			hostUtil = 100 * a.hostBits / a.hostCap
		}
		pt.Add(p, hostUtil, fabUtil, a.injected/secs/1e9, a.marks, a.drops)
	}
}
