package main

import (
	"fmt"
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

// compareWorkload is `mrlab sim`'s default: the demo permutation run once
// with MetaRoCE and once with RoCEv2 on the same lab and seed.
const compareWorkload = "compare"

// rdmaFlags are the flags of the RDMA workloads (package workload). --size
// is shared with the udp workload, where it is the packet size.
func rdmaFlags() []cli.Flag {
	return []cli.Flag{
		&cli.IntFlag{Name: "iterations", Aliases: []string{"n"}, Usage: "rdma: messages per flow (collectives: operations)", DefaultText: "1000; 20 for collectives; 500 for compare"},
		&cli.IntFlag{Name: "qd", Usage: "rdma: messages in flight per connection (queue depth)", DefaultText: "16; 1 for write_lat"},
		&cli.IntFlag{Name: "conns", Usage: "rdma: connections per host pair", DefaultText: "1"},
		&cli.IntFlag{Name: "streams", Usage: "rdma: ordered streams per connection (MetaRoCE)", DefaultText: "1"},
		&cli.IntFlag{Name: "paths", Usage: "rdma: MetaRoCE paths per connection (1..256)", DefaultText: "16"},
		&cli.IntFlag{Name: "mtu", Usage: "rdma: path MTU, RDMA payload bytes per packet (256..4096)", DefaultText: "4096"},
		&cli.StringSliceFlag{Name: "from", Usage: "rdma: sending hosts (point-to-point, incast) or participants (collectives)"},
		&cli.StringSliceFlag{Name: "to", Usage: "rdma: receiving host(s)"},
		&cli.StringFlag{Name: "timeout", Value: "10s", Usage: "rdma: virtual-time limit of the run"},
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
	u := []string{fmt.Sprintf("  %-10s %s", compareWorkload, "(default) MetaRoCE and RoCEv2 side by side: a permutation of 64 KiB WRITEs on the same lab and seed")}
	for _, n := range workload.Names() {
		u = append(u, fmt.Sprintf("  %-10s %s", n, rdmaUsage[n]))
	}
	return u
}

var rdmaUsage = map[workload.Name]string{
	workload.WriteBW:     "perftest ib_write_bw: --from host WRITEs to --to host",
	workload.SendBW:      "perftest ib_send_bw: SENDs matched to posted RECVs",
	workload.ReadBW:      "perftest ib_read_bw: --from host READs from --to host",
	workload.WriteLat:    "perftest ib_write_lat: ping-pong WRITEs, latency percentiles",
	workload.Permutation: "every host WRITEs to another (a random permutation)",
	workload.Incast:      "N-to-1: every --from host WRITEs to one --to host",
	workload.AllToAll:    "each host sends --size/N to every other host",
	workload.AllReduce:   "ring all-reduce (reduce-scatter + all-gather) of a --size vector",
}

// rdmaSpec reads the RDMA workload flags into a spec.
func rdmaSpec(c *cli.Context, name workload.Name, seed uint64) (workload.Spec, error) {
	s := workload.Spec{Name: name, Seed: seed}
	if name == compareWorkload {
		s = workload.DemoSpec()
		s.Seed = seed
	}
	if c.IsSet("size") {
		s.Size = c.Int("size")
	}
	if c.IsSet("iterations") {
		s.Iterations = c.Int("iterations")
	}
	s.QueueDepth = intFlag(c, "qd", s.QueueDepth)
	s.Conns = intFlag(c, "conns", s.Conns)
	s.Streams = intFlag(c, "streams", s.Streams)
	s.From = c.StringSlice("from")
	s.To = c.StringSlice("to")
	if c.IsSet("duration") {
		d, err := sim.ParseTime(c.String("duration"))
		if err != nil || d <= 0 {
			return s, usagef("sim: --duration %q: want a positive duration such as 10ms", c.String("duration"))
		}
		s.Duration = d
	}
	t, err := sim.ParseTime(c.String("timeout"))
	if err != nil || t <= 0 {
		return s, usagef("sim: --timeout %q: want a positive duration such as 10s", c.String("timeout"))
	}
	s.Timeout = t
	return s, nil
}

func intFlag(c *cli.Context, name string, def int) int {
	if c.IsSet(name) {
		return c.Int(name)
	}
	return def
}

// rdmaAction runs an RDMA workload (or the comparison) on lab.
func rdmaAction(c *cli.Context, lab *labs.Lab, name string) error {
	spec, err := rdmaSpec(c, workload.Name(name), lab.Seed)
	if err != nil {
		return err
	}
	kinds := []transport.Kind{transport.MetaRoCE, transport.RoCEv2}
	if c.IsSet("transport") {
		k, err := transport.ParseKind(c.String("transport"))
		if err != nil {
			return usageError{fmt.Errorf("sim: --transport: %w", err)}
		}
		kinds = []transport.Kind{k}
	}
	if name == compareWorkload && len(kinds) > 1 && observing(c) {
		return usagef("sim: captures, telemetry, traces and recordings follow one run: add --transport or --workload NAME")
	}
	// obs and loop belong to the last cluster built; with observation on
	// there is exactly one.
	var obs *simObserver
	var loop *sim.Loop
	var hashes []*fabric.TraceHash // one per run, in the order of the runs
	build := func() (*workload.Cluster, error) {
		loop = sim.NewLoop()
		cl, _, err := workload.NewLabCluster(lab, loop, packet.NewPool(), workload.LabSetup{
			Observe: func(net *fabric.Network) error {
				var extra fabric.Observer
				if c.Bool("trace-hash") {
					h := fabric.NewTraceHash()
					hashes = append(hashes, h)
					extra = h
				}
				kind := lab.Transport
				if len(kinds) == 1 {
					kind = kinds[0]
				}
				rec, err := openRecording(c, loop, net, lab, name, kind, true)
				if err != nil {
					return err
				}
				if obs, err = openSimObserver(c, loop, net, capture.Tee(extra, rec.FabricObserver())); err != nil {
					return err
				}
				obs.recording = rec
				// The fault timeline is armed here rather than by
				// NewLabCluster so the recording hears of each fault.
				if !c.Bool("no-faults") && len(lab.Faults) > 0 {
					return lab.ScheduleFaults(loop, net, rec.faultReport(nil))
				}
				return nil
			},
			NoFaults: true,
			NIC: func(o *workload.NICOptions) {
				o.PathMTU = c.Int("mtu")
				if c.IsSet("paths") {
					o.MetaRoCE.Paths = c.Int("paths")
				}
				o.TraceFor = obs.Tracer
			},
		})
		if err != nil {
			return nil, err
		}
		obs.AttachCluster(cl)
		return cl, nil
	}

	var results []*workload.Result
	var runErr error
	if name == compareWorkload {
		results, runErr = workload.Compare(build, spec, kinds...)
	} else {
		spec.Transport = lab.Transport
		if c.IsSet("transport") {
			spec.Transport = kinds[0]
		}
		cl, err := build()
		if err != nil {
			return err
		}
		var r *workload.Result
		r, runErr = workload.Run(cl, spec)
		if r != nil {
			results = []*workload.Result{r}
		}
	}
	var extra Report
	if obs != nil {
		if err := obs.Close(loop.Now(), &extra); err != nil && runErr == nil {
			runErr = err
		}
	}
	// Trace hashes per run: a run's hash is its packet trace's fingerprint.
	traceHashes := map[string]string{}
	for i, h := range hashes {
		if i < len(results) {
			traceHashes[results[i].Transport] = fmt.Sprintf("%016x", h.Sum())
			extra.Fact("trace_hash_"+results[i].Transport, "trace hash "+results[i].Transport,
				fmt.Sprintf("%016x (%d events)", h.Sum(), h.Events()))
		}
	}
	if len(results) > 0 {
		var werr error
		switch {
		case c.Bool("json"):
			// One JSON object, whatever the number of runs.
			werr = workload.WriteJSON(c.App.Writer, simResults{Workload: name, Lab: lab.Name, Seed: lab.Seed,
				Results: results, TraceHashes: traceHashes})
		case len(results) == 1:
			werr = workload.WriteText(c.App.Writer, results[0])
		default:
			werr = workload.WriteComparison(c.App.Writer, results)
		}
		if werr != nil {
			return werr
		}
		if !c.Bool("json") && !extra.Empty() {
			fmt.Fprintln(c.App.Writer)
			if err := extra.WriteText(c.App.Writer); err != nil {
				return err
			}
		}
	}
	if runErr != nil {
		return fmt.Errorf("sim %s: %w", name, runErr)
	}
	for _, r := range results {
		if !r.Check.OK {
			return fmt.Errorf("sim %s: %s: data check failed", name, strings.ToLower(r.Transport))
		}
	}
	return nil
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
// a result per transport run.
type simResults struct {
	Workload    string             `json:"workload"`
	Lab         string             `json:"lab"`
	Seed        uint64             `json:"seed"`
	Results     []*workload.Result `json:"results"`
	TraceHashes map[string]string  `json:"trace_hashes,omitempty"`
}
