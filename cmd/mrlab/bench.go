package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/mrlab/mrlab/fabric/partition"
	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/labs"
	"github.com/mrlab/mrlab/softnic"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/metaroce"
	"github.com/mrlab/mrlab/workload"
)

func init() { register(newBenchCommand) }

// benchLabs are the labs `mrlab bench` runs by default: the 128-host
// two-tier and the 1024-host k=16 fat-tree permutations that htsim's
// connection matrices perm_128n_128c_2MB and perm_1024n_1024c_2MB describe.
var benchLabs = []string{"leafspine-128h", "fattree-k16"}

func newBenchCommand() *cli.Command {
	return &cli.Command{
		Name:      "bench",
		Usage:     "measure simulation speed: permutations of 2 MiB WRITEs, data packets per wall second, events per packet, memory",
		ArgsUsage: "[LAB ...]",
		Description: "Runs a permutation (every host WRITEs --size bytes to another host over one MetaRoCE\n" +
			"connection with the lab's paths, or --paths) on each lab (default: " + strings.Join(benchLabs, ", ") + "),\n" +
			"each in its own process so its peak RSS is its own, and prints per lab: simulated data\n" +
			"packets per wall second, events per data packet, peak RSS, and bytes of state per host\n" +
			"and per connection. The figures are whole-process: compare them with another simulator\n" +
			"run under /usr/bin/time -v on the same machine.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "size", Value: "2MiB", Usage: "bytes each host WRITEs"},
			&cli.IntFlag{Name: "paths", Usage: "MetaRoCE paths per connection (1..256)", DefaultText: "the lab's"},
			&cli.StringFlag{Name: "payload", Usage: "payload mode: synthetic or bytes", DefaultText: "synthetic"},
			&cli.Uint64Flag{Name: "seed", Value: 1, Usage: "seed of the lab and the permutation"},
			&cli.StringFlag{Name: "cpuprofile", Usage: "write a CPU profile of the run to this file (one lab only)"},
			&cli.StringFlag{Name: "setupprofile", Usage: "write a CPU profile of the set-up (lab, routes, NICs) to this file (one lab only)"},
			&cli.StringFlag{Name: "memprofile", Usage: "write a heap profile, taken when the run ends, to this file (one lab only)"},
			&cli.BoolFlag{Name: "json", Usage: "print one JSON object per lab"},
			&cli.BoolFlag{Name: "in-process", Usage: "run every lab in this process (peak RSS is then the largest so far)"},
			&cli.StringFlag{Name: "partitions", DefaultText: "as many as cores, capped by the lab",
				Usage: "partitions of the event engine (one goroutine each), or a list such as 1,2: each count runs in turn and the speedup over 1 is reported; results must not depend on it"},
		},
		Action: benchAction,
	}
}

// benchResult is one lab's figures.
type benchResult struct {
	Lab     string `json:"lab"`
	Hosts   int    `json:"hosts"`
	Payload string `json:"payload"`
	// SetupSeconds is the wall time of building the lab (fabric, routes,
	// NICs) before the run, SetupCPUSeconds its user+system time (every
	// thread of the process); WallSeconds is the run's.
	SetupSeconds    float64 `json:"setup_seconds"`
	SetupCPUSeconds float64 `json:"setup_cpu_seconds"`
	DataPackets     uint64  `json:"data_packets"`
	// Retransmits counts data packets the senders sent again: the data
	// packets beyond one per chunk come from them.
	Retransmits   uint64  `json:"retransmits"`
	WallSeconds   float64 `json:"wall_seconds"`
	PacketsPerSec float64 `json:"data_packets_per_second"`
	Events        uint64  `json:"events"`
	EventsPerPkt  float64 `json:"events_per_packet"`
	VirtualTime   string  `json:"virtual_time"`
	PeakRSSMiB    float64 `json:"peak_rss_mib"`
	// HostState is heap bytes per host after the lab and its NICs are
	// built; ConnState is the peak heap growth of the run per connection
	// (connection state, packets in flight, memory regions).
	HostState int64 `json:"state_bytes_per_host"`
	ConnState int64 `json:"state_bytes_per_connection"`
	// Partitions is how many partitions ran (PartitionsAsked were asked
	// for; PartitionPlan is the plan, when more than one was asked).
	// CPUSeconds is user+system time of the run. Speedup is the wall time
	// of 1 partition over this run's, measured in the same process
	// (--partitions 1,N: each count in its own process unless
	// --in-process); 0 when 1 was not run. Windows counts the
	// partitioned engine's barriers. SameResult says whether the run's
	// result (its JSON and every NIC's counters) is byte-identical to 1
	// partition's (absent when 1 was not run).
	Partitions      int     `json:"partitions"`
	PartitionsAsked int     `json:"partitions_asked"`
	PartitionPlan   string  `json:"partition_plan,omitempty"`
	CPUSeconds      float64 `json:"cpu_seconds"`
	Speedup         float64 `json:"speedup_over_1_partition,omitempty"`
	Windows         uint64  `json:"windows,omitempty"`
	SameResult      *bool   `json:"same_result_as_1_partition,omitempty"`
	// Digest fingerprints the result (the workload's JSON and every NIC's
	// counters), compared across partition counts.
	Digest string `json:"result_digest"`
}

func benchAction(c *cli.Context) error {
	names := c.Args().Slice()
	if len(names) == 0 {
		names = benchLabs
	}
	if (c.IsSet("cpuprofile") || c.IsSet("memprofile") || c.IsSet("setupprofile")) && len(names) > 1 {
		return usagef("bench: --cpuprofile, --memprofile and --setupprofile profile one lab: name it")
	}
	if _, err := labs.ParseSize(c.String("size")); err != nil {
		return usagef("bench: --size %q: %v", c.String("size"), err)
	}
	if n := c.Int("paths"); c.IsSet("paths") && (n < 1 || n > 256) {
		return usagef("bench: --paths %d: want a whole number from 1 to 256", n)
	}
	var counts []int
	if c.IsSet("partitions") {
		var err error
		if counts, err = parsePartitionList(c.String("partitions")); err != nil {
			return err
		}
	}
	if len(counts) == 0 {
		counts = []int{0} // the default count
	}
	// 1 runs first: the others are compared with it.
	if slices.Contains(counts, 1) {
		counts = append([]int{1}, slices.DeleteFunc(slices.Clone(counts), func(n int) bool { return n == 1 })...)
	}
	if c.Bool("in-process") || (len(names) == 1 && len(counts) == 1) {
		for _, n := range names {
			var rs []*benchResult
			for _, k := range counts {
				r, err := benchOne(c, n, k)
				if err != nil {
					return err
				}
				rs = append(rs, r)
			}
			if err := benchCompare(c, n, rs); err != nil {
				return err
			}
		}
		return nil
	}
	// One child process per lab and partition count, so that each peak
	// RSS is that run's and no run starts on a heap another warmed up.
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("bench: finding own executable: %w", err)
	}
	for _, n := range names {
		var rs []*benchResult
		for _, k := range counts {
			args := []string{"bench", "--json", "--in-process", "--size", c.String("size"), "--seed", fmt.Sprint(c.Uint64("seed"))}
			if c.IsSet("paths") {
				args = append(args, "--paths", fmt.Sprint(c.Int("paths")))
			}
			if c.IsSet("payload") {
				args = append(args, "--payload", c.String("payload"))
			}
			if k > 0 {
				args = append(args, "--partitions", fmt.Sprint(k))
			}
			cmd := exec.Command(self, append(args, n)...)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, c.App.ErrWriter
			if err := cmd.Run(); err != nil {
				return fmt.Errorf("bench %s: %w", n, err)
			}
			var r benchResult
			if err := json.Unmarshal(out.Bytes(), &r); err != nil {
				return fmt.Errorf("bench %s: reading its result: %w", n, err)
			}
			rs = append(rs, &r)
		}
		if err := benchCompare(c, n, rs); err != nil {
			return err
		}
	}
	return nil
}

// benchCompare prints lab name's runs, one per partition count, with each
// run's speedup over the 1-partition run (when one ran) and whether its
// result is the same. A differing result is an error: results must not
// depend on the partitioning.
func benchCompare(c *cli.Context, name string, rs []*benchResult) error {
	var one *benchResult
	for _, r := range rs {
		if r.Partitions == 1 && r.PartitionsAsked == 1 {
			one = r
			break
		}
	}
	var bad error
	for _, r := range rs {
		if one != nil && r != one {
			same := r.Digest == one.Digest
			r.SameResult = &same
			if r.Partitions > 1 && r.WallSeconds > 0 {
				r.Speedup = one.WallSeconds / r.WallSeconds
			}
			if !same && bad == nil {
				bad = fmt.Errorf("bench %s: %d partitions gave a result different from 1 partition's", name, r.Partitions)
			}
		}
		printBench(c, r)
	}
	return bad
}

func printBench(c *cli.Context, r *benchResult) {
	w := c.App.Writer
	if c.Bool("json") {
		b, _ := json.Marshal(r)
		fmt.Fprintln(w, string(b))
		return
	}
	fmt.Fprintf(w, "%s: %d hosts, payload %s, %d data packets in %.2f s wall (%v virtual)\n",
		r.Lab, r.Hosts, r.Payload, r.DataPackets, r.WallSeconds, r.VirtualTime)
	fmt.Fprintf(w, "  set-up (lab, routes, NICs)    %.3f s wall, %.3f s CPU\n", r.SetupSeconds, r.SetupCPUSeconds)
	fmt.Fprintf(w, "  data packets per wall second  %.0f\n", r.PacketsPerSec)
	fmt.Fprintf(w, "  events per data packet        %.2f\n", r.EventsPerPkt)
	fmt.Fprintf(w, "  peak RSS                      %.0f MiB\n", r.PeakRSSMiB)
	fmt.Fprintf(w, "  state per host                %d bytes\n", r.HostState)
	fmt.Fprintf(w, "  state per connection          %d bytes\n", r.ConnState)
	fmt.Fprintf(w, "  wall / CPU time               %.2f s / %.2f s\n", r.WallSeconds, r.CPUSeconds)
	fmt.Fprintf(w, "  partitions                    %d (asked %d): %s\n", r.Partitions, r.PartitionsAsked, r.PartitionPlan)
	if r.Partitions > 1 {
		fmt.Fprintf(w, "  barriers (windows)            %d\n", r.Windows)
	}
	switch {
	case r.SameResult == nil:
	case r.Speedup > 0:
		fmt.Fprintf(w, "  speedup over 1 partition      %.2fx wall, result identical: %v\n", r.Speedup, *r.SameResult)
	default:
		fmt.Fprintf(w, "  result identical to 1's       %v\n", *r.SameResult)
	}
}

// benchCluster builds the lab as `mrlab sim` builds it (its transports
// section, its fault timeline), --paths overriding the lab's paths: on
// plan's partitions, or on one plain loop when the plan has one or the
// lab cannot be partitioned (saying why). It returns the plan it used.
func benchCluster(c *cli.Context, lab *labs.Lab, plan *partition.Plan) (*workload.Cluster, *partition.Plan, error) {
	cs := labs.ClusterSetup{NIC: func(o *workload.NICOptions) {
		if c.IsSet("paths") {
			o.MetaRoCE.Paths = c.Int("paths")
		}
	}}
	var cl *workload.Cluster
	var err error
	if plan.Parts > 1 {
		cl, _, err = lab.NewPartitionedCluster(plan, cs)
		if errors.Is(err, labs.ErrNotPartitionable) {
			fmt.Fprintf(c.App.ErrWriter, "mrlab: bench %s: running on 1 partition: %v\n", lab.Name, err)
			plan = lab.PlanPartitions(1)
		}
	}
	if plan.Parts == 1 {
		cl, _, err = lab.NewCluster(sim.NewLoop(), packet.NewPool(), cs)
	}
	return cl, plan, err
}

// benchSetup builds the lab as benchCluster does and returns the wall and
// CPU time it took (profiled with --setupprofile).
func benchSetup(c *cli.Context, lab *labs.Lab, plan *partition.Plan) (*workload.Cluster, *partition.Plan, time.Duration, time.Duration, error) {
	stop, err := startCPUProfile(c.String("setupprofile"))
	if err != nil {
		return nil, nil, 0, 0, err
	}
	cpu := cpuTime()
	start := time.Now()
	cl, plan, err := benchCluster(c, lab, plan)
	wall := time.Since(start)
	cpu = cpuTime() - cpu
	stop()
	return cl, plan, wall, cpu, err
}

// benchDigest is a result's fingerprint: the workload's JSON and every
// NIC's counters, as TestPartitionedLabSameRun compares them.
func benchDigest(res any, cl *workload.Cluster) (string, error) {
	h := sha256.New()
	if err := json.NewEncoder(h).Encode(res); err != nil {
		return "", err
	}
	for i, n := range cl.NICs {
		fmt.Fprintf(h, "%s %+v %+v\n", cl.Hosts[i], n.Stats(), n.TransportTotals())
	}
	return fmt.Sprintf("%x", h.Sum(nil)), nil
}

// benchOne runs the permutation on one lab in this process, on parts
// partitions (0: the default count). One partition runs on a plain loop,
// more on the partitioned engine; the result is the same.
func benchOne(c *cli.Context, name string, parts int) (*benchResult, error) {
	lab, err := labs.Resolve(name)
	if err != nil {
		return nil, err
	}
	lab.Seed = c.Uint64("seed")
	size, _ := labs.ParseSize(c.String("size"))
	mode := softnic.PayloadSynthetic
	if c.IsSet("payload") {
		if mode, err = softnic.ParsePayloadMode(c.String("payload")); err != nil {
			return nil, usageError{fmt.Errorf("bench: --payload: %w", err)}
		}
	}
	asked := parts
	if asked == 0 {
		asked = autoPartitions(lab)
	}
	plan := planPartitions(c.App.ErrWriter, "bench", lab, asked, false, "")
	runtime.GC()
	heap0 := heapInUse()
	cl, plan, setupWall, setupCPU, err := benchSetup(c, lab, plan)
	if err != nil {
		return nil, err
	}
	loop := cl.Loop
	fired := func() uint64 {
		if cl.Group != nil {
			return cl.Group.Fired()
		}
		return loop.Fired()
	}
	runtime.GC()
	heap1 := heapInUse()
	hosts := len(cl.NICs)

	// The peak heap of the run, sampled every 10 us of virtual time.
	peak := heap1
	var sample sim.Timer
	var ms runtime.MemStats
	sample.Init(func(now sim.Time, _ any) {
		runtime.ReadMemStats(&ms)
		peak = max(peak, ms.HeapAlloc)
		loop.Arm(&sample, now+10*sim.Microsecond)
	}, nil)
	loop.Arm(&sample, 10*sim.Microsecond)

	stopProfile, err := startCPUProfile(c.String("cpuprofile"))
	if err != nil {
		return nil, err
	}
	defer stopProfile()
	fired0 := fired()
	cpu0 := cpuTime()
	start := time.Now()
	res, err := workload.Run(cl, workload.Spec{
		Name: workload.Permutation, Transport: transport.MetaRoCE, Size: size, Iterations: 1, QueueDepth: 1,
		Seed: lab.Seed, Timeout: 10 * sim.Second, Payload: mode,
	})
	wall := time.Since(start)
	cpu := cpuTime() - cpu0
	loop.Disarm(&sample)
	if f := c.String("memprofile"); f != "" {
		if err := writeHeapProfile(f); err != nil {
			return nil, err
		}
	}
	if err != nil {
		return nil, fmt.Errorf("bench %s: %w", name, err)
	}
	if !res.Check.OK || res.Errors != 0 {
		return nil, fmt.Errorf("bench %s: data check ok=%v, %d completion errors", name, res.Check.OK, res.Errors)
	}
	pkts, retx := benchDataPackets(cl.NICs)
	events := fired() - fired0
	r := &benchResult{
		Lab: lab.Name, Hosts: hosts, Payload: mode.String(), SetupSeconds: setupWall.Seconds(), SetupCPUSeconds: setupCPU.Seconds(),
		DataPackets: pkts, Retransmits: retx,
		WallSeconds: wall.Seconds(), PacketsPerSec: float64(pkts) / wall.Seconds(),
		Events: events, EventsPerPkt: float64(events) / float64(max(pkts, 1)),
		VirtualTime: res.Elapsed.String(), PeakRSSMiB: float64(peakRSS()) / (1 << 20),
		HostState:  int64(heap1-heap0) / int64(hosts),
		ConnState:  int64(peak-heap1) / int64(max(res.Flows, 1)),
		Partitions: plan.Parts, PartitionsAsked: asked, CPUSeconds: cpu.Seconds(), PartitionPlan: plan.String(),
	}
	if cl.Group != nil {
		r.Windows = cl.Group.Windows()
	}
	if r.Digest, err = benchDigest(res, cl); err != nil {
		return nil, fmt.Errorf("bench %s: %w", name, err)
	}
	return r, nil
}

// benchDataPackets returns the data packets the lab's MetaRoCE receivers
// took in (accepted or duplicate: every data packet that arrived, not the
// handshake, ACKs or other control packets; htsim's count of data packets
// delivered) and the data packets the senders sent again.
func benchDataPackets(nics []*softnic.NIC) (data, retransmits uint64) {
	for _, nic := range nics {
		for _, cn := range nic.Conns() {
			mc, ok := cn.Transport().(*metaroce.Conn)
			if !ok {
				continue
			}
			st := mc.Stats()
			data += st.DataReceived + st.DupPackets
			retransmits += st.Retransmits
		}
	}
	return data, retransmits
}

func writeHeapProfile(name string) error {
	// A heap profile is as of the last collection: without this one, what
	// the run allocated after the heap's last growth (a big lab's path
	// state and packets, the end-of-run snapshots) would be missing.
	runtime.GC()
	f, err := os.Create(name)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		f.Close()
		return fmt.Errorf("bench: writing heap profile: %w", err)
	}
	return f.Close()
}

func heapInUse() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// cpuTime returns the process's user+system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// startCPUProfile starts a CPU profile into file f (none when f is empty)
// and returns what stops it and closes the file; calling that again does
// nothing.
func startCPUProfile(f string) (stop func(), err error) {
	if f == "" {
		return func() {}, nil
	}
	out, err := os.Create(f)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	if err := pprof.StartCPUProfile(out); err != nil {
		out.Close()
		return nil, fmt.Errorf("bench: %w", err)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			pprof.StopCPUProfile()
			out.Close()
		})
	}, nil
}

// peakRSS returns the process's peak resident set size in bytes.
func peakRSS() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Maxrss << 10 // kilobytes on Linux
}
