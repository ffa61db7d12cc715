package live

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/labs/hostns"
	"github.com/mrlab/mrlab/labs/uverbs"
)

// defaultSubnet is the lab subnet routed through every host's mr0 (RFC 2544
// benchmarking space); hosts get no default route.
var defaultSubnet = netip.MustParsePrefix("198.18.0.0/15")

// DefaultMTU is the MTU of a host's mr0: kernel traffic uses Ethernet-sized
// packets. MetaRoCE traffic never crosses the TUN and uses the NIC's own
// path MTU.
const DefaultMTU = 1500

// ifaceName is the name of a host's TUN device inside its namespace.
const ifaceName = "mr0"

// Options configure Up. The zero value brings a lab up in real namespaces
// under DefaultRunDir.
type Options struct {
	// RunDir holds the state file and control socket (DefaultRunDir).
	RunDir string
	// MTU of each host's mr0 (DefaultMTU).
	MTU int
	// Routes routed through mr0 in each host (defaultSubnet). A default
	// route is refused.
	Routes []netip.Prefix
	// Pacer tunes the real-time loop.
	Pacer PacerConfig
	// Logf receives progress and warnings; nil discards them.
	Logf func(format string, args ...any)
	// Devices, when set, stands in for namespaces and TUNs: one device per
	// host, in Engine.Hosts order. Tests use it to run the runtime without
	// root; no namespace is created then.
	Devices []Device
	// Ops performs teardown of stale labs (SystemOps).
	Ops Ops
	// Metrics is the loopback address of the Prometheus endpoint served
	// for an engine that exports telemetry (DefaultMetricsAddr when
	// empty; metricsOff serves none). The address chosen is recorded in
	// the state file and the status.
	Metrics string
	// WriterOnly hands every batch of packets for a host's kernel to a
	// writer goroutine of its own. By default the loop writes batches to
	// the TUN itself: a hand-off wakes the writer's thread, and on this
	// project's 2-core VM a thread wake-up costs more than the write
	// (BenchmarkLabPacketRate's csw/kpkt and cpu-ns/pkt; README "The
	// lab's own packet rate").
	WriterOnly bool
	// ReaderOnly reads every host's kernel on a reader goroutine that
	// hands batches to the loop. By default the loop reads a TUN itself
	// (direct.go): the kernel wakes it straight from a host's send.
	ReaderOnly bool
	// Extend, if set, adds handlers to the control server before it
	// serves (packet capture, telemetry). Handlers run on the server's
	// goroutines: reach the engine through l.Pacer().Do.
	Extend func(l *Lab, mux *http.ServeMux)
	// Partitions is the partition count asked for (0: DefaultPartitions
	// of the machine's cores). A live lab runs on one for now; status
	// says what the sim rule would make of the count and why (partition.go).
	Partitions int
}

// Lab is a running live lab.
type Lab struct {
	name  string
	opts  Options
	state *State
	eng   Engine
	pacer *Pacer
	hosts []*hostIO
	nss   []*hostns.Namespace
	verbs *uverbs.Set // the hosts' verbs endpoints; nil on fake devices

	ln      net.Listener
	srv     *http.Server
	msrv    *http.Server // the metrics endpoint, nil when off
	closers []func()     // run before the servers shut down

	cancel   context.CancelFunc
	stopOnce sync.Once
	stopping chan struct{}
	finished chan struct{}
	err      error
	started  time.Time
	parts    PartitionStatus
}

// hostIO is one host's kernel side: its device and the goroutines that
// read and write it.
type hostIO struct {
	spec   HostSpec
	ns     string
	dev    Device
	in     *kernelInput
	out    *kernelOutput
	direct bool // the loop reads dev itself (direct.go)
	label  string

	// Loop-goroutine counters.
	fromKernel uint64
	toKernel   uint64
}

// Up brings lab up: it claims the lab's state file (failing with ErrRunning
// if it is up), creates a namespace and TUN per host, starts the engine on a
// real-time loop and serves the control socket. The returned Lab runs until
// ctx is cancelled, a client asks it down, or Close.
func Up(ctx context.Context, name string, eng Engine, opts Options) (_ *Lab, err error) {
	if err := ValidLabName(name); err != nil {
		return nil, err
	}
	if err := opts.fill(name); err != nil {
		return nil, err
	}
	specs := eng.Hosts()
	st, err := newState(name, specs, opts)
	if err != nil {
		return nil, err
	}
	if err := claim(opts.RunDir, st, opts.Ops, opts.Logf); err != nil {
		return nil, err
	}
	l := &Lab{name: name, opts: opts, state: st, eng: eng, stopping: make(chan struct{}), finished: make(chan struct{}), started: time.Now()}
	defer func() {
		if err != nil {
			if terr := l.teardown(); terr != nil {
				err = errors.Join(err, terr)
			}
		}
	}()
	devs := opts.Devices
	if devs == nil {
		if devs, err = l.createHosts(specs); err != nil {
			return nil, err
		}
	}
	for i, h := range specs {
		l.hosts = append(l.hosts, &hostIO{spec: h, ns: st.Hosts[i].Namespace, dev: devs[i], label: h.Name})
	}
	if err = l.startEngine(); err != nil {
		return nil, err
	}
	if err = l.startVerbs(); err != nil {
		return nil, err
	}
	if err = l.serve(); err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	l.cancel = cancel
	for _, h := range l.hosts {
		if !h.direct {
			go h.in.readFrom(h.dev)
		}
		if !h.out.inline {
			go h.out.WriteTo(h.dev)
		}
	}
	go l.run(runCtx)
	opts.Logf("lab %s up: %d hosts, control socket %s", name, len(l.hosts), st.Socket)
	if st.Metrics != "" {
		opts.Logf("lab %s: Prometheus metrics at http://%s/metrics", name, st.Metrics)
	}
	return l, nil
}

// fill sets the options left zero to their defaults and checks the MTU and
// the metrics address of lab name.
func (opts *Options) fill(name string) error {
	if opts.RunDir == "" {
		opts.RunDir = DefaultRunDir
	}
	if opts.MTU == 0 {
		opts.MTU = DefaultMTU
	}
	if opts.MTU < 576 || opts.MTU > packet.MaxSize {
		return fmt.Errorf("lab %s: MTU %d: want 576..%d", name, opts.MTU, packet.MaxSize)
	}
	if opts.Routes == nil {
		opts.Routes = []netip.Prefix{defaultSubnet}
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	if opts.Ops == nil {
		opts.Ops = SystemOps{}
	}
	if opts.Metrics == "" {
		opts.Metrics = DefaultMetricsAddr
	}
	if err := ValidMetricsAddr(opts.Metrics); err != nil {
		return fmt.Errorf("lab %s: %w", name, err)
	}
	return nil
}

// newState is the state file of lab name with hosts specs, before it is
// claimed: each host's namespace and interface (or device, with
// opts.Devices).
func newState(name string, specs []HostSpec, opts Options) (*State, error) {
	if len(specs) == 0 {
		return nil, fmt.Errorf("lab %s has no hosts", name)
	}
	if opts.Devices != nil && len(opts.Devices) != len(specs) {
		return nil, fmt.Errorf("lab %s: %d devices for %d hosts", name, len(opts.Devices), len(specs))
	}
	st := &State{Lab: name, PID: os.Getpid(), Started: time.Now().UTC(), Owner: CallerUID(), Socket: socketPath(opts.RunDir, name)}
	st.StartTicks, _ = processStartTicks(st.PID)
	seen := map[string]bool{}
	for _, h := range specs {
		if seen[h.Name] {
			return nil, fmt.Errorf("lab %s: host %q twice", name, h.Name)
		}
		seen[h.Name] = true
		nsName := NamespaceName(name, h.Name)
		if err := hostns.ValidName(nsName); err != nil {
			return nil, fmt.Errorf("lab %s host %s: %w", name, h.Name, err)
		}
		st.Hosts = append(st.Hosts, StateHost{Name: h.Name, Namespace: nsName, Iface: ifaceName, Addr: h.Addr.String()})
	}
	if opts.Devices != nil {
		for i := range st.Hosts {
			st.Hosts[i].Namespace, st.Hosts[i].Iface = "", fmt.Sprintf("device%d", i)
		}
	}
	return st, nil
}

// startEngine starts the engine on a real-time loop with the pacer, and
// gives each host its kernel input and output.
func (l *Lab) startEngine() error {
	opts, eng := &l.opts, l.eng
	l.parts = planLive(eng, opts.Partitions)
	if l.parts.Reason != "" {
		opts.Logf("partitions: %d asked, running on %d: %s", l.parts.Asked, l.parts.Running, l.parts.Reason)
	}
	loop := sim.NewLoop()
	pool := packet.NewPool()
	pc := opts.Pacer
	if pc.Warn == nil {
		pc.Warn = func(msg string) { opts.Logf("warning: %s", msg) }
	}
	var err error
	if l.pacer, err = NewPacer(loop, pool, pc); err != nil {
		return err
	}
	if err = eng.Start(loop, pool, l.deliver); err != nil {
		return fmt.Errorf("lab %s: starting fabric and NICs: %w", l.name, err)
	}
	for i, h := range l.hosts {
		i := i
		h.in = l.pacer.newInput(max(h.dev.BatchSize(), 1), 0, opts.MTU, func(now sim.Time, b *packet.Buffer) {
			l.hosts[i].fromKernel++
			eng.FromKernel(i, now, b)
		})
		// Packets for a kernel came from another kernel's MTU-sized
		// packets; a larger one is dropped and counted.
		// As many as the kernel's own queue towards the lab holds: a
		// writer the machine starves for a while must not drop what a
		// host's NIC would have handed its kernel.
		h.out = l.pacer.newOutput(h.dev, kernelQueueLen(h.spec.Rate, opts.MTU), opts.MTU, !opts.WriterOnly)
		if !opts.ReaderOnly {
			if h.direct, err = l.pacer.readDirect(h.in, h.dev); err != nil {
				return fmt.Errorf("lab %s host %s: %w", l.name, h.label, err)
			}
		}
	}
	for _, err := range l.pacer.direct.attached {
		opts.Logf("lab %s: %v (the lab works; every packet of that host also wakes an idle thread of the Go runtime)", l.name, err)
	}
	return nil
}

// createHosts creates each host's namespace and TUN, recording every
// namespace in the state file before creating it.
func (l *Lab) createHosts(specs []HostSpec) ([]Device, error) {
	for _, h := range l.state.Hosts {
		if hostns.Exists(h.Namespace) {
			return nil, fmt.Errorf("lab %s: namespace %s exists and was not created by this lab (remove it with `ip netns del %s` if it is stale)", l.name, h.Namespace, h.Namespace)
		}
	}
	var devs []Device
	for i, h := range l.state.Hosts {
		l.state.Namespaces = append(l.state.Namespaces, h.Namespace)
		if err := l.state.save(l.opts.RunDir); err != nil {
			return nil, err
		}
		ns, err := hostns.Create(h.Namespace)
		if err != nil {
			return nil, fmt.Errorf("lab %s host %s: %w", l.name, h.Name, err)
		}
		l.nss = append(l.nss, ns)
		if err := ns.DisableIPv6(); err != nil {
			return nil, err
		}
		tun, err := ns.OpenTUN(ifaceName)
		if err != nil {
			return nil, err
		}
		devs = append(devs, tun)
		// Close on failure from here on: teardown closes l.hosts' devices,
		// which are not set yet.
		cfg := hostns.IfConfig{Addr: netip.PrefixFrom(specs[i].Addr, 32), Routes: l.opts.Routes, MTU: l.opts.MTU,
			TxQueueLen: kernelQueueLen(specs[i].Rate, l.opts.MTU)}
		if err := ns.Configure(tun, cfg); err != nil {
			for _, d := range devs {
				d.Close()
			}
			return nil, err
		}
		if err := ns.Shape(tun, kernelShape(specs[i].Rate, l.opts.MTU)); err != nil {
			// A kernel without tbf: the lab runs, and a host that sends
			// faster than its NIC's rate loses the excess at mr0's ring.
			l.opts.Logf("lab %s host %s: mr0 not paced to its NIC's rate (%v); a host sending faster than that loses packets at mr0 (tx_dropped)", l.name, h.Name, err)
		}
	}
	return devs, nil
}

// maxSuperPacket is the largest packet a host's kernel hands mr0: a TCP
// super-packet (gso_max_size).
const maxSuperPacket = 64 << 10

// kernelShape paces a host's mr0 to its NIC's rate (rate bits/s, the sum
// of its ports'), as a real NIC's line paces its host: what the host
// sends faster waits in the kernel (and blocks its sender once the
// socket's send buffer is full) instead of reaching the lab faster than
// the NIC can send it. Without it, a sender that bursts above the line
// rate (iperf3's UDP catching up after the machine kept it from a CPU:
// 2 Gbit/s into b2b's 1 Gbit/s NIC for 600 ms) fills mr0's ring faster
// than the lab reads and the kernel drops the excess there (tx_dropped),
// a loss no real host has, since its NIC's queue stops the qdisc. The
// bucket holds two super-packets (so none is split), and the queue the
// same kernelQueueSpan as mr0's ring; beyond it the qdisc drops, counted
// (mr0's qdisc_dropped), as a real host's qdisc does.
func kernelShape(rate float64, mtu int) hostns.Shape {
	return hostns.Shape{Rate: rate, Burst: 2 * maxSuperPacket, Limit: kernelQueueLen(rate, mtu) * mtu}
}

// kernelQueueSpan is how long a host's kernel can send at its NIC's full
// rate while the lab does not read its mr0, before the kernel drops
// (mr0's tx_dropped): the lab's reader is one goroutine on a shared
// machine, and a few milliseconds without the CPU must not look like
// loss to the host's TCP. It is not part of the emulated NIC, whose own
// host queue (softnic) is where a host's excess traffic is dropped.
const kernelQueueSpan = 20 * time.Millisecond

// kernelQueueLen is mr0's txqueuelen for a NIC of rate bits/s: what the
// kernel sends in kernelQueueSpan in MTU-sized packets, at least Linux's
// default of 1000.
func kernelQueueLen(rate float64, mtu int) int {
	return max(1000, int(rate*kernelQueueSpan.Seconds()/float64(8*mtu)))
}

// deliver hands a packet from the engine to a host's kernel. It runs on the
// loop goroutine.
func (l *Lab) deliver(host int, _ sim.Time, ip []byte) {
	h := l.hosts[host]
	if l.pacer.currentLag() > l.pacer.LagThreshold() {
		l.pacer.countLatePacket()
	}
	if h.out.Send(ip) {
		h.toKernel++
	}
}

// run paces the loop until stopped, then tears everything down.
func (l *Lab) run(ctx context.Context) {
	go func() {
		select {
		case <-l.stopping:
			l.cancel()
		case <-ctx.Done():
		}
	}()
	l.pacer.Run(ctx)
	l.stopOnce.Do(func() { close(l.stopping) })
	l.err = l.teardown()
	close(l.finished)
}

// Stop asks the lab to stop; Wait waits for the teardown.
func (l *Lab) Stop() { l.stopOnce.Do(func() { close(l.stopping) }) }

// Wait blocks until the lab has stopped and torn down, and returns the
// teardown's error.
func (l *Lab) Wait() error {
	<-l.finished
	return l.err
}

// Close stops the lab and waits for its teardown.
func (l *Lab) Close() error {
	l.Stop()
	return l.Wait()
}

// Name returns the lab's name.
func (l *Lab) Name() string { return l.name }

// State returns a copy of the lab's state record.
func (l *Lab) State() State {
	s := *l.state
	s.Hosts = append([]StateHost(nil), s.Hosts...)
	s.Namespaces = append([]string(nil), s.Namespaces...)
	return s
}

// Pacer returns the lab's pacer (to post work to its loop).
func (l *Lab) Pacer() *Pacer { return l.pacer }

// Engine returns the lab's engine. Call its methods only on the loop
// goroutine (through Pacer().Do).
func (l *Lab) Engine() Engine { return l.eng }

// teardown closes the control server and devices and removes what the state
// file records. It is safe to call on a partly built lab.
func (l *Lab) teardown() error {
	var errs []error
	for _, c := range l.closers {
		c()
	}
	for _, srv := range []*http.Server{l.srv, l.msrv} {
		if srv != nil {
			sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			if srv.Shutdown(sctx) != nil {
				// A stream opened after the closers ran (a capture or
				// trace reader racing the teardown): cut it off.
				srv.Close()
			}
			cancel()
		}
	}
	if l.verbs != nil {
		// The loop has stopped (or never ran): clients are disconnected
		// and what they held is released before the namespaces go.
		l.verbs.Close()
	}
	for _, h := range l.hosts {
		if err := h.dev.Close(); err != nil {
			errs = append(errs, fmt.Errorf("closing %s's device: %w", h.label, err))
		}
	}
	for _, ns := range l.nss {
		ns.Close()
	}
	if err := cleanup(l.opts.RunDir, l.state, l.opts.Ops); err != nil {
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		l.opts.Logf("lab %s down", l.name)
	}
	return errors.Join(errs...)
}

// Status is a running lab's report: hosts, lag, links, switches, counters.
type Status struct {
	Lab string `json:"lab"`
	PID int    `json:"pid"`
	// Metrics is the loopback host:port of the Prometheus endpoint, empty
	// when the lab serves none.
	Metrics     string        `json:"metrics,omitempty"`
	Uptime      time.Duration `json:"uptime_ns"`
	VirtualTime time.Duration `json:"virtual_time_ns"`
	Hosts       []HostStatus  `json:"hosts"`
	Lag         LagStats      `json:"lag"`
	// Partitions says how the lab's event loop is partitioned.
	Partitions PartitionStatus `json:"partitions"`
	Engine     EngineStatus    `json:"engine"`
}

// HostStatus is one host's kernel-side counters.
type HostStatus struct {
	Name       string `json:"name"`
	Addr       string `json:"addr"`
	Namespace  string `json:"namespace"`
	Iface      string `json:"iface"`
	FromKernel uint64 `json:"from_kernel"`
	ToKernel   uint64 `json:"to_kernel"`
	// ToKernelDrops counts packets for the kernel dropped because the TUN
	// writer fell behind (or the kernel refused them).
	ToKernelDrops uint64 `json:"to_kernel_drops"`
	// FromKernelErrors counts reads of the host's mr0 that failed (a
	// malformed offload header from the host's kernel: the packet is
	// dropped and the lab reads on).
	FromKernelErrors uint64 `json:"from_kernel_errors,omitempty"`
	// Verbs lists the programs using the host's verbs endpoint.
	Verbs []uverbs.ClientStatus `json:"verbs,omitempty"`
	// Kernel is the host kernel's own counters of its mr0 (nil for a lab
	// on test devices). Its tx is towards the lab: TxDropped counts
	// packets the kernel dropped because the lab did not read them fast
	// enough.
	Kernel *hostns.IfCounters `json:"kernel,omitempty"`
}

// Status collects a status report through the loop goroutine.
func (l *Lab) Status(ctx context.Context) (Status, error) {
	s := Status{Lab: l.name, PID: l.state.PID, Metrics: l.state.Metrics, Uptime: time.Since(l.started), Partitions: l.parts}
	err := l.pacer.Do(ctx, func(now sim.Time) {
		s.VirtualTime = time.Duration(now)
		s.Lag = l.pacer.lag // on the loop goroutine: current, not the last published copy
		s.Engine = l.eng.Status(now)
		var vs map[string][]uverbs.ClientStatus
		if l.verbs != nil {
			vs = l.verbs.Status()
		}
		for i, h := range l.hosts {
			sh := l.state.Hosts[i]
			s.Hosts = append(s.Hosts, HostStatus{Name: sh.Name, Addr: sh.Addr, Namespace: sh.Namespace, Iface: sh.Iface,
				FromKernel: h.fromKernel, FromKernelErrors: h.in.readErrs, ToKernel: h.toKernel, ToKernelDrops: h.out.Drops(), Verbs: vs[sh.Name]})
		}
	})
	if err != nil {
		return s, err
	}
	// The kernel's counters come from netlink, off the loop.
	for i, ns := range l.nss {
		if i < len(s.Hosts) {
			if c, err := ns.Counters(ifaceName); err == nil {
				s.Hosts[i].Kernel = &c
			}
		}
	}
	return s, nil
}

// Fault applies a fault through the loop goroutine.
func (l *Lab) Fault(ctx context.Context, f FaultRequest) error {
	var ferr error
	if err := l.pacer.Do(ctx, func(now sim.Time) { ferr = l.eng.Fault(now, f) }); err != nil {
		return err
	}
	return ferr
}

// Perf runs a workload on the lab's NICs and waits for its result, with
// the run's Timing: a run during which the lab fell behind the wall clock
// by more than MaxLagFraction of it gets a Status saying so instead of
// "ok". If ctx ends first (the client went away), the run is cancelled at
// once, so the lab's NICs are free for the next one.
func (l *Lab) Perf(ctx context.Context, req PerfRequest) (PerfResult, error) {
	res := make(chan PerfResult, 1)
	var (
		perr   error
		cancel func(error)
	)
	if err := l.pacer.Do(ctx, func(now sim.Time) {
		w := l.pacer.watch()
		cancel, perr = l.eng.Perf(now, req, func(r PerfResult) {
			r.Timing = w.stop()
			if r.Status == "ok" && r.Timing.Lagging() {
				r.Status = r.Timing.Verdict()
			}
			res <- r
		})
		if perr != nil {
			w.stop()
		}
	}); err != nil {
		return PerfResult{}, err
	}
	if perr != nil {
		return PerfResult{}, perr
	}
	select {
	case r := <-res:
		return r, nil
	case <-l.pacer.Done():
		return PerfResult{}, ErrStopped
	case <-ctx.Done():
		why := context.Cause(ctx)
		// The loop may be busy; do not wait for it.
		go l.pacer.Post(func(sim.Time) { cancel(fmt.Errorf("its client went away: %w", why)) })
		return PerfResult{}, ctx.Err()
	}
}
