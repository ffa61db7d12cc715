package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/sanitize"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/labs/live"
	"github.com/mrlab/mrlab/observe/capture"
	"github.com/mrlab/mrlab/observe/dissector"
	"github.com/mrlab/mrlab/observe/prototrace"
	"github.com/mrlab/mrlab/observe/telemetry"
	"github.com/mrlab/mrlab/softnic"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/workload"
)

// `mrlab capture` streams a pcapng capture from a running live lab: it asks
// the lab's control socket for GET /capture (served by capture.Live) and
// copies the stream to a file or stdout, whole pcapng blocks at a time, so
// that an interrupted capture is still a valid file.
//
// This file also holds the observation flags of `mrlab sim` (--capture,
// --telemetry, --plot-dir, --trace) and startObserve, which sets them up on
// a simulated run.

func init() { register(newCaptureCommand, newTraceCommand) }

func newCaptureCommand() *cli.Command {
	return &cli.Command{
		Name:      "capture",
		Usage:     "capture packets at a host, switch or link of a running live lab, as pcapng",
		ArgsUsage: "HOST[:PORT]|SWITCH[:PORT]|LINK[:AtoB|:BtoA]",
		Description: "Streams what crosses the capture point, with lab-time timestamps and the fabric's\n" +
			"drop/mark/corruption annotations as packet comments, until interrupted:\n\n" +
			"   mrlab capture h0 -w - | wireshark -X lua_script:observe/dissector/metaroce.lua -k -i -\n" +
			"   mrlab capture p0-leaf0-spine1 -w spine.pcapng --filter conn=4,path=9 -c 1000\n\n" +
			"Filter terms: host=NAME|ADDR, conn=ID (destination connection id or QP), path=ID,\n" +
			"port=UDP-PORT; repeat a key to widen it. --dissector prints the MetaRoCE Wireshark\n" +
			"dissector (install it as ~/.local/lib/wireshark/plugins/metaroce.lua).",
		Flags: []cli.Flag{runDirFlag(), labFlag(),
			&cli.StringFlag{Name: "write", Aliases: []string{"w"}, Usage: "write the capture to `FILE` (- for stdout)"},
			&cli.StringFlag{Name: "filter", Aliases: []string{"f"}, Usage: "keep only matching packets: host=, conn=, path=, port= terms, or pcap syntax as tshark -f takes it (udp port 4791, host h3 and port 4791)"},
			&cli.IntFlag{Name: "count", Aliases: []string{"c"}, Usage: "stop after this many packets"},
			&cli.DurationFlag{Name: "duration", Aliases: []string{"d"}, Usage: "stop after this long (wall clock)"},
			&cli.BoolFlag{Name: "dissector", Usage: "print the MetaRoCE Wireshark Lua dissector and exit"},
		},
		Action: captureAction,
	}
}

func captureAction(c *cli.Context) error {
	args, err := cmdArgs(c)
	if err != nil {
		return err
	}
	if c.Bool("dissector") {
		_, err := c.App.Writer.Write(dissector.Lua())
		return err
	}
	if len(args) != 1 {
		return usagef("capture: want one capture point (a host, switch or link), got %d arguments", len(args))
	}
	point := args[0]
	if _, err := capture.ParseSpec(point); err != nil {
		return usageError{fmt.Errorf("capture: %w", err)}
	}
	if c.String("filter") != "" {
		// Names are resolved by the lab; check the syntax here.
		anyHost := func(string) (netip.Addr, bool) { return netip.IPv4Unspecified(), true }
		if _, err := capture.ParseFilter(c.String("filter"), anyHost); err != nil {
			return usageError{fmt.Errorf("capture: --filter: %w", err)}
		}
	}
	if c.Int("count") < 0 {
		return usagef("capture: --count %d: want a number of packets", c.Int("count"))
	}
	dest := c.String("write")
	if dest == "" {
		return usagef("capture: say where to write the capture: -w FILE, or -w - for stdout")
	}
	q := url.Values{"point": {point}}
	if f := c.String("filter"); f != "" {
		q.Set("filter", f)
	}
	if n := c.Int("count"); n > 0 {
		q.Set("count", strconv.Itoa(n))
	}
	ls, err := openLabStream(c, "/capture", q)
	if err != nil {
		return err
	}
	defer ls.Close()

	var out io.Writer = c.App.Writer
	var file *os.File
	if dest != "-" {
		if file, err = os.Create(dest); err != nil {
			return fmt.Errorf("capture: %w", err)
		}
		out = file
	}
	n, copyErr := copyBlocks(out, ls.body)
	if file != nil {
		if err := file.Close(); err != nil && copyErr == nil {
			copyErr = fmt.Errorf("capture: %w", err)
		}
	}
	// The end of a capture the user asked to end is not an error.
	if copyErr != nil && ls.ctx.Err() == nil {
		return copyErr
	}
	if dest != "-" {
		fmt.Fprintf(c.App.ErrWriter, "capture %s of lab %s: %d packets to %s\n", point, ls.name, n, dest)
	}
	return nil
}

// newTraceCommand is `mrlab trace`: a running live lab's protocol trace,
// streamed from its control socket (GET /trace, served by prototrace.Hub).
func newTraceCommand() *cli.Command {
	return &cli.Command{
		Name:  "trace",
		Usage: "stream a live lab's protocol trace: the transports' decisions, with the fabric's drops",
		Description: "Prints one line per decision until interrupted, e.g.\n" +
			"   t=12.301us h3->h7 conn 4 path 9: SACK hole psn 1834, retransmit\n" +
			"Filter terms: host=NAME conn=ID path=ID grep=TEXT re=REGEXP (re= last, takes the rest).",
		Flags: []cli.Flag{runDirFlag(), labFlag(),
			&cli.StringFlag{Name: "filter", Aliases: []string{"f"}, Usage: "keep matching lines (host=, conn=, path=, grep=, re=)"},
			&cli.StringFlag{Name: "fabric", Value: "drops", Usage: "fabric events to include: none, drops, marks, corrupt (comma-separated)"},
			&cli.DurationFlag{Name: "duration", Aliases: []string{"d"}, Usage: "stop after this long (wall clock)"},
		},
		Action: func(c *cli.Context) error {
			args, err := cmdArgs(c)
			if err != nil {
				return err
			}
			if len(args) > 0 {
				return usagef("trace: unexpected argument %q (pick a lab with --lab)", args[0])
			}
			if _, err := prototrace.ParseFilter(c.String("filter")); err != nil {
				return usageError{fmt.Errorf("trace: --filter: %w", err)}
			}
			if _, err := prototrace.ParseFabricEvents(c.String("fabric")); err != nil {
				return usageError{fmt.Errorf("trace: --fabric: %w", err)}
			}
			q := url.Values{"fabric": {c.String("fabric")}}
			if f := c.String("filter"); f != "" {
				q.Set("filter", f)
			}
			ls, err := openLabStream(c, "/trace", q)
			if err != nil {
				return err
			}
			defer ls.Close()
			if _, err := copySanitized(c.App.Writer, ls.body); err != nil && ls.ctx.Err() == nil {
				return fmt.Errorf("lab %s: trace: %w", ls.name, err)
			}
			return nil
		},
	}
}

// copySanitized copies text lines from r to w, each sanitized for the
// terminal (a trace line can hold names a lab host chose).
func copySanitized(w io.Writer, r io.Reader) (int64, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	var n int64
	for {
		line, err := br.ReadString('\n')
		if line != "" {
			out := sanitize.Terminal(strings.TrimSuffix(line, "\n"))
			if strings.HasSuffix(line, "\n") {
				out += "\n"
			}
			k, werr := io.WriteString(w, out)
			n += int64(k)
			if werr != nil {
				return n, werr
			}
		}
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// labStream is a streaming endpoint of a running lab, open for a command
// that reads it until the user interrupts or --duration passes (then ctx
// is done).
type labStream struct {
	name    string // the lab
	ctx     context.Context
	body    io.ReadCloser
	release []func()
}

// openLabStream finds the running lab (--lab, --run-dir) and GETs path
// with q on its control socket.
func openLabStream(c *cli.Context, path string, q url.Values) (*labStream, error) {
	name, err := runningLab(c, labFlagValue(c))
	if err != nil {
		return nil, err
	}
	st, err := live.ReadState(c.String("run-dir"), name)
	if err != nil {
		return nil, err
	}
	ls := &labStream{name: name}
	var stop context.CancelFunc
	ls.ctx, stop = signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	ls.release = append(ls.release, stop)
	if d := c.Duration("duration"); d > 0 {
		var cancel context.CancelFunc
		ls.ctx, cancel = context.WithTimeout(ls.ctx, d)
		ls.release = append(ls.release, cancel)
	}
	if ls.body, err = openStream(ls.ctx, name, st.Socket, path, q); err != nil {
		ls.Close()
		return nil, err
	}
	return ls, nil
}

// Close closes the stream and stops watching for interrupts.
func (ls *labStream) Close() {
	if ls.body != nil {
		ls.body.Close()
	}
	for _, f := range ls.release {
		f()
	}
}

// openStream GETs a streaming endpoint of a lab's control socket.
func openStream(ctx context.Context, lab, socket, path string, q url.Values) (io.ReadCloser, error) {
	hc := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
	}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://lab"+path+"?"+q.Encode(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("lab %s: control socket %s: %w", lab, socket, err)
	}
	if resp.StatusCode == http.StatusOK {
		return resp.Body, nil
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	text := strings.TrimSpace(string(msg))
	var ae struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(msg, &ae) == nil && ae.Error != "" {
		text = ae.Error
	}
	switch {
	case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed:
		return nil, fmt.Errorf("lab %s does not serve %s (its control socket has no such endpoint)", lab, path)
	case resp.StatusCode == http.StatusBadRequest:
		return nil, usageError{fmt.Errorf("lab %s: %s", lab, text)}
	}
	return nil, fmt.Errorf("lab %s: %s: %s (HTTP %d)", lab, path, text, resp.StatusCode)
}

// copyBlocks copies a pcapng stream from r to w one whole block at a time
// and returns the number of packet blocks. A stream cut in the middle of a
// block (the capture was interrupted) leaves w holding only whole blocks.
func copyBlocks(w io.Writer, r io.Reader) (int, error) {
	var hdr [8]byte
	var buf []byte
	packets := 0
	var order binary.ByteOrder = binary.LittleEndian
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			if errors.Is(err, io.EOF) {
				return packets, nil
			}
			return packets, fmt.Errorf("reading capture stream: %w", err)
		}
		typ := order.Uint32(hdr[:4])
		if typ == 0x0A0D0D0A {
			// A section header: its byte-order magic follows.
			var m [4]byte
			if _, err := io.ReadFull(r, m[:]); err != nil {
				return packets, fmt.Errorf("reading capture stream: %w", err)
			}
			if binary.BigEndian.Uint32(m[:]) == 0x1A2B3C4D {
				order = binary.BigEndian
			} else {
				order = binary.LittleEndian
			}
			buf = append(append(buf[:0], hdr[:]...), m[:]...)
		} else {
			buf = append(buf[:0], hdr[:]...)
		}
		n := int(order.Uint32(hdr[4:8]))
		if n < len(buf) || n%4 != 0 || n > 1<<24 {
			return packets, fmt.Errorf("reading capture stream: bad block length %d", n)
		}
		start := len(buf)
		buf = append(buf, make([]byte, n-start)...)
		if _, err := io.ReadFull(r, buf[start:]); err != nil {
			return packets, fmt.Errorf("reading capture stream: %w", err)
		}
		if _, err := w.Write(buf); err != nil {
			return packets, fmt.Errorf("writing capture: %w", err)
		}
		if typ == 6 { // enhanced packet block
			packets++
		}
	}
}

// The observation flags of `mrlab sim`: packet captures, telemetry, plots
// and the protocol trace. sim.go wires them in:
//
//	flags = append(flags, observeFlags()...)
//	...
//	net, _ := lab.Build(loop, pool)
//	obs, err := openSimObserver(c, loop, net, hash) // hash: the trace-hash observer or nil
//	// each NIC a workload builds gets its host's tracer, and is added:
//	//   softnic.Config{..., Trace: obs.Tracer(host)}
//	//   obs.AddNIC(host, nic)           // or obs.AttachCluster(cl)
//	...run...
//	err = obs.Close(loop.Now(), report)

// observeFlags returns the flags openSimObserver reads.
func observeFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "capture", Usage: "capture packets at `POINTS` (comma-separated hosts, switches, links; h0:1 a port, LINK:AtoB a direction) as pcapng"},
		&cli.StringFlag{Name: "capture-dir", Value: "captures", Usage: "directory for --capture files, one POINT.pcapng per point"},
		&cli.StringFlag{Name: "capture-filter", Usage: "keep only matching packets in captures: host=, conn=, path=, port= terms, or pcap syntax (udp port 4791)"},
		&cli.StringFlag{Name: "telemetry", Usage: "write per-connection, per-path and per-link time series to `FILE` (.csv for CSV, else JSON lines)"},
		&cli.StringFlag{Name: "telemetry-interval", Value: "10us", Usage: "telemetry and --record sampling period (lab time)"},
		&cli.BoolFlag{Name: "telemetry-all-links", Usage: "sample idle link directions too"},
		&cli.StringFlag{Name: "plot-dir", Usage: "draw telemetry plots (cwnd and rate per path, queue depth per link) into `DIR`"},
		&cli.StringFlag{Name: "plot-format", Value: "png,svg", Usage: "plot formats: png, svg or both (png,svg); PNGs are 1200x750"},
		&cli.StringFlag{Name: "trace", Usage: "write the protocol trace (the transports' decisions) to `FILE` (- for stdout)"},
		&cli.StringFlag{Name: "trace-filter", Usage: "keep trace lines matching host=, conn=, path=, grep=, re= (re= last)"},
		&cli.StringFlag{Name: "trace-fabric", Value: "drops", Usage: "fabric events in the trace: none, drops, marks, corrupt (comma-separated)"},
	}
}

// simObserver holds what the observation flags set up on one run.
type simObserver struct {
	net     *fabric.Network
	names   map[netip.Addr]string
	nics    map[string]*softnic.NIC
	capture *capture.Capture
	capDir  string
	sampler *telemetry.Sampler
	sink    telemetry.FileSink
	rec     *telemetry.Recorder
	telFile string
	plotDir string
	plotFmt []string
	trace   *prototrace.Log
	traceF  *os.File
	traceTo string
	// recording is --record's (web.go), nil without one.
	recording *simRecording
}

// openSimObserver sets up captures, telemetry and the trace the flags ask for
// on a built network, and installs the fabric observers (with extra, e.g.
// the trace hash) on it. It returns a usable simObserver even when nothing was
// asked.
func openSimObserver(c *cli.Context, loop *sim.Loop, net *fabric.Network, extra fabric.Observer) (*simObserver, error) {
	o := &simObserver{net: net, names: map[netip.Addr]string{}, nics: map[string]*softnic.NIC{}}
	for _, h := range net.Topology().Hosts {
		o.names[h.Addr] = h.Name
	}
	var observers []fabric.Observer
	if extra != nil {
		observers = append(observers, extra)
	}
	capObs, err := o.openCapture(c)
	if err == nil {
		err = o.openTelemetry(c, loop)
	}
	var traceObs fabric.Observer
	if err == nil {
		traceObs, err = o.openTrace(c)
	}
	if err != nil {
		o.abort()
		return nil, err
	}
	for _, ob := range []fabric.Observer{capObs, traceObs} {
		if ob != nil {
			observers = append(observers, ob)
		}
	}
	net.SetObserver(capture.Tee(observers...))
	return o, nil
}

// hostAddr returns the address of the host named name.
func (o *simObserver) hostAddr(name string) (netip.Addr, bool) {
	for a, n := range o.names {
		if n == name {
			return a, true
		}
	}
	return netip.Addr{}, false
}

// openCapture opens --capture's pcapng files (nil observer without it).
func (o *simObserver) openCapture(c *cli.Context) (fabric.Observer, error) {
	pts := c.String("capture")
	if pts == "" {
		if c.IsSet("capture-filter") {
			return nil, usagef("--capture-filter needs --capture")
		}
		return nil, nil
	}
	specs, err := capture.ParseSpecs(pts)
	if err != nil {
		return nil, usageError{fmt.Errorf("--capture: %w", err)}
	}
	var m capture.Matcher
	if fs := c.String("capture-filter"); fs != "" {
		f, err := capture.ParseFilter(fs, o.hostAddr)
		if err != nil {
			return nil, usageError{fmt.Errorf("--capture-filter: %w", err)}
		}
		m = f
	}
	o.capDir = c.String("capture-dir")
	if o.capture, err = capture.Open(o.capDir, specs, capture.NetworkLayout(o.net), m); err != nil {
		if errors.Is(err, capture.ErrBadSpec) {
			return nil, usageError{fmt.Errorf("--capture: %w", err)}
		}
		return nil, err
	}
	return o.capture, nil
}

// openTelemetry starts the sampler of --telemetry and --plot-dir, if
// either is given.
func (o *simObserver) openTelemetry(c *cli.Context, loop *sim.Loop) error {
	f := c.String("telemetry")
	if f == "" && c.String("plot-dir") == "" {
		return nil
	}
	every, err := sim.ParseTime(c.String("telemetry-interval"))
	if err != nil || every <= 0 {
		return usagef("--telemetry-interval %q: want a positive duration such as 10us", c.String("telemetry-interval"))
	}
	var sinks telemetry.Multi
	if f != "" {
		if o.sink, err = telemetry.Create(f); err != nil {
			return err
		}
		o.telFile = f
		sinks = append(sinks, o.sink)
	}
	if d := c.String("plot-dir"); d != "" {
		var formats []string
		for _, pf := range strings.Split(c.String("plot-format"), ",") {
			if pf = strings.TrimSpace(pf); pf != "png" && pf != "svg" {
				return usagef("--plot-format %q: want png, svg or png,svg", c.String("plot-format"))
			}
			formats = append(formats, pf)
		}
		o.plotDir, o.plotFmt = d, formats
		o.rec = &telemetry.Recorder{}
		sinks = append(sinks, o.rec)
	}
	o.sampler = telemetry.NewSampler(loop, every, sinks)
	o.sampler.AddNetwork(o.net, c.Bool("telemetry-all-links"))
	o.sampler.Start(loop.Now())
	return nil
}

// openTrace opens --trace's protocol trace; the observer (nil if none)
// puts the fabric events --trace-fabric asks for in it.
func (o *simObserver) openTrace(c *cli.Context) (fabric.Observer, error) {
	dest := c.String("trace")
	if dest == "" {
		if c.IsSet("trace-filter") {
			return nil, usagef("--trace-filter needs --trace")
		}
		return nil, nil
	}
	f, err := prototrace.ParseFilter(c.String("trace-filter"))
	if err != nil {
		return nil, usageError{fmt.Errorf("--trace-filter: %w", err)}
	}
	events, err := prototrace.ParseFabricEvents(c.String("trace-fabric"))
	if err != nil {
		return nil, usageError{fmt.Errorf("--trace-fabric: %w", err)}
	}
	w := c.App.Writer
	if dest != "-" {
		if o.traceF, err = os.Create(dest); err != nil {
			return nil, fmt.Errorf("--trace: %w", err)
		}
		w = o.traceF
	}
	o.traceTo = dest
	o.trace = prototrace.New(w, f)
	if events == 0 {
		return nil, nil
	}
	return o.trace.Fabric(o.net, o.name, events), nil
}

func (o *simObserver) name(a netip.Addr) string { return o.names[a] }

// Tracer returns the protocol tracer for host's NIC, or nil when tracing is
// off (so transports format nothing). Lines name the peer of a connection
// once the host's NIC has been added with AddNIC.
func (o *simObserver) Tracer(host string) transport.Tracer {
	if o == nil {
		return nil
	}
	if o.trace == nil {
		return o.recording.tracer(host)
	}
	return joinTracers(o.recording.tracer(host), o.trace.Host(host, func(id uint32) string {
		if nic := o.nics[host]; nic != nil {
			if c := nic.Conn(id); c != nil {
				return o.names[c.Peer()]
			}
		}
		return ""
	}))
}

// AddNIC registers a host's NIC: its connections are sampled in the
// telemetry and named in the trace.
func (o *simObserver) AddNIC(host string, nic *softnic.NIC) {
	if o == nil {
		return
	}
	o.nics[host] = nic
	o.recording.addNIC(host, nic)
	if o.sampler != nil {
		o.sampler.AddNIC(host, nic, o.name)
	}
}

// AttachCluster adds every NIC of a workload cluster.
func (o *simObserver) AttachCluster(cl *workload.Cluster) {
	for i, nic := range cl.NICs {
		o.AddNIC(cl.Hosts[i], nic)
	}
}

// Close finishes every file at lab time now, draws the plots and adds what
// was written to the report.
func (o *simObserver) Close(now sim.Time, r *Report) error {
	if o == nil {
		return nil
	}
	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	keep(o.recording.close(now, r))
	if o.capture != nil {
		keep(o.capture.Close(now))
		if r != nil {
			r.Fact("capture_dir", "captures", o.capDir)
		}
	}
	if o.sampler != nil {
		o.sampler.Sample(now)
		o.sampler.Stop()
		keep(o.sampler.Err())
		if o.sink != nil {
			keep(o.sink.Close())
			if r != nil {
				r.Fact("telemetry", "telemetry", fmt.Sprintf("%s (%d samples)", o.telFile, o.sampler.Batches()))
			}
		}
		if o.rec != nil {
			if err := os.MkdirAll(o.plotDir, 0o755); err != nil {
				keep(fmt.Errorf("--plot-dir: %w", err))
			} else if files, err := telemetry.PlotAll(o.plotDir, o.rec.Samples, o.plotFmt...); err != nil {
				keep(err)
			} else if r != nil {
				r.Fact("plots", "plots", fmt.Sprintf("%d in %s", len(files), filepath.Clean(o.plotDir)))
			}
		}
	}
	if o.trace != nil {
		keep(o.trace.Flush())
		if o.traceF != nil {
			keep(o.traceF.Close())
		}
		if r != nil && o.traceTo != "-" {
			r.Fact("trace", "protocol trace", fmt.Sprintf("%s (%d lines)", o.traceTo, o.trace.Lines()))
		}
	}
	return first
}

// abort closes what openSimObserver opened before failing.
func (o *simObserver) abort() {
	if o.capture != nil {
		o.capture.Close(0)
	}
	if o.sink != nil {
		o.sink.Close()
	}
	if o.traceF != nil {
		o.traceF.Close()
	}
}
