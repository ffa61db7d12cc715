package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/mrlab/mrlab/labs/live"
	"github.com/mrlab/mrlab/verbs"
	"github.com/mrlab/mrlab/workload/verbsperf"
)

// mrlab perf is a client of the lab's verbs endpoints, like any program
// of the user's: it runs itself in the two hosts (`mrlab perf-agent`),
// the server in --to and the client in --from, and each drives its host's
// NIC through package verbs. The agents report on stdout, one JSON line
// per event.

func init() { register(newPerfAgentCommand) }

// agentLine is one line an agent prints.
type agentLine struct {
	Listening uint16            `json:"listening,omitempty"`
	Result    *verbsperf.Result `json:"result,omitempty"`
	Error     string            `json:"error,omitempty"`
}

func newPerfAgentCommand() *cli.Command {
	return &cli.Command{
		Name:   "perf-agent",
		Usage:  "one side of mrlab perf, run in a lab host (internal)",
		Hidden: true,
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "serve", Usage: "serve one test"},
			&cli.UintFlag{Name: "port", Usage: "port to serve on (0: the first free from 18515)"},
			&cli.StringFlag{Name: "to", Usage: "server ADDR:PORT (client)"},
			&cli.StringFlag{Name: "spec", Usage: "the test, as JSON (client)"},
			&cli.DurationFlag{Name: "timeout", Value: 5 * time.Minute, Usage: "give up after this long"},
		},
		Action: func(c *cli.Context) error {
			ctx, cancel := context.WithTimeout(c.Context, c.Duration("timeout"))
			defer cancel()
			out := json.NewEncoder(c.App.Writer)
			stop, err := agentProfile(c.Bool("serve"))
			if err != nil {
				return err
			}
			res, err := perfAgent(ctx, c, func(port uint16) { out.Encode(agentLine{Listening: port}) })
			// Written before the result: perf ends the agents once it
			// has both results.
			stop()
			if err != nil {
				out.Encode(agentLine{Result: res, Error: err.Error()})
				return cli.Exit("", 1)
			}
			return out.Encode(agentLine{Result: res})
		},
	}
}

// AgentProfileEnv names the environment variable that, when set to a
// directory, makes each perf agent write a CPU profile of its run there
// (server-PID.pprof, client-PID.pprof; `go tool pprof` reads them): where
// a side's CPU per GB goes.
const AgentProfileEnv = "MRLAB_PERF_AGENT_PROFILE"

// agentProfile starts the agent's CPU profile when AgentProfileEnv asks
// for one, and returns what stops it.
func agentProfile(serve bool) (func(), error) {
	dir := os.Getenv(AgentProfileEnv)
	if dir == "" {
		return func() {}, nil
	}
	role := "client"
	if serve {
		role = "server"
	}
	f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%s-%d.pprof", role, os.Getpid())))
	if err != nil {
		return nil, fmt.Errorf("perf-agent: %s: %w", AgentProfileEnv, err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("perf-agent: profiling: %w", err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

func perfAgent(ctx context.Context, c *cli.Context, listening func(uint16)) (*verbsperf.Result, error) {
	dev, err := verbs.Open(ctx)
	if err != nil {
		return nil, err
	}
	defer dev.Close()
	if c.Bool("serve") {
		if c.Uint("port") > 65535 {
			return nil, fmt.Errorf("port %d", c.Uint("port"))
		}
		return verbsperf.Serve(ctx, dev, uint16(c.Uint("port")), listening)
	}
	to, err := netip.ParseAddrPort(c.String("to"))
	if err != nil {
		return nil, fmt.Errorf("--to: %w", err)
	}
	var spec verbsperf.Spec
	if err := json.Unmarshal([]byte(c.String("spec")), &spec); err != nil {
		return nil, fmt.Errorf("--spec: %w", err)
	}
	return verbsperf.Run(ctx, dev, to, spec)
}

// perfRun is one mrlab perf run: its two agents.
type perfRun struct {
	dir, lab string
	stderr   io.Writer
	agents   []*exec.Cmd
}

// start runs an agent in host and returns its stdout's lines.
func (p *perfRun) start(host string, args ...string) (<-chan agentLine, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("perf: finding the mrlab binary: %w", err)
	}
	cmd := exec.Command(exe, append([]string{"perf-agent"}, args...)...)
	cmd.Stderr = p.stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := live.Exec(p.dir, p.lab, host, cmd); err != nil {
		return nil, fmt.Errorf("perf: starting its side in %s: %w", host, err)
	}
	p.agents = append(p.agents, cmd)
	lines := make(chan agentLine, 4)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var l agentLine
			if json.Unmarshal(sc.Bytes(), &l) != nil {
				l.Error = fmt.Sprintf("%s said %q", host, sc.Text())
			}
			lines <- l
		}
		cmd.Wait()
	}()
	return lines, nil
}

// stop ends the agents still running (a canceled or failed run); the lab
// closes their connections and frees what they held.
func (p *perfRun) stop() {
	for _, a := range p.agents {
		if a.Process != nil {
			a.Process.Signal(syscall.SIGKILL)
		}
	}
}

// next waits for an agent's next line.
func next(ctx context.Context, lines <-chan agentLine, host string) (agentLine, error) {
	select {
	case l, ok := <-lines:
		if !ok {
			return l, fmt.Errorf("perf: its side in %s exited without a result", host)
		}
		if l.Error != "" {
			return l, fmt.Errorf("perf: %s: %s", host, l.Error)
		}
		return l, nil
	case <-ctx.Done():
		return agentLine{}, ctx.Err()
	}
}

// verbsPerf runs req through the verbs endpoints of its two hosts and
// returns the client's result and the server's.
// perfOptions are a perf run's client-side choices that the control
// API's request does not carry.
type perfOptions struct {
	Events bool // wait for completions in the kernel
	CQMod  int  // perftest's -Q for the BW peak (0: perftest's default)
	NoPeak bool // perftest's -N
}

func verbsPerf(ctx context.Context, dir, lab string, req live.PerfRequest, opt perfOptions, stderr io.Writer) (cli, srv *verbsperf.Result, err error) {
	st, err := live.ReadState(dir, lab)
	if err != nil {
		return nil, nil, err
	}
	to, ok := st.Host(req.To)
	if _, okFrom := st.Host(req.From); !ok || !okFrom {
		return nil, nil, fmt.Errorf("perf: lab %s has no host %q (hosts: %v)", lab, map[bool]string{true: req.From, false: req.To}[ok], st.HostNames())
	}
	if req.From == req.To {
		return nil, nil, fmt.Errorf("perf: --from and --to are both %s", req.From)
	}
	tr, err := verbs.ParseTransport(req.Transport)
	if err != nil {
		return nil, nil, fmt.Errorf("perf: %w", err)
	}
	spec := verbsperf.Spec{Test: req.Op, Size: req.Size, Count: req.Count, Depth: req.Depth, Transport: tr, Verify: req.Verify, Events: opt.Events,
		CQMod: opt.CQMod, NoPeak: opt.NoPeak}
	if spec.Count == 0 {
		spec.Duration = req.Duration
	}
	if spec.Test == verbsperf.WriteLat {
		spec.Depth = 1
	}
	if err := spec.Check(); err != nil {
		return nil, nil, fmt.Errorf("perf: %w", err)
	}
	js, _ := json.Marshal(spec)
	run := &perfRun{dir: dir, lab: lab, stderr: stderr}
	defer run.stop()
	// The agents learn the lab died from their endpoints (verbs.Device.Err);
	// perf watches the lab's process too, so that it says so (and ends
	// the agents) even if an agent could not.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go watchLab(ctx, dir, lab, st, cancel)
	defer func() {
		if cause := context.Cause(ctx); errors.Is(cause, errLabStopped) {
			err = cause
		}
	}()
	timeout := "5m"
	if spec.Duration > 0 {
		timeout = (spec.Duration + 2*time.Minute).String()
	}
	slines, err := run.start(req.To, "--serve", "--timeout", timeout)
	if err != nil {
		return nil, nil, err
	}
	l, err := next(ctx, slines, req.To)
	if err != nil {
		return nil, nil, err
	}
	addr := netip.AddrPortFrom(netip.MustParseAddr(to.Addr), l.Listening)
	clines, err := run.start(req.From, "--to", addr.String(), "--spec", string(js), "--timeout", timeout)
	if err != nil {
		return nil, nil, err
	}
	cl, err := next(ctx, clines, req.From)
	if err != nil {
		if cl.Result != nil {
			return cl.Result, nil, err
		}
		return nil, nil, err
	}
	sl, err := next(ctx, slines, req.To)
	if err != nil {
		return cl.Result, sl.Result, err
	}
	if cl.Result == nil || sl.Result == nil {
		return cl.Result, sl.Result, errors.New("perf: a side reported no result")
	}
	return cl.Result, sl.Result, nil
}

// errLabStopped: the lab's process died during a perf run.
var errLabStopped = errors.New("the lab stopped")

// labWatchPeriod is how often perf looks whether the lab still runs: a
// tenth of the 1 s within which perf says that the lab died.
const labWatchPeriod = 100 * time.Millisecond

// watchLab cancels ctx with errLabStopped once the process that st
// records is gone.
func watchLab(ctx context.Context, dir, lab string, st *live.State, cancel context.CancelCauseFunc) {
	t := time.NewTicker(labWatchPeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !(live.SystemOps{}).ProcessAlive(st.PID, st.StartTicks) {
			cancel(fmt.Errorf("perf: %w: lab %s's process %d is gone (killed or crashed); `mrlab down %s` removes what it left", errLabStopped, lab, st.PID, lab))
			return
		}
	}
}

// labAlive reports whether lab's process still runs.
func labAlive(dir, lab string) bool {
	st, err := live.ReadState(dir, lab)
	return err == nil && (live.SystemOps{}).ProcessAlive(st.PID, st.StartTicks)
}

// perfCounters are the counters perf reports.
func perfCounters(r *verbsperf.Result) map[string]uint64 {
	return map[string]uint64{
		"retransmits": r.QP.Retransmits, "timeouts": r.QP.Timeouts, "ecn_echoes": r.QP.ECNEchoes,
		"ce_received": r.QP.CEReceived, "packets_sent": r.QP.TxPackets, "packets_received": r.QP.RxPackets,
		"work_requests": r.Posted, "doorbells": r.Doorbells, "cq_waits": r.Waits,
		"pacing_sleeps": r.Sleeps, "empty_polls": r.Looks,
	}
}
