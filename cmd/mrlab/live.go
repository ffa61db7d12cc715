package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/labs"
	"github.com/mrlab/mrlab/labs/live"
)

// The live commands: `up` brings a lab up in real network namespaces and
// serves its control socket; the others are clients of that socket (exec
// enters a host's namespace directly).

func init() {
	register(newUpCommand, newDownCommand, newStatusCommand, newExecCommand, newFaultCommand, newPerfCommand)
}

// runDirFlag is where running labs keep state files and sockets.
func runDirFlag() cli.Flag {
	return &cli.StringFlag{Name: "run-dir", Value: live.DefaultRunDir, EnvVars: []string{"MRLAB_RUN_DIR"},
		Usage: "directory of running labs' state files and control sockets"}
}

// labFlag picks a running lab for the client commands.
func labFlag() cli.Flag {
	return &cli.StringFlag{Name: "lab", Aliases: []string{"l"}, Usage: "running lab to act on (default: the only one running)"}
}

func newUpCommand() *cli.Command {
	return &cli.Command{
		Name:      "up",
		Usage:     "bring a lab up live: a network namespace and TUN device per host, the fabric paced to the wall clock",
		ArgsUsage: "[FILE|NAME]",
		Description: "Needs root. Each host becomes a network namespace mrl-LAB-HOST whose mr0 is its\n" +
			"NIC's netdev: run programs there with mrlab exec. Link rates are capped (--max-rate)\n" +
			"to what one process can pace in real time. By default up returns once the lab is\n" +
			"running in the background (log in RUN_DIR/LAB.log); --foreground keeps it attached.\n" +
			"The lab serves Prometheus metrics on a loopback port (mrlab status shows it);\n" +
			"mrlab top, mrlab trace and mrlab capture watch it through its control socket.\n" +
			"--set, --impair and --fault change the lab as they do for mrlab sim; faults fire in\n" +
			"real time from the moment the lab is up (--impair LINK:ab=NETEM impairs one direction).",
		Flags: append([]cli.Flag{
			runDirFlag(),
			&cli.BoolFlag{Name: "foreground", Usage: "run the lab in this process until interrupted"},
			&cli.StringFlag{Name: "name", Usage: "run the lab under this name instead of the lab file's (namespaces, state and --lab use it), so one lab file runs several times side by side"},
			&cli.StringFlag{Name: "max-rate", Value: fabric.FormatRate(live.DefaultMaxRate), Usage: "cap every link's rate to this (tc spelling; \"0\" keeps the lab's rates)"},
			&cli.IntFlag{Name: "mtu", Value: live.DefaultMTU, Usage: "MTU of each host's mr0"},
			&cli.DurationFlag{Name: "lag-threshold", Value: time.Millisecond, Usage: "events later than this count as late"},
			&cli.StringFlag{Name: "sched", Value: string(live.PolicyDeadline), Usage: "scheduling of the lab's event loop: deadline (SCHED_DEADLINE with the kernel's real-time share of each millisecond: stopped at most 50 µs at a time; fair if the kernel refuses it), fair (nice -20 with a short slice: never throttled, but a weight, not a bound), fifo (SCHED_FIFO: the kernel throttles it 50 ms a second when busy) or normal; mrlab status says which is in force and why"},
			&cli.BoolFlag{Name: "no-realtime", Usage: "keep the lab's event loop at normal scheduling priority (--sched normal)"},
			&cli.DurationFlag{Name: "timeout", Value: 30 * time.Second, Usage: "how long to wait for a background lab to come up"},
			&cli.StringFlag{Name: "metrics", Value: live.DefaultMetricsAddr, Usage: "serve Prometheus metrics on this loopback `ADDR` (port 0 picks one; \"off\" serves none)"},
			&cli.DurationFlag{Name: "telemetry-interval", Value: live.DefaultTelemetryInterval, Usage: "how often telemetry (metrics, mrlab top) is sampled"},
			&cli.BoolFlag{Name: "no-faults", Usage: "do not arm the lab file's fault timeline (--fault's faults still fire)"},
			&cli.IntFlag{Name: "partitions", DefaultText: "one fewer than cores (the hosts keep one), at least 1", Usage: "partitions of the lab's event loop, planned by sim's rule; live labs run on 1 for now, and mrlab status says what was asked and why"},
		}, whatIfFlags()...),
		Action: liveUp,
	}
}

func liveUp(c *cli.Context) error {
	if n := c.Int("partitions"); c.IsSet("partitions") && n < 1 {
		return usagef("up: --partitions %d: want 1 or more", n)
	}
	lab, err := oneLab(c)
	if err != nil {
		if errs := labs.Errors(err); len(errs) > 1 {
			for _, e := range errs[:len(errs)-1] {
				fmt.Fprintln(c.App.ErrWriter, e)
			}
			return errs[len(errs)-1]
		}
		return err
	}
	maxRate, err := parseMaxRate(c.String("max-rate"))
	if err != nil {
		return usagef("up: --max-rate: %v", err)
	}
	if n := c.String("name"); n != "" {
		if err := live.ValidLabName(n); err != nil {
			return usagef("up: --name: %v", err)
		}
		lab.Name = n
	}
	if err := live.ValidLabName(lab.Name); err != nil {
		return fmt.Errorf("%s: %w", lab.File, err)
	}
	if n := c.Int("partitions"); n > 1 && !c.Bool("foreground") {
		// Said once, on the terminal of the user who asked (a background
		// lab logs it; mrlab status shows it).
		fmt.Fprintf(c.App.ErrWriter, "mrlab: up %s: --partitions %d: %s; a live lab runs on 1 partition for now (mrlab status says why)\n", lab.Name, n, lab.PlanPartitions(n))
	}
	if err := live.ValidMetricsAddr(c.String("metrics")); err != nil {
		return usagef("up: --metrics: %v", err)
	}
	if d := c.Duration("telemetry-interval"); d < live.MinTelemetryInterval {
		return usagef("up: --telemetry-interval %v: want at least %v", d, live.MinTelemetryInterval)
	}
	// Zero is not "the default" here: a flag given is a flag meant.
	if m := c.Int("mtu"); m < 576 || m > packet.MaxSize {
		return usagef("up: --mtu %d: want 576..%d", m, packet.MaxSize)
	}
	if _, err := live.ParsePolicy(c.String("sched")); err != nil {
		return usagef("up: --sched: %v", err)
	}
	for _, f := range []string{"lag-threshold", "timeout"} {
		if d := c.Duration(f); d <= 0 {
			return usagef("up: --%s %v: want a positive duration", f, d)
		}
	}
	if os.Geteuid() != 0 {
		return errors.New("up: needs root (network namespaces and TUN devices): run it with sudo")
	}
	dir := c.String("run-dir")
	// Refuse a second up before doing anything; Up checks again
	// atomically.
	if st, err := live.ReadState(dir, lab.Name); err == nil && (live.SystemOps{}).ProcessAlive(st.PID, st.StartTicks) {
		return fmt.Errorf("lab %s: %w (pid %d; mrlab down %s stops it)", lab.Name, live.ErrRunning, st.PID, lab.Name)
	}
	if !c.Bool("foreground") {
		return upBackground(c, lab)
	}
	logf := func(format string, args ...any) {
		fmt.Fprintf(c.App.ErrWriter, "%s mrlab: %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
	}
	eng, err := live.NewLabEngine(lab, live.EngineConfig{Name: lab.Name, MaxRate: maxRate, TelemetryInterval: c.Duration("telemetry-interval"), Logf: logf})
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	l, err := live.Up(ctx, lab.Name, eng, live.Options{
		RunDir:  dir,
		MTU:     c.Int("mtu"),
		Pacer:   live.PacerConfig{LagThreshold: c.Duration("lag-threshold"), Policy: live.Policy(c.String("sched")), NoRealtime: c.Bool("no-realtime")},
		Logf:    logf,
		Metrics: c.String("metrics"),
		// 0 when not set: the default for this machine (live.DefaultPartitions).
		Partitions: c.Int("partitions"),
	})
	if err != nil {
		return err
	}
	st := l.State()
	fmt.Fprintf(c.App.Writer, "lab %s up (pid %d): %d hosts; control socket %s\n", lab.Name, os.Getpid(), len(st.Hosts), st.Socket)
	if st.Metrics != "" {
		fmt.Fprintf(c.App.Writer, "metrics: %s\n", metricsURL(st.Metrics))
	}
	return l.Wait()
}

// parseMaxRate reads --max-rate: a tc rate, or "0" for no cap.
func parseMaxRate(s string) (float64, error) {
	if s == "0" || s == "" {
		return 0, nil
	}
	return fabric.ParseRate(s)
}

// upBackground starts `mrlab up --foreground` detached (its own session,
// output to the lab's log) and waits until its control socket answers or it
// exits.
func upBackground(c *cli.Context, lab *labs.Lab) error {
	dir := c.String("run-dir")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("up: run directory: %w", err)
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("up: finding the mrlab binary: %w", err)
	}
	logPath := live.LogPath(dir, lab.Name)
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("up: log file: %w", err)
	}
	defer logf.Close()
	arg := c.Args().First()
	if arg != "" {
		if _, err := os.Stat(arg); err == nil {
			arg, _ = filepath.Abs(arg)
		}
	}
	args := []string{"up", "--foreground", "--run-dir", dir, "--max-rate", c.String("max-rate"),
		"--mtu", strconv.Itoa(c.Int("mtu")), "--lag-threshold", c.Duration("lag-threshold").String(),
		"--metrics", c.String("metrics"), "--telemetry-interval", c.Duration("telemetry-interval").String(),
		"--name", lab.Name, "--sched", c.String("sched")}
	if c.Bool("no-realtime") {
		args = append(args, "--no-realtime")
	}
	if c.IsSet("partitions") {
		args = append(args, "--partitions", strconv.Itoa(c.Int("partitions")))
	}
	if c.Bool("no-faults") {
		args = append(args, "--no-faults")
	}
	for _, f := range []string{"set", "impair", "fault"} {
		for _, v := range flagValues(c, f) {
			args = append(args, "--"+f, v)
		}
	}
	if arg != "" {
		args = append(args, arg)
	}
	cmd := exec.Command(exe, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	cmd.Dir = "/"
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("up: starting the lab process: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.After(c.Duration("timeout"))
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-exited:
			return fmt.Errorf("lab %s failed to come up (%w):\n%s", lab.Name, err, tail(logPath, 20))
		case <-deadline:
			cmd.Process.Signal(syscall.SIGTERM)
			return fmt.Errorf("lab %s: not up after %v (log %s):\n%s", lab.Name, c.Duration("timeout"), logPath, tail(logPath, 20))
		case <-tick.C:
		}
		st, err := live.ReadState(dir, lab.Name)
		if err != nil || st.PID != cmd.Process.Pid {
			continue
		}
		ctx, cancel := context.WithTimeout(c.Context, time.Second)
		s, err := live.NewClient(lab.Name, st.Socket).Status(ctx)
		cancel()
		if err != nil {
			continue
		}
		cmd.Process.Release()
		fmt.Fprintf(c.App.Writer, "lab %s up (pid %d, log %s)\n", lab.Name, st.PID, logPath)
		for _, h := range s.Hosts {
			fmt.Fprintf(c.App.Writer, "  %-8s %-15s netns %s\n", h.Name, h.Addr, h.Namespace)
		}
		if s.Metrics != "" {
			fmt.Fprintf(c.App.Writer, "metrics: %s (mrlab top, mrlab trace watch the lab)\n", metricsURL(s.Metrics))
		}
		if len(s.Hosts) > 1 {
			fmt.Fprintf(c.App.Writer, "try: mrlab exec %s -- ping -c 3 %s\n", s.Hosts[0].Name, s.Hosts[len(s.Hosts)-1].Addr)
		}
		return nil
	}
}

// metricsURL is the Prometheus scrape URL of a lab's metrics address.
func metricsURL(addr string) string { return "http://" + addr + "/metrics" }

// tail returns the last n lines of a file.
func tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// runningLab names the lab a client command acts on: --lab (or a
// positional argument for down), else the caller's only running lab. Labs
// other users started are never picked without their name: on a shared
// box a bare command must not touch a neighbour's lab.
func runningLab(c *cli.Context, arg string) (string, error) {
	dir := c.String("run-dir")
	if arg == "" {
		return callersLab(dir)
	}
	if live.ValidLabName(arg) == nil {
		if _, err := os.Stat(live.StatePath(dir, arg)); err == nil {
			return arg, nil
		}
	}
	// A lab file or built-in name: its lab's name, if that is running.
	lab, err := labs.Resolve(arg)
	if err != nil {
		if live.ValidLabName(arg) == nil {
			return "", notRunning(dir, arg)
		}
		return "", err
	}
	if _, err := os.Stat(live.StatePath(dir, lab.Name)); err != nil {
		return "", notRunning(dir, lab.Name)
	}
	return lab.Name, nil
}

// callersLab is the one running lab the caller started.
func callersLab(dir string) (string, error) {
	all, err := runningLabs(dir)
	if err != nil {
		return "", err
	}
	uid := live.CallerUID()
	var mine []string
	for _, l := range all {
		if l.owner == uid {
			mine = append(mine, l.name)
		}
	}
	switch {
	case len(all) == 0:
		return "", fmt.Errorf("no lab is running (no state file in %s): mrlab up starts one", dir)
	case len(mine) == 1:
		return mine[0], nil
	case len(mine) == 0:
		return "", usagef("no lab of yours (uid %d) is running; other users' labs: %s: name one with --lab", uid, runningList(all))
	default:
		return "", usagef("%d of your labs are running (%s): name one with --lab (mrlab ls lists them)", len(mine), strings.Join(mine, ", "))
	}
}

// notRunning says lab is not running and which labs are.
func notRunning(dir, lab string) error {
	all, _ := runningLabs(dir)
	if len(all) == 0 {
		return fmt.Errorf("lab %s: %w (no lab is running)", lab, live.ErrNotRunning)
	}
	return fmt.Errorf("lab %s: %w (running: %s)", lab, live.ErrNotRunning, runningList(all))
}

// runningLabEntry is a lab with a state file and who started it.
type runningLabEntry struct {
	name  string
	owner int
	state *live.State
}

// runningLabs reads every state file under dir. A state file that cannot
// be read still names a lab (down can clean it), owned by nobody.
func runningLabs(dir string) ([]runningLabEntry, error) {
	names, err := live.ListStates(dir)
	if err != nil {
		return nil, err
	}
	out := make([]runningLabEntry, 0, len(names))
	for _, n := range names {
		e := runningLabEntry{name: n, owner: -1}
		if st, err := live.ReadState(dir, n); err == nil {
			e.owner, e.state = st.Owner, st
		}
		out = append(out, e)
	}
	return out, nil
}

// runningList is "a (uid 0), b (uid 1000)".
func runningList(ls []runningLabEntry) string {
	parts := make([]string, len(ls))
	for i, l := range ls {
		parts[i] = fmt.Sprintf("%s (uid %d)", l.name, l.owner)
	}
	return strings.Join(parts, ", ")
}

// labFlagValue is --lab as given to this command or to the command above
// it (mrlab fault --lab X plane 1 down): flags go before or after the
// subcommand.
func labFlagValue(c *cli.Context) string {
	for _, ctx := range c.Lineage() {
		for _, n := range ctx.LocalFlagNames() {
			if n == "lab" || n == "l" {
				return ctx.String("lab")
			}
		}
	}
	return ""
}

func newDownCommand() *cli.Command {
	return &cli.Command{
		Name:      "down",
		Usage:     "stop a live lab and remove its namespaces (also after its process died) and its log",
		ArgsUsage: "[LAB]",
		Description: "down removes everything up created, RUN_DIR/LAB.log (a background lab's output) included,\n" +
			"so run directories do not fill with the logs of labs long gone; --keep-log keeps it\n" +
			"(to read why a lab failed, read it before down, or keep it).",
		Flags: []cli.Flag{runDirFlag(), &cli.BoolFlag{Name: "keep-log", Usage: "keep RUN_DIR/LAB.log"}},
		Action: func(c *cli.Context) error {
			if c.NArg() > 1 {
				return usagef("down: want at most one lab")
			}
			name, err := runningLab(c, c.Args().First())
			if err != nil {
				return err
			}
			if err := live.Down(c.Context, c.String("run-dir"), name, nil); err != nil {
				return err
			}
			logPath := live.LogPath(c.String("run-dir"), name)
			if c.Bool("keep-log") {
				if _, err := os.Stat(logPath); err == nil {
					fmt.Fprintf(c.App.Writer, "lab %s down (log kept: %s)\n", name, logPath)
					return nil
				}
			} else if err := os.Remove(logPath); err != nil && !errors.Is(err, fs.ErrNotExist) {
				fmt.Fprintf(c.App.ErrWriter, "mrlab: lab %s: removing its log: %v\n", name, err)
			}
			fmt.Fprintf(c.App.Writer, "lab %s down\n", name)
			return nil
		},
	}
}

// client returns a client for the lab chosen by --lab.
func client(c *cli.Context) (*live.Client, string, error) {
	name, err := runningLab(c, labFlagValue(c))
	if err != nil {
		return nil, "", err
	}
	cl, err := live.Dial(c.String("run-dir"), name)
	return cl, name, err
}

func newStatusCommand() *cli.Command {
	return &cli.Command{
		Name:  "status",
		Usage: "show a live lab: hosts, links, switches, counters, real-time lag",
		Flags: []cli.Flag{runDirFlag(), labFlag(),
			&cli.BoolFlag{Name: "json", Usage: "print one JSON object"},
			&cli.BoolFlag{Name: "all-links", Usage: "list idle links too"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef("status: unexpected argument %q (pick a lab with --lab)", c.Args().First())
			}
			cl, _, err := client(c)
			if err != nil {
				return err
			}
			s, err := cl.Status(c.Context)
			if err != nil {
				return err
			}
			r := statusReport(s, c.Bool("all-links"))
			if c.Bool("json") {
				return r.WriteJSON(c.App.Writer)
			}
			return r.WriteText(c.App.Writer)
		},
	}
}

// loopWaitFacts adds what lateness cannot see to a status: the loop
// thread's waits for a CPU, during which input waited in the hosts'
// kernels, and the periods labs/live/runqueue.go's rule says they may
// have held input beyond the limit.
func loopWaitFacts(r *Report, l live.LagStats) {
	if l.LoopWait >= 0 {
		r.Fact("loop_cpu_wait", "loop's CPU wait", fmt.Sprintf("%v in all, %v in the last window (at most %v at once)",
			l.LoopWait.Round(time.Microsecond), l.LoopWaitWindow.Round(time.Microsecond), l.LoopWaitMax.Round(time.Microsecond)))
	}
	if l.StarvedWindows > 0 {
		r.Fact("starved_windows", "LOOP STARVED", fmt.Sprintf("in %d periods the loop's waits for a CPU may have held input more than %.0f%% of the period before it entered the lab",
			l.StarvedWindows, 100*live.MaxLagFraction))
	}
}

func statusReport(s live.Status, allLinks bool) *Report {
	r := &Report{}
	r.Fact("lab", "lab", s.Lab)
	r.Fact("pid", "pid", s.PID)
	if s.Metrics != "" {
		r.Fact("metrics", "metrics", metricsURL(s.Metrics))
	} else {
		r.Fact("metrics", "metrics", "off")
	}
	r.Fact("uptime", "uptime", s.Uptime.Round(time.Millisecond).String())
	r.Fact("planes", "planes", s.Engine.Planes)
	if p := s.Partitions; p.Asked > 0 {
		r.Fact("partitions", "partitions", partitionLine(p))
	}
	r.Fact("events", "events run", s.Lag.Events)
	r.Fact("events_late", "events late", s.Lag.EventsLate)
	r.Fact("max_lag", "max lag", s.Lag.MaxLag.String())
	r.Fact("packets_late", "packets late", s.Lag.PacketsLate)
	// How the loop read the hosts' kernels: rounds that found packets,
	// and looks cut short by their budget with packets still queued (a
	// loop that could not keep up with its senders).
	r.Fact("look_rounds", "kernel read rounds", s.Lag.LookRounds)
	r.Fact("looks_cut", "kernel looks cut", s.Lag.LooksCut)
	loopWaitFacts(r, s.Lag)
	if s.Lag.Warnings > 0 {
		r.Fact("lag_warnings", "WARNING", fmt.Sprintf("could not keep real time in %d periods: delays and rates are distorted", s.Lag.Warnings))
	}
	if s.Lag.Priority != "" {
		r.Fact("loop_priority", "loop priority", s.Lag.Priority)
		r.Fact("loop_spin", "loop spin", spinLine(s.Lag))
	}
	// mr0's own counters are the host kernel's: its tx is towards the lab,
	// tx drops are packets the lab did not read in time, and qdisc drops
	// packets the host sent faster than its NIC's rate for longer than
	// mr0's shaper holds.
	ht := r.Table("hosts", "Hosts (mr0: the host kernel's counters of its interface)", Col("name", "host", ""), Col("addr", "address", ""), Col("namespace", "namespace", ""),
		Col("from_kernel", "from kernel", ""), Col("to_kernel", "to kernel", ""), Col("to_kernel_drops", "to-kernel drops", ""),
		Col("mr0_tx_dropped", "mr0 tx drop", ""), Col("mr0_qdisc_dropped", "mr0 qdisc drop", ""), Col("mr0_rx_dropped", "mr0 rx drop", ""), Col("mr0_errors", "mr0 errors", ""))
	for _, h := range s.Hosts {
		var txd, qd, rxd, errs any = "-", "-", "-", "-"
		if k := h.Kernel; k != nil {
			txd, qd, rxd, errs = k.TxDropped, k.QdiscDropped, k.RxDropped, k.TxErrors+k.RxErrors
		}
		ht.Add(h.Name, h.Addr, h.Namespace, h.FromKernel, h.ToKernel, h.ToKernelDrops, txd, qd, rxd, errs)
	}
	vt := r.Table("verbs", "Verbs clients (programs on the hosts' NICs)", Col("host", "host", ""), Col("pid", "pid", ""),
		Col("program", "program", ""), Col("qps", "QPs", ""), Col("connected", "connected", ""), Col("mrs", "MRs", ""),
		Col("mr_bytes", "MR bytes", ""), Col("cqs", "CQs", ""), Col("listening", "listening", ""), Col("posted", "posted", ""),
		Col("completed", "completed", ""), Col("doorbells", "doorbells", ""))
	for _, h := range s.Hosts {
		for _, v := range h.Verbs {
			ports := make([]string, len(v.Listening))
			for i, p := range v.Listening {
				ports[i] = strconv.Itoa(p)
			}
			vt.Add(h.Name, v.PID, v.Name, v.QPs, v.Connected, v.MRs, v.MRBytes, v.CQs, strings.Join(ports, ","), v.Posted, v.Completed, v.Doorbells)
		}
	}
	lt := r.Table("links", "Links (idle links hidden; --all-links lists them)", Col("name", "link", ""), Col("up", "state", ""),
		Col("rate", "rate", ""), Col("packets", "packets", ""), Col("bytes", "bytes", ""), Col("drops", "drops", ""), Col("marks", "ce marks", ""),
		Col("corrupted", "corrupted", ""), Col("duplicated", "duplicated", ""), Col("impair", "impair", ""))
	for _, k := range s.Engine.Links {
		if !allLinks && k.Up && k.Packets == 0 && k.Drops == 0 && k.Corrupted == 0 && k.Duplicated == 0 && k.Impair == "" {
			continue
		}
		state := "up"
		if !k.Up {
			state = "DOWN"
		}
		lt.Add(k.Name, state, fabric.FormatRate(k.Rate), k.Packets, k.Bytes, k.Drops, k.Marks, k.Corrupted, k.Duplicated, k.Impair)
	}
	st := r.Table("switches_down", "Switches down", Col("name", "switch", ""), Col("plane", "plane", ""), Col("role", "role", ""))
	for _, sw := range s.Engine.Switches {
		if !sw.Up {
			st.Add(sw.Name, sw.Plane, sw.Role)
		}
	}
	if len(s.Engine.NICs) > 0 {
		names := make([]string, 0, len(s.Engine.NICs))
		for n := range s.Engine.NICs {
			names = append(names, n)
		}
		slices.Sort(names)
		nt := r.Table("nics", "NIC counters (non-zero; drops_<reason> by reason)", Col("host", "host", ""), Col("counter", "counter", ""), Col("value", "value", ""))
		for _, n := range names {
			keys := make([]string, 0, len(s.Engine.NICs[n]))
			for k, v := range s.Engine.NICs[n] {
				if v != 0 {
					keys = append(keys, k)
				}
			}
			slices.Sort(keys)
			for _, k := range keys {
				nt.Add(n, k, s.Engine.NICs[n][k])
			}
		}
	}
	return r
}

func newExecCommand() *cli.Command {
	return &cli.Command{
		Name:      "exec",
		Usage:     "run a command in a live lab host's network namespace",
		ArgsUsage: "HOST -- CMD [ARG...]",
		Description: `Runs CMD in HOST's network namespace (and a mount namespace of its own
   whose /sys shows the host's devices).

   With --ibverbs, unmodified ibverbs programs (perftest's ib_write_bw, ibverbs-utils'
   ibv_rc_pingpong, ...) use the host's NIC: mrlab builds libmrlab-ibverbs.so (cc and
   libibverbs-dev needed; cached under ~/.cache/mrlab/ibverbs) and preloads it in front of
   rdma-core's libibverbs. Devices: metaroce0 (the first, so default flags use MetaRoCE)
   and rocev2_0 (-d rocev2_0). ibverbs/README.md lists what is supported.`,
		Flags: []cli.Flag{runDirFlag(), labFlag(),
			&cli.BoolFlag{Name: "ibverbs", Usage: "preload mrlab's libibverbs-compatible library so ibverbs programs use the host's NIC"}},
		Action: func(c *cli.Context) error {
			if c.NArg() < 2 {
				return usagef("exec: want HOST -- CMD [ARG...]")
			}
			host, argv := c.Args().First(), c.Args().Slice()[1:]
			if argv[0] == "--" {
				argv = argv[1:]
			}
			if len(argv) == 0 {
				return usagef("exec: no command after %s", host)
			}
			name, err := runningLab(c, labFlagValue(c))
			if err != nil {
				return err
			}
			// Check the host before anything else: an unknown host is a
			// clear error whatever the command.
			if _, err := live.HostNamespace(c.String("run-dir"), name, host); err != nil {
				return err
			}
			cmd := exec.Command(argv[0], argv[1:]...)
			cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, c.App.Writer, c.App.ErrWriter
			if c.Bool("ibverbs") {
				env, err := ibverbsEnv()
				if err != nil {
					return err
				}
				cmd.Env = env
			}
			// The child gets the terminal's signals itself; mrlab waits.
			sigs := make(chan os.Signal, 4)
			signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
			defer signal.Stop(sigs)
			if err := live.Exec(c.String("run-dir"), name, host, cmd); err != nil {
				return err
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			for {
				select {
				case s := <-sigs:
					cmd.Process.Signal(s)
				case err := <-done:
					var ee *exec.ExitError
					if errors.As(err, &ee) {
						return cli.Exit(fmt.Sprintf("%s on %s: %v", argv[0], host, ee), max(ee.ExitCode(), 1))
					}
					return err
				}
			}
		},
	}
}

func newFaultCommand() *cli.Command {
	send := func(target string, actions ...string) cli.ActionFunc {
		return func(c *cli.Context) error {
			// Flags are parsed here, not by urfave/cli, so that a
			// negative plane number is an argument, not a flag.
			args, err := cmdArgs(c)
			if err != nil {
				return err
			}
			if len(args) < 2 {
				return usagef("fault %s: want NAME %s", target, strings.Join(actions, "|"))
			}
			f := live.FaultRequest{Target: target, Name: args[0], Action: args[1]}
			ok := false
			for _, a := range actions {
				ok = ok || a == f.Action
			}
			if !ok {
				return usagef("fault %s %s: unknown action %q (want %s)", target, f.Name, f.Action, strings.Join(actions, ", "))
			}
			rest := args[2:]
			if target == "link" {
				// One direction, as tc on one end: NAME:ab or a
				// trailing "dir ab" (the lab files' clause).
				if name, d, ok := strings.Cut(f.Name, ":"); ok {
					f.Name, f.Dir = name, d
				}
				if n := len(rest); n >= 2 && rest[n-2] == "dir" {
					if f.Dir != "" && f.Dir != rest[n-1] {
						return usagef("fault link %s:%s: and dir %s: two directions", f.Name, f.Dir, rest[n-1])
					}
					f.Dir, rest = rest[n-1], rest[:n-2]
				}
				if f.Dir != "" {
					d, err := labs.ParseDir(f.Dir)
					if err != nil {
						return usagef("fault link %s: %v", f.Name, err)
					}
					if d == labs.DirBoth {
						f.Dir = ""
					} else if f.Action != "impair" {
						return usagef("fault link %s:%s %s: a link goes %s in both directions (for one direction's black hole: fault link %s:%s impair loss 100%%)", f.Name, f.Dir, f.Action, f.Action, f.Name, f.Dir)
					}
				}
			}
			if f.Action == "impair" {
				if strings.TrimSpace(strings.Join(rest, "")) == "" {
					return usagef("fault link %s impair: want netem parameters, e.g. loss 1%% delay 100us (or \"none\")", f.Name)
				}
				f.Impair = rest
			} else if len(rest) > 0 {
				return usagef("fault %s %s %s: unexpected %q", target, f.Name, f.Action, strings.Join(rest, " "))
			}
			if target == "plane" {
				if n, err := strconv.Atoi(f.Name); err != nil || n < 0 {
					return usagef("fault plane %q: want a plane number (0, 1, ...)", f.Name)
				}
			}
			cl, name, err := client(c)
			if err != nil {
				return err
			}
			if err := cl.Fault(c.Context, f); err != nil {
				return err
			}
			subject := f.Name
			if f.Dir != "" {
				subject += ":" + f.Dir
			}
			fmt.Fprintf(c.App.Writer, "lab %s: %s %s %s\n", name, target, subject, strings.Join(append([]string{f.Action}, f.Impair...), " "))
			return nil
		}
	}
	flags := []cli.Flag{runDirFlag(), labFlag()}
	return &cli.Command{
		Name:  "fault",
		Usage: "fail, restore or impair links, switches and planes of a live lab",
		Flags: flags,
		Subcommands: []*cli.Command{
			{Name: "link", Usage: "take a link down or up, or impair it (netem spelling; NAME:ab or a trailing dir ab|ba for one direction)", ArgsUsage: "NAME[:ab|:ba] down|up|impair NETEM... [dir ab|ba]",
				Flags: flags, Action: send("link", "down", "up", "impair"), SkipFlagParsing: true},
			{Name: "switch", Usage: "take a switch (all its links) down or up", ArgsUsage: "NAME down|up",
				Flags: flags, Action: send("switch", "down", "up"), SkipFlagParsing: true},
			{Name: "plane", Usage: "take a whole plane down or up", ArgsUsage: "N down|up",
				Flags: flags, Action: send("plane", "down", "up"), SkipFlagParsing: true},
		},
	}
}

// spinLine says how the loop waits for its next event (labs/live/spin.go):
// it sleeps until Spin before it and watches the clock for the rest, or,
// with its wake-ups on time, until Batch after it.
func spinLine(l live.LagStats) string {
	cost := ""
	if l.SleepCost > 0 {
		cost = fmt.Sprintf("; sleeps only through waits longer than its horizon plus a sleep's CPU cost, %v", l.SleepCost.Round(100*time.Nanosecond))
	}
	switch {
	case l.Batch > 0:
		return fmt.Sprintf("wakes %v after each event and runs every event due by then (its p99 timer wake-up latency, %v, in the last second, is that much under the events' tolerance)%s", l.Batch, l.WakeP99, cost)
	case l.Spin <= 0 && l.WakeP99 > 0:
		return fmt.Sprintf("sleeps until each event (its p99 timer wake-up latency, %v, in the last second, is within the events' tolerance)%s", l.WakeP99, cost)
	case l.Spin <= 0:
		return "none: sleeps until each event"
	case l.WakeP99 > 0:
		return fmt.Sprintf("wakes %v before each event and watches the clock (its p99 timer wake-up latency, %v, in the last second, less the events' tolerance; worst %v)%s", l.Spin, l.WakeP99, l.WakeLatency, cost)
	}
	return fmt.Sprintf("wakes %v before each event and watches the clock", l.Spin)
}

// partitionLine is a live lab's partitions as status shows them: how many
// run, what was asked and the sim rule's plan for it, and why fewer run.
func partitionLine(p live.PartitionStatus) string {
	s := fmt.Sprintf("%d running (asked %d: %s)", p.Running, p.Asked, p.Plan)
	if p.Reason != "" {
		s += "; " + p.Reason
	}
	return s
}
