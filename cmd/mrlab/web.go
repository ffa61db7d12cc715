package main

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/internal/tee"
	"github.com/mrlab/mrlab/labs"
	"github.com/mrlab/mrlab/labs/live"
	"github.com/mrlab/mrlab/observe/prototrace"
	"github.com/mrlab/mrlab/observe/web"
	"github.com/mrlab/mrlab/softnic"
	"github.com/mrlab/mrlab/transport"
)

// `mrlab web` shows a lab in the browser: a live lab through its control
// socket, or a sim run recorded with `mrlab sim --record FILE` played back
// on lab time. `mrlab sim --web` records the run and shows it at once.
// The page (package observe/web) is served on a loopback address only.

func init() { register(newWebCommand) }

func webAddrFlag(name string) cli.Flag {
	return &cli.StringFlag{Name: name, Value: "127.0.0.1:0", Usage: "serve the web view on this loopback `ADDR` (port 0 picks one)"}
}

func newWebCommand() *cli.Command {
	return &cli.Command{
		Name:      "web",
		Usage:     "show a live lab, or a recorded sim run, in the browser: link load, queues, drops, paths, ladder, faults",
		ArgsUsage: "[LAB] | --replay FILE",
		Description: "Serves the web view on 127.0.0.1 (no network access, nothing fetched from elsewhere)\n" +
			"and prints its URL; Ctrl-C stops it.\n\n" +
			"   sudo mrlab web                 # the running live lab (fault buttons work)\n" +
			"   mrlab sim --workload alltoall --transport metaroce --record run.replay\n" +
			"   mrlab web --replay run.replay  # play the run back: play, pause, step, time slider\n" +
			"   mrlab sim leafspine-faults --transport metaroce --web   # record and show at once",
		Flags: []cli.Flag{runDirFlag(),
			&cli.StringFlag{Name: "replay", Usage: "play back a recorded sim run from `FILE` (mrlab sim --record)"},
			webAddrFlag("addr"),
			&cli.IntFlag{Name: "fps", Value: web.DefaultFPS, Usage: "frames per second pushed to the page at most (live: the poll rate)"},
		},
		Action: webAction,
	}
}

func webAction(c *cli.Context) error {
	args, err := cmdArgs(c)
	if err != nil {
		return err
	}
	if fps := c.Int("fps"); fps < 1 || fps > 60 {
		return usagef("web: --fps %d: want 1..60", fps)
	}
	if f := c.String("replay"); f != "" {
		if len(args) > 0 {
			return usagef("web: --replay plays a file; a running lab (%s) is shown without it", args[0])
		}
		return serveReplay(c, f, c.String("addr"))
	}
	if len(args) > 1 {
		return usagef("web: want at most one running lab, got %d", len(args))
	}
	arg := ""
	if len(args) == 1 {
		arg = args[0]
	}
	name, err := runningLab(c, arg)
	if err != nil {
		return err
	}
	cl, err := live.Dial(c.String("run-dir"), name)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	logf := func(format string, a ...any) { fmt.Fprintf(c.App.ErrWriter, "mrlab web: "+format+"\n", a...) }
	period := time.Second / time.Duration(c.Int("fps"))
	lv, err := web.NewLive(ctx, name, live.WebLab{C: cl}, period, logf)
	if err != nil {
		return err
	}
	return serve(ctx, c, web.NewLiveServer(lv, c.Int("fps")), c.String("addr"), "lab "+name)
}

// serveReplay reads a replay file and serves it until interrupted.
func serveReplay(c *cli.Context, file, addr string) error {
	rp, err := web.OpenReplay(file)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	start, end := rp.Times()
	what := fmt.Sprintf("%s (%d frames, %v..%v of lab time)", file, rp.Frames(), start, end)
	fps := web.DefaultFPS
	if c.IsSet("fps") {
		fps = c.Int("fps")
	}
	return serve(ctx, c, web.NewReplayServer(rp, fps), addr, what)
}

func serve(ctx context.Context, c *cli.Context, srv *web.Server, addr, what string) error {
	ln, err := web.Listen(addr)
	if err != nil {
		if errors.Is(err, web.ErrNotLoopback) {
			return usageError{err}
		}
		return err
	}
	fmt.Fprintf(c.App.Writer, "web view of %s: http://%s/  (Ctrl-C to stop)\n", what, ln.Addr())
	return srv.Serve(ctx, ln)
}

// The sim side: --record FILE and --web.

func webSimFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "record", Usage: "record the run for `mrlab web --replay`: topology, link and connection state every --telemetry-interval, the protocol trace, the faults, to `FILE` (JSON lines; a .gz name compresses)"},
		&cli.BoolFlag{Name: "web", Usage: "after the run, show it in the browser (serves on --web-addr until Ctrl-C)"},
		webAddrFlag("web-addr"),
	}
}

// webTempKey names, in the app's metadata, the temporary replay file a
// --web run without --record records to.
const webTempKey = "web-temp-replay"

// serveAfterSim shows the recorded run when --web asked for it; runErr is
// the run's own outcome, returned afterwards.
func serveAfterSim(c *cli.Context, runErr error) error {
	if tmp, ok := c.App.Metadata[webTempKey].(string); ok {
		defer os.Remove(tmp)
	}
	var ue usageError
	if !c.Bool("web") || errors.As(runErr, &ue) {
		return runErr
	}
	if _, err := os.Stat(c.String("record")); err != nil {
		return runErr
	}
	if runErr != nil {
		fmt.Fprintf(c.App.ErrWriter, "mrlab: %v\n", runErr)
	}
	if err := serveReplay(c, c.String("record"), c.String("web-addr")); err != nil {
		return err
	}
	return runErr
}

// simRecording is a sim run's --record: the recorder and its file. A nil
// *simRecording records nothing.
type simRecording struct {
	rec  *web.Recorder
	file string
}

// openRecording starts the --record file on a built network.
func openRecording(c *cli.Context, loop *sim.Loop, net *fabric.Network, lab *labs.Lab, workloadName string, kind transport.Kind, usesTransport bool) (*simRecording, error) {
	file := c.String("record")
	if file == "" {
		if !c.Bool("web") {
			return nil, nil
		}
		// --web alone records to a temporary file, removed after serving.
		f, err := os.CreateTemp("", "mrlab-*.replay")
		if err != nil {
			return nil, fmt.Errorf("sim --web: %w", err)
		}
		f.Close()
		file = f.Name()
		if c.App.Metadata == nil {
			c.App.Metadata = map[string]any{}
		}
		c.App.Metadata[webTempKey] = file
		if err := c.Set("record", file); err != nil {
			return nil, err
		}
	}
	every, err := sim.ParseTime(c.String("telemetry-interval"))
	if err != nil || every <= 0 {
		return nil, usagef("--telemetry-interval %q: want a positive duration such as 10us", c.String("telemetry-interval"))
	}
	events, err := prototrace.ParseFabricEvents(c.String("trace-fabric"))
	if err != nil {
		return nil, usageError{fmt.Errorf("--trace-fabric: %w", err)}
	}
	meta := web.ReplayMeta{Lab: lab.Name, LabFile: lab.File, Seed: lab.Seed, Workload: workloadName}
	if usesTransport {
		meta.Transport = kind.String()
	}
	for i := range lab.Faults { // --no-faults: oneLab kept only the flags' faults
		meta.Faults = append(meta.Faults, lab.Faults[i].String())
	}
	w, err := createReplayFile(file)
	if err != nil {
		return nil, err
	}
	rec, err := web.NewRecorder(w, loop, net, meta, every, events)
	if err != nil {
		w.Close()
		return nil, err
	}
	rec.Start(loop.Now())
	return &simRecording{rec: rec, file: file}, nil
}

// createReplayFile creates the --record file, gzip-compressed for a .gz
// name.
func createReplayFile(name string) (io.WriteCloser, error) {
	f, err := os.Create(name)
	if err != nil {
		return nil, fmt.Errorf("--record: %w", err)
	}
	if !strings.HasSuffix(name, ".gz") {
		return f, nil
	}
	return &gzipFile{gzip.NewWriter(f), f}, nil
}

type gzipFile struct {
	*gzip.Writer
	f *os.File
}

func (g *gzipFile) Close() error {
	return errors.Join(g.Writer.Close(), g.f.Close())
}

// FabricObserver returns the recorder's fabric observer, or nil.
func (r *simRecording) FabricObserver() fabric.Observer {
	if r == nil {
		return nil
	}
	return r.rec.FabricObserver()
}

func (r *simRecording) tracer(host string) transport.Tracer {
	if r == nil {
		return nil
	}
	return r.rec.Tracer(host)
}

func (r *simRecording) addNIC(host string, nic *softnic.NIC) {
	if r != nil {
		r.rec.AddNIC(host, nic)
	}
}

// faultReport wraps a fault timeline report so the recording hears of
// each fault too.
func (r *simRecording) faultReport(next labs.FaultReport) labs.FaultReport {
	if r == nil {
		return next
	}
	return func(now sim.Time, f *labs.Fault, err error) {
		r.rec.Fault(now, strings.TrimPrefix(f.String(), f.At.String()+" "), err)
		if next != nil {
			next(now, f, err)
		}
	}
}

func (r *simRecording) close(now sim.Time, rep *Report) error {
	if r == nil {
		return nil
	}
	if err := r.rec.Close(now); err != nil {
		return err
	}
	if rep != nil {
		rep.Fact("recording", "recording", fmt.Sprintf("%s (%d frames)", r.file, r.rec.Frames()))
	}
	return nil
}

// teeTracer sends a transport's trace calls to several tracers.
type teeTracer []transport.Tracer

func (t teeTracer) Tracef(now sim.Time, conn uint32, format string, args ...any) {
	for _, x := range t {
		x.Tracef(now, conn, format, args...)
	}
}

// joinTracers returns the non-nil tracers as one (nil if none).
func joinTracers(ts ...transport.Tracer) transport.Tracer {
	return tee.Join(func(k []transport.Tracer) transport.Tracer { return teeTracer(k) }, ts...)
}
