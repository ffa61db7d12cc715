package main

import (
	"cmp"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/labs"
	"github.com/mrlab/mrlab/labs/live"
	"github.com/mrlab/mrlab/workload"
)

// perftest's flags, defined once here for every command that runs its
// tests (mrlab sim, mrlab perf), so a setting has one spelling everywhere:
// perftest's, with mrlab's older names kept as aliases.

// perftestCategory groups perftest's flags in help.
const perftestCategory = "perftest (same flags as ib_write_bw & co.)"

// perftestFlags returns the perftest flags mrlab implements.
func perftestFlags() []cli.Flag {
	c := perftestCategory
	return []cli.Flag{
		&cli.StringFlag{Name: "size", Aliases: []string{"s"}, Category: c,
			Usage:       "message size: bytes or a unit (64KiB, 1MB; perftest's 64K and 1M are KiB and MiB); the udp workload's packet size",
			DefaultText: "65536; 2 for *_lat; 4096 for udp"},
		&cli.StringFlag{Name: "iters", Aliases: []string{"n", "iterations", "count"}, Category: c,
			Usage:       "messages per connection (collectives: operations; at least 5 for perftest's tests)",
			DefaultText: "5000 for write_bw, 1000 for the other perftest tests; 20 for collectives; 500 for compare"},
		&cli.StringFlag{Name: "duration", Aliases: []string{"D"}, Category: c,
			Usage:       "run for this long instead of --iters: seconds (5, perftest's unit) or a time (10ms); BW peak is not measured, BW average is inside the margins",
			DefaultText: "iterations; 10ms for udp"},
		&cli.StringFlag{Name: "margin", Aliases: []string{"f"}, Category: c,
			Usage: "warm-up and cool-down left out of a --duration run's figures", DefaultText: "a quarter of --duration"},
		&cli.StringFlag{Name: "tx-depth", Aliases: []string{"t", "qd", "depth"}, Category: c,
			Usage: "messages in flight per connection (send queue depth, 1..4096)", DefaultText: "128 (capped at --iters); 1 for *_lat; 16 for the other workloads"},
		&cli.StringFlag{Name: "qp", Aliases: []string{"q", "conns"}, Category: c,
			Usage: "connections (queue pairs) per host pair, 1..256", DefaultText: "1"},
		&cli.StringFlag{Name: "cq-mod", Aliases: []string{"Q"}, Category: c,
			Usage: "CQ moderation the BW peak is computed with (1..1024)", DefaultText: "100 up to 8 KiB messages, else 1"},
		&cli.BoolFlag{Name: "all", Aliases: []string{"a"}, Category: c, Usage: "run every message size from 2 B to 8 MiB (powers of two)"},
		&cli.BoolFlag{Name: "report_gbits", Category: c, Usage: "report bandwidth in Gbit/s instead of MiB/s"},
		&cli.BoolFlag{Name: "noPeak", Aliases: []string{"N"}, Category: c, Usage: "do not compute BW peak"},
		&cli.BoolFlag{Name: "run_infinitely", Category: c, Usage: "bandwidth tests: run until interrupted, printing a result line every --duration (default 5s)"},
		&cli.BoolFlag{Name: "out_json", Category: c, Usage: "also write the result to a JSON file with perftest's keys"},
		&cli.StringFlag{Name: "out_json_file", Category: c, Value: "perftest_out.json", Usage: "the --out_json file"},
		&cli.StringFlag{Name: "mtu", Aliases: []string{"m"}, Category: c, Usage: "path MTU, RDMA payload bytes per packet: 256, 512, 1024, 2048 or 4096", DefaultText: "4096"},
		&cli.StringFlag{Name: "connection", Aliases: []string{"c"}, Category: c, Usage: "connection type: RC (the only one)", DefaultText: "RC"},
		&cli.BoolFlag{Name: "bidirectional", Aliases: []string{"b"}, Category: c, Usage: "not supported yet: run two tests in opposite directions"},
	}
}

// ignoredPerftestFlags are perftest flags about hardware or set-up mrlab
// does not have: accepted, so a perftest command line runs unchanged, and
// noted once on stderr.
var ignoredPerftestFlags = []struct {
	name, alias string
	value       bool // takes a value
	why         string
}{
	{"CPU-freq", "F", false, "there is no CPU frequency to check: time is the lab's"},
	{"gid-index", "x", true, "a softnic has one address per plane; no GID table"},
	{"ib-dev", "d", true, "the device is the --from host's softnic"},
	{"ib-port", "i", true, "a softnic port per plane; connections spread over them"},
	{"port", "p", true, "no out-of-band exchange: both ends are in this process"},
	{"rdma_cm", "R", false, "connections are set up by the transports' own handshake"},
	{"comm_rdma_cm", "z", false, "no out-of-band exchange"},
	{"sl", "S", true, "no service levels"},
	{"tos", "T", true, "no traffic classes"},
	{"qp-timeout", "u", true, "timeouts follow the lab's transport settings"},
	{"inline_size", "I", true, "no inline data: payloads are read from registered memory"},
	{"outs", "o", true, "outstanding READs follow the transport's settings"},
	{"events", "e", false, "completions are delivered by the event loop, not polled"},
	{"rx-depth", "r", true, "receives posted follow --tx-depth"},
	{"post_list", "", true, "work requests are posted one at a time"},
	{"use_old_post_send", "", false, "one post path"},
	{"perform_warm_up", "", false, "no caches to warm"},
	{"dont_xchg_versions", "", false, "no out-of-band exchange"},
	{"use-srq", "", false, "no shared receive queues"},
	{"report-both", "", false, "only with --bidirectional"},
}

// liveIgnoredWhy says why a flag is ignored by live perf where the reason
// differs from sim's: perf's two sides are separate programs in two hosts.
var liveIgnoredWhy = map[string]string{
	"port":               "perf's server listens on 18515, or the next free port, and tells the client",
	"comm_rdma_cm":       "perf's sides exchange what they need through the lab",
	"dont_xchg_versions": "perf's sides exchange what they need through the lab",
	"ib-dev":             "the device is the --from host's NIC (the --to host's for the server)",
}

// ignoredFlags returns ignoredPerftestFlags as cli flags; live picks live
// perf's reasons.
func ignoredFlags(live bool) []cli.Flag {
	var fs []cli.Flag
	for _, f := range ignoredPerftestFlags {
		if w, ok := liveIgnoredWhy[f.name]; live && ok {
			f.why = w
		}
		var aliases []string
		if f.alias != "" {
			aliases = []string{f.alias}
		}
		usage := "accepted for perftest compatibility, ignored: " + f.why
		cat := "perftest flags accepted and ignored"
		if f.value {
			fs = append(fs, &cli.StringFlag{Name: f.name, Aliases: aliases, Usage: usage, Category: cat})
		} else {
			fs = append(fs, &cli.BoolFlag{Name: f.name, Aliases: aliases, Usage: usage, Category: cat})
		}
	}
	return fs
}

// noteIgnored writes one line per ignored perftest flag that was given,
// except those the command implements itself; live picks live perf's
// reasons.
func noteIgnored(c *cli.Context, w io.Writer, live bool, implemented ...string) {
	for _, f := range ignoredPerftestFlags {
		if why, ok := liveIgnoredWhy[f.name]; live && ok {
			f.why = why
		}
		if c.IsSet(f.name) && !slices.Contains(implemented, f.name) {
			fmt.Fprintf(w, "mrlab: note: --%s ignored: %s\n", f.name, f.why)
		}
	}
}

// perftestRun is what the perftest flags ask for.
type perftestRun struct {
	Spec     workload.Spec
	Format   workload.Format
	Sweep    bool     // -a
	Infinite bool     // --run_infinitely
	Interval sim.Time // its reporting period
	NoPeak   bool
	OutJSON  string // file for --out_json, or ""
	MTU      int    // 0: the default
}

// readPerftest reads the perftest flags of command cmd for workload name
// into a spec; every bad value is a usage error naming its flag.
func readPerftest(c *cli.Context, cmd string, name workload.Name) (perftestRun, error) {
	var p perftestRun
	s := &p.Spec
	s.Name = name
	bad := func(flag, format string, args ...any) error {
		return usagef("%s: --%s %q: %s", cmd, flag, c.String(flag), fmt.Sprintf(format, args...))
	}
	if c.IsSet("size") {
		n, err := parseMsgSize(c.String("size"))
		if err != nil || n < 1 || n > 1<<30 {
			return p, bad("size", "want a size from 1 byte to 1GiB, such as 4096, 64KiB or 64K")
		}
		s.Size = n
	}
	ints := []struct {
		flag     string
		dst      *int
		min, max int
	}{
		{"iters", &s.Iterations, 1, 1 << 31},
		{"tx-depth", &s.QueueDepth, 1, 4096},
		{"qp", &s.Conns, 1, 256},
		{"cq-mod", &s.CQMod, 1, 1024},
		{"mtu", &p.MTU, 256, 4096},
	}
	for _, f := range ints {
		if !c.IsSet(f.flag) {
			continue
		}
		n, err := strconv.Atoi(strings.TrimSpace(c.String(f.flag)))
		if err != nil || n < f.min || n > f.max {
			return p, bad(f.flag, "want a whole number from %d to %d", f.min, f.max)
		}
		*f.dst = n
	}
	if name.IsPerftest() && c.IsSet("iters") && s.Iterations < workload.PerftestMinIters {
		return p, bad("iters", "want at least %d (perftest's minimum)", workload.PerftestMinIters)
	}
	if c.IsSet("mtu") && p.MTU&(p.MTU-1) != 0 {
		return p, bad("mtu", "want 256, 512, 1024, 2048 or 4096")
	}
	if c.IsSet("connection") && !strings.EqualFold(c.String("connection"), "RC") {
		return p, bad("connection", "only RC (reliable connection) is supported")
	}
	if c.Bool("bidirectional") {
		return p, usagef("%s: --bidirectional is not supported yet: run two tests with --from and --to swapped", cmd)
	}
	p.Format.Gbits = c.Bool("report_gbits")
	p.Sweep = c.Bool("all")
	p.NoPeak = c.Bool("noPeak")
	p.Infinite = c.Bool("run_infinitely")
	if c.Bool("out_json") {
		p.OutJSON = c.String("out_json_file")
	}
	if c.IsSet("duration") {
		d, err := parseSeconds(c.String("duration"))
		if err != nil || d <= 0 {
			return p, bad("duration", "want a positive time: seconds (5) or with a unit (10ms)")
		}
		s.Duration = d
	}
	if c.IsSet("margin") {
		m, err := parseSeconds(c.String("margin"))
		if err != nil || m < 0 {
			return p, bad("margin", "want a time: seconds (1) or with a unit (100us)")
		}
		if !c.IsSet("duration") && !p.Infinite {
			return p, usagef("%s: --margin needs --duration", cmd)
		}
		s.Margin = m
	} else if s.Duration > 0 && name.IsPerftest() {
		s.Margin = s.Duration / 4 // perftest's default margin
	}
	if s.Duration > 0 && 2*s.Margin >= s.Duration {
		return p, bad("margin", "want less than half of --duration %v", s.Duration)
	}
	if p.Infinite {
		switch {
		case name.IsLatency():
			return p, usagef("%s: --run_infinitely: only the bandwidth tests run infinitely (as in perftest)", cmd)
		case p.Sweep:
			return p, usagef("%s: --run_infinitely and --all do not go together", cmd)
		}
		p.Interval = s.Duration
		if p.Interval == 0 {
			p.Interval = 5 * sim.Second // perftest's default duration
		}
		s.Margin = 0
	}
	if p.Sweep && c.IsSet("size") {
		return p, usagef("%s: --all runs every size from 2 B to 8 MiB; drop --size", cmd)
	}
	return p, nil
}

// parseMsgSize reads a message size: perftest's (a plain number of
// bytes) or a lab file's (64K, 64KiB, 1MB: powers of 1024, as tc reads
// them; labs.ParseSize).
func parseMsgSize(s string) (int, error) { return labs.ParseSize(s) }

// parseSeconds reads a time: a bare number is seconds (perftest's -D),
// else a number with a unit (10ms).
func parseSeconds(s string) (sim.Time, error) {
	t := strings.TrimSpace(s)
	if f, err := strconv.ParseFloat(t, 64); err == nil {
		if f < 0 || f > 1e6 {
			return 0, fmt.Errorf("parsing time %q: out of range", s)
		}
		return sim.Time(f*float64(sim.Second) + 0.5), nil
	}
	return sim.ParseTime(t)
}

// writeOutJSON writes r to the --out_json file, as perftest does (the file
// is replaced: after -a it holds the last size, as perftest's does).
func writeOutJSON(p perftestRun, r *workload.Result) error {
	if p.OutJSON == "" || r == nil {
		return nil
	}
	data, err := workload.MarshalPerftestJSON(r, p.Format)
	if err != nil {
		return err
	}
	if err := os.WriteFile(p.OutJSON, data, 0o644); err != nil {
		return fmt.Errorf("--out_json: %w", err)
	}
	return nil
}

// perfFlags are live perf's flags: the same perftest flags as sim's, and
// sim's names for the rest. perftest's -e (wait for completion events)
// means what it says here: perf's sides are verbs clients.
func perfFlags() []cli.Flag {
	fs := []cli.Flag{
		&cli.StringFlag{Name: "from", Usage: "client `HOST` (required)"},
		&cli.StringFlag{Name: "to", Usage: "server `HOST` (required)"},
		&cli.StringFlag{Name: "workload", Aliases: []string{"op"}, Value: string(workload.WriteBW),
			Usage: "write_bw, send_bw, read_bw or write_lat (also write, send, read)"},
		&cli.StringFlag{Name: "transport", Usage: "metaroce or rocev2 (default: the lab's)"},
		&cli.BoolFlag{Name: "verify", Value: true, Usage: "check every byte"},
		&cli.BoolFlag{Name: "json", Usage: "print one JSON object"},
		&cli.BoolFlag{Name: "use-event", Aliases: []string{"events", "e"}, Category: perftestCategory,
			Usage: "wait for completions in the kernel (a CQ event) instead of polling"},
	}
	fs = append(fs, perftestFlags()...)
	for _, f := range ignoredFlags(true) {
		if f.Names()[0] != "events" {
			fs = append(fs, f)
		}
	}
	return fs
}

// perfRequest reads live perf's flags into a request: the perftest flags
// as sim reads them, limited to what the live engine runs today (one
// connection between two hosts, a bandwidth test); the others are refused
// by name rather than ignored.
func perfRequest(c *cli.Context) (live.PerfRequest, perftestRun, error) {
	if c.String("from") == "" || c.String("to") == "" {
		return live.PerfRequest{}, perftestRun{}, usagef("perf: --from and --to name the client and the server host (e.g. --from h0 --to h1; mrlab status lists the hosts)")
	}
	name := c.String("workload")
	switch name {
	case "write", "send", "read": // perf's older spelling
		name += "_bw"
	}
	switch workload.Name(name) {
	case workload.WriteBW, workload.SendBW, workload.ReadBW, workload.WriteLat:
	default:
		return live.PerfRequest{}, perftestRun{}, usagef("perf: --workload %q: want write_bw, send_bw, read_bw or write_lat (the others run in mrlab sim)", c.String("workload"))
	}
	p, err := readPerftest(c, "perf", workload.Name(name))
	if err != nil {
		return live.PerfRequest{}, perftestRun{}, err
	}
	for _, f := range []struct {
		flag string
		set  bool
	}{
		{"all", p.Sweep}, {"run_infinitely", p.Infinite}, {"qp", c.IsSet("qp")},
		{"margin", c.IsSet("margin")}, {"mtu", c.IsSet("mtu")},
	} {
		if f.set {
			return live.PerfRequest{}, perftestRun{}, usagef("perf: --%s is not supported in a live lab yet (mrlab sim takes it)", f.flag)
		}
	}
	noteIgnored(c, c.App.ErrWriter, true, "events")
	s := p.Spec
	req := live.PerfRequest{From: c.String("from"), To: c.String("to"), Op: strings.TrimSuffix(name, "_bw"),
		Transport: c.String("transport"), Size: cmp.Or(s.Size, workload.PerftestBWSize), Verify: c.Bool("verify")}
	lat := workload.Name(name).IsLatency()
	if lat {
		// A ping-pong: one message in flight, perftest's 2 bytes.
		req.Size = cmp.Or(s.Size, workload.PerftestLatSize)
		if c.IsSet("tx-depth") && s.QueueDepth != 1 {
			return live.PerfRequest{}, perftestRun{}, usagef("perf: --tx-depth %d: %s keeps one message in flight", s.QueueDepth, name)
		}
	}
	if s.Duration > 0 {
		req.Duration = time.Duration(s.Duration)
		req.Depth = cmp.Or(s.QueueDepth, workload.PerftestTxDepth)
		if lat {
			req.Depth = 1
		}
		return req, p, nil
	}
	// perftest's defaults: 5000 iterations for write_bw, 1000 for the
	// others; tx depth 128, no more than the iterations.
	iters := workload.PerftestIters
	if workload.Name(name) == workload.WriteBW {
		iters = workload.PerftestWriteBWIters
	}
	req.Count = cmp.Or(s.Iterations, iters)
	req.Depth = cmp.Or(s.QueueDepth, min(workload.PerftestTxDepth, req.Count))
	if lat {
		req.Depth = 1
	}
	return req, p, nil
}
