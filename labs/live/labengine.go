package live

import (
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/labs"
	"github.com/mrlab/mrlab/observe/capture"
	"github.com/mrlab/mrlab/observe/prototrace"
	"github.com/mrlab/mrlab/observe/telemetry"
	"github.com/mrlab/mrlab/observe/telemetry/prom"
	"github.com/mrlab/mrlab/softnic"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/workload"
)

// DefaultMaxRate caps link rates in live labs: 1 Gbit/s. One Go process
// paces every link, switch and NIC of the lab on one goroutine; at the
// lab files' 100 Gbit/s it would fall behind the wall clock at once (and
// say so), distorting every delay. At 1 Gbit/s the default lab keeps real
// time on a 2-core machine with kernel TCP and a MetaRoCE run crossing it
// (labs/live/README.md has the measurements). Raise it with
// `mrlab up --max-rate` and watch `mrlab status` for late events.
const DefaultMaxRate = 1e9

// DefaultTelemetryInterval is how often a live lab samples its
// connections, paths and links for Prometheus and `mrlab top`. The sim
// default (10us of lab time) would be thousands of samplings per wall
// second here, all on the one loop goroutine; a scrape or a top refresh
// wants one sample per few hundred milliseconds at most.
const DefaultTelemetryInterval = 100 * time.Millisecond

// MinTelemetryInterval is the shortest sampling period a live lab
// accepts: below it sampling competes with the packets for the loop.
const MinTelemetryInterval = 10 * time.Millisecond

// EngineConfig configures NewLabEngine.
type EngineConfig struct {
	// Name is the name the lab runs under (Up's name), which its
	// Prometheus series carry as their lab label; empty means the lab
	// file's name.
	Name string
	// MaxRate caps every link's rate (and a rate impairment) in bits per
	// second; 0 keeps the lab's rates.
	MaxRate float64
	// TelemetryInterval is the telemetry sampling period (0 means
	// DefaultTelemetryInterval; at least MinTelemetryInterval).
	TelemetryInterval time.Duration
	// Logf hears of the lab file's fault timeline as it fires; nil
	// discards.
	Logf func(format string, args ...any)
}

// capRates lowers every link rate in topo above max to max. It returns how
// many links it changed.
func capRates(topo *fabric.Topology, max float64) int {
	if max <= 0 {
		return 0
	}
	n := 0
	for i := range topo.Links {
		p := &topo.Links[i].Params
		changed := false
		if p.Rate > max {
			p.Rate, changed = max, true
		}
		if p.Impair.Rate > max {
			p.Impair.Rate, changed = max, true
		}
		if changed {
			n++
		}
	}
	return n
}

// labEngine runs a lab's fabric and one softnic NIC per host: the live
// Engine for real labs. The NICs' host ports lead to the hosts' TUNs.
type labEngine struct {
	lab   *labs.Lab
	topo  *fabric.Topology
	cfg   EngineConfig
	hosts []HostSpec

	loop    *sim.Loop
	pool    *packet.Pool
	net     *fabric.Network
	nics    []*softnic.NIC
	deliver func(int, sim.Time, []byte)
	cl      *workload.Cluster
	perfOn  bool // a perf run is in progress
	oracle  oracleTally

	// Observability: the protocol trace hub (GET /trace), the telemetry
	// sampler and the exporter it feeds (GET /telemetry, /metrics).
	hub     *prototrace.Hub
	sampler *telemetry.Sampler
	exp     *prom.Exporter
	names   map[netip.Addr]string // host address -> host name
	index   map[string]int        // host name -> index in hosts and nics

	// What faults set, for status: the fabric does not report it back.
	impair    map[string]*[2]fabric.Impairment // by link: AtoB, BtoA
	swDown    map[string]bool
	planeDown map[int]bool
}

// NewLabEngine prepares the Engine for a lab: its topology with link rates
// capped for real time. The fabric and NICs are built on the loop at Start.
func NewLabEngine(lab *labs.Lab, cfg EngineConfig) (Engine, error) {
	topo := lab.Topology()
	capRates(topo, cfg.MaxRate)
	if cfg.TelemetryInterval == 0 {
		cfg.TelemetryInterval = DefaultTelemetryInterval
	}
	if cfg.TelemetryInterval < MinTelemetryInterval {
		return nil, fmt.Errorf("lab %s: telemetry interval %v: want at least %v", lab.Name, cfg.TelemetryInterval, MinTelemetryInterval)
	}
	e := &labEngine{lab: lab, topo: topo, cfg: cfg, impair: map[string]*[2]fabric.Impairment{}, swDown: map[string]bool{}, planeDown: map[int]bool{},
		names: map[netip.Addr]string{}, index: map[string]int{}}
	for _, k := range topo.Links {
		if !k.Params.Impair.IsZero() {
			e.impair[k.Name] = &[2]fabric.Impairment{k.Params.Impair, k.Params.Impair}
		}
	}
	for _, h := range topo.Hosts {
		if !h.Addr.Is4() {
			return nil, fmt.Errorf("lab %s: host %s address %v is not IPv4", lab.Name, h.Name, h.Addr)
		}
		e.names[h.Addr] = h.Name
		e.index[h.Name] = len(e.hosts)
		var rate float64
		for _, k := range topo.Links {
			if k.A.Node == h.Name || k.B.Node == h.Name {
				rate += k.Params.Rate
			}
		}
		e.hosts = append(e.hosts, HostSpec{Name: h.Name, Addr: h.Addr, Rate: rate})
	}
	return e, nil
}

// hostQueueSpan is how long at its NIC's rate (the sum of its ports') a
// live NIC's buffer of host packets holds: it stands for a host's qdisc and
// NIC ring together (Linux's default qdisc holds 1000 packets, 12 ms at 1
// Gbit/s), and the kernel cannot be made to wait for it (a TUN takes
// whatever TCP sends), so it must absorb a TCP window's bursts without the
// losses no real host has at its own NIC. The buffer is shared by the NIC's
// ports (softnic.Config.SharedHostQueue): mr0 is paced at the NIC's rate
// (kernelShape) and one flow hashes to one port, so one port must hold
// what arrives at the NIC's rate for this span, as mr0's ring does
// (kernelQueueSpan); a per-port queue of the port's rate held half of it on
// a 2-plane NIC (TestHostQueueHoldsKernelBurst).
const hostQueueSpan = 20 * time.Millisecond

// hostQueueLen is a live NIC's buffer of host packets, shared by its ports,
// for a NIC of rate bits/s (the sum of its ports'), in Ethernet-MTU
// packets, at least softnic's default of 256.
func hostQueueLen(rate float64) int {
	return max(256, int(rate*hostQueueSpan.Seconds()/(8*DefaultMTU)))
}

// hostName names the host at a lab address ("" if none).
func (e *labEngine) hostName(a netip.Addr) string { return e.names[a] }

// peerOf names the far end of host's connections in trace lines. It runs
// only while a trace reader is subscribed (the hub formats nothing
// otherwise), so the slice Conns builds is no per-packet cost.
func (e *labEngine) peerOf(host string) prototrace.PeerFunc {
	return func(id uint32) string {
		i, ok := e.index[host]
		if !ok || i >= len(e.nics) {
			return ""
		}
		for _, c := range e.nics[i].Conns() {
			if c.ID() == id {
				return e.names[c.Peer()]
			}
		}
		return ""
	}
}

func (e *labEngine) Hosts() []HostSpec { return e.hosts }

// tracer is host's view of the protocol trace hub.
func (e *labEngine) tracer(host string) transport.Tracer { return e.hub.Host(host, e.peerOf(host)) }

// NIC returns host i's NIC (VerbsHost).
func (e *labEngine) NIC(i int) *softnic.NIC { return e.nics[i] }

// Tracer returns host i's trace (VerbsHost).
func (e *labEngine) Tracer(i int) transport.Tracer { return e.tracer(e.hosts[i].Name) }

// hostPort delivers a NIC's non-transport packets to its host's kernel.
type hostPort struct {
	e    *labEngine
	host int
}

func (h hostPort) Deliver(now sim.Time, ip []byte) { h.e.deliver(h.host, now, ip) }

func (e *labEngine) Start(loop *sim.Loop, pool *packet.Pool, deliver func(int, sim.Time, []byte)) error {
	e.loop, e.pool, e.deliver = loop, pool, deliver
	net, err := fabric.Build(loop, pool, e.topo, fabric.BuildOptions{Seed: e.lab.Seed, DetectionDelay: e.lab.DetectionDelay})
	if err != nil {
		return fmt.Errorf("building lab %s: %w", e.lab.Name, err)
	}
	e.net = net
	e.hub = prototrace.NewHub(net, e.hostName)
	// The workload package builds the NICs (every transport, with the
	// lab's transports section) exactly as sim runs do, so a live perf
	// run is the sim workload on a paced loop. Every NIC traces into the
	// hub, which costs one atomic load per decision while nobody reads
	// /trace.
	opts := e.lab.NICOptions()
	opts.TraceFor = e.tracer
	opts.SecureKeys = true
	opts.HostQueue = hostQueueLen
	cl, err := workload.NewCluster(e.lab.Name, loop, pool, net, e.lab.Seed, opts)
	if err != nil {
		return err
	}
	e.cl, e.nics = cl, cl.NICs
	for i, nic := range e.nics {
		if nic.Name() != e.hosts[i].Name {
			return fmt.Errorf("lab %s: NIC %d is %s, want host %s", e.lab.Name, i, nic.Name(), e.hosts[i].Name)
		}
		nic.SetHostPort(hostPort{e, i})
	}
	// Telemetry: every link direction, idle or not, so Prometheus series
	// do not come and go, and every connection of every NIC as it opens.
	name := e.cfg.Name
	if name == "" {
		name = e.lab.Name
	}
	e.exp = prom.New(name)
	e.sampler = telemetry.NewSampler(loop, sim.Time(e.cfg.TelemetryInterval), e.exp)
	e.sampler.AddNetwork(net, true)
	for i, nic := range e.nics {
		e.sampler.AddNIC(e.hosts[i].Name, nic, e.hostName)
	}
	e.sampler.Start(loop.Now())
	// The lab file's fault timeline runs in real time from now.
	return e.lab.ScheduleFaults(loop, recorder{e}, func(now sim.Time, f *labs.Fault, err error) {
		if e.cfg.Logf == nil {
			return
		}
		if err != nil {
			e.cfg.Logf("fault timeline at %v: %s: %v", now, f, err)
			return
		}
		e.cfg.Logf("fault timeline at %v: %s", now, f)
	})
}

func (e *labEngine) FromKernel(host int, now sim.Time, p *packet.Buffer) {
	e.nics[host].SendIP(now, p)
}

// Fault applies a fault request: link/switch/plane down or up, or a link
// impairment in netem spelling ("none" clears it), in both directions or,
// with Dir, one (as tc qdisc on one end's interface).
func (e *labEngine) Fault(now sim.Time, f FaultRequest) error {
	var up bool
	switch f.Action {
	case "down":
	case "up":
		up = true
	case "impair":
		if f.Target != "link" {
			return fmt.Errorf("fault %s %s: only links can be impaired", f.Target, f.Name)
		}
	default:
		return fmt.Errorf("fault %s %s: unknown action %q (want down, up or impair)", f.Target, f.Name, f.Action)
	}
	dir := fabric.Both
	if f.Dir != "" {
		d, err := labs.ParseDir(f.Dir)
		if err != nil {
			return fmt.Errorf("fault %s %s: %w", f.Target, f.Name, err)
		}
		if f.Action != "impair" && d != labs.DirBoth {
			// A link's state is one for both directions: routing sees
			// a link, not a direction, as tc's down acts on an interface.
			return fmt.Errorf("fault %s %s:%s %s: a link goes %s in both directions (for one direction's black hole: impair loss 100%% dir %s)", f.Target, f.Name, f.Dir, f.Action, f.Action, f.Dir)
		}
		dir = d.Direction()
	}
	r := recorder{e}
	switch f.Target {
	case "link":
		if f.Action == "impair" {
			spec := strings.TrimSpace(strings.Join(f.Impair, " "))
			if spec == "" {
				return fmt.Errorf("fault link %s impair: no netem parameters (e.g. loss 1%% delay 100us; \"none\" clears the link's impairment)", f.Name)
			}
			var imp fabric.Impairment
			if spec != "none" {
				var err error
				if imp, err = fabric.ParseImpairment(spec); err != nil {
					return fmt.Errorf("fault link %s impair: %w", f.Name, err)
				}
			}
			return r.SetImpairment(f.Name, dir, imp)
		}
		return r.SetLinkUp(now, f.Name, up)
	case "switch":
		return r.SetSwitchUp(now, f.Name, up)
	case "plane":
		n, err := strconv.Atoi(f.Name)
		if err != nil || n < 0 || n >= max(e.topo.Planes, 1) {
			return fmt.Errorf("fault plane %q: want a plane number 0..%d", f.Name, max(e.topo.Planes, 1)-1)
		}
		return r.SetPlaneUp(now, n, up)
	}
	return fmt.Errorf("fault: unknown target %q (want link, switch or plane)", f.Target)
}

// recorder applies faults to the fabric and records what they set, for
// status (the fabric does not report impairments or admin states back).
// Faults typed at the lab and the lab file's timeline (up --fault,
// --impair LINK:ab) both go through it.
type recorder struct{ e *labEngine }

var _ labs.Faulter = recorder{}

func (r recorder) SetLinkUp(now sim.Time, link string, up bool) error {
	return r.e.net.SetLinkUp(now, link, up)
}

func (r recorder) SetSwitchUp(now sim.Time, sw string, up bool) error {
	if err := r.e.net.SetSwitchUp(now, sw, up); err != nil {
		return err
	}
	r.e.swDown[sw] = !up
	return nil
}

func (r recorder) SetPlaneUp(now sim.Time, plane int, up bool) error {
	if err := r.e.net.SetPlaneUp(now, plane, up); err != nil {
		return err
	}
	r.e.planeDown[plane] = !up
	for _, sw := range r.e.topo.Switches {
		if sw.Plane == plane {
			r.e.swDown[sw.Name] = !up
		}
	}
	return nil
}

// SetImpairment caps an impairment's rate at the lab's maximum (a live
// lab cannot serialize faster) and records it per direction.
func (r recorder) SetImpairment(link string, dir fabric.Direction, imp fabric.Impairment) error {
	if r.e.cfg.MaxRate > 0 && imp.Rate > r.e.cfg.MaxRate {
		imp.Rate = r.e.cfg.MaxRate
	}
	if err := r.e.net.SetImpairment(link, dir, imp); err != nil {
		return err
	}
	cur := r.e.impair[link]
	if cur == nil {
		cur = &[2]fabric.Impairment{}
	}
	for d := fabric.AtoB; d <= fabric.BtoA; d++ {
		if dir == fabric.Both || dir == d {
			cur[d] = imp
		}
	}
	if cur[0].IsZero() && cur[1].IsZero() {
		delete(r.e.impair, link)
	} else {
		r.e.impair[link] = cur
	}
	return nil
}

// impairText is a link's impairment as status shows it: netem's words
// when both directions have the same, else each direction's with its
// name ("ab: delay 10ms 2ms 25%").
func impairText(d *[2]fabric.Impairment) string {
	if d == nil {
		return ""
	}
	ab, ba := d[fabric.AtoB].String(), d[fabric.BtoA].String()
	if ab == ba {
		return ab
	}
	var parts []string
	if !d[fabric.AtoB].IsZero() {
		parts = append(parts, "ab: "+ab)
	}
	if !d[fabric.BtoA].IsZero() {
		parts = append(parts, "ba: "+ba)
	}
	return strings.Join(parts, "; ")
}

// Status reports every link's state and counters (both directions
// summed), the switches and the NICs' counters.
func (e *labEngine) Status(now sim.Time) EngineStatus {
	s := EngineStatus{Planes: max(e.topo.Planes, 1), NICs: map[string]NICStat{}, Counters: map[string]uint64{}}
	snap := e.net.Counters()
	byName := map[string]int{}
	for _, k := range e.topo.Links {
		byName[k.Name] = len(s.Links)
		ls := LinkStatus{Name: k.Name, Up: true}
		ls.Impair = impairText(e.impair[k.Name])
		s.Links = append(s.Links, ls)
	}
	for _, c := range snap.Links {
		i, ok := byName[c.Link]
		if !ok {
			continue
		}
		ls := &s.Links[i]
		ls.Up = ls.Up && c.Up
		ls.Rate = max(ls.Rate, c.Rate)
		ls.Packets += c.TxPackets
		ls.Bytes += c.TxBytes
		ls.Drops += c.Drops.Total()
		ls.Marks += c.ECNMarks
		ls.Corrupted += c.Corrupted
		ls.Duplicated += c.Duplicated
		for r, n := range c.Drops {
			if n > 0 {
				s.Counters["drops_"+fabric.DropReason(r).String()] += n
			}
		}
		s.Counters["ecn_marks"] += c.ECNMarks
		s.Counters["corrupted"] += c.Corrupted
		s.Counters["duplicated"] += c.Duplicated
	}
	for _, sw := range e.topo.Switches {
		s.Switches = append(s.Switches, SwitchStatus{Name: sw.Name, Plane: sw.Plane, Role: sw.Role, Up: !e.swDown[sw.Name]})
	}
	for i, nic := range e.nics {
		m := nicStat(nic.Stats(), nic.TransportTotals())
		e.oracle.add(m, e.hosts[i].Name)
		sourceStats(m, nic.Sources())
		s.NICs[e.hosts[i].Name] = m
	}
	return s
}

// nicStat is a NIC's counters as status shows them: traffic, every drop
// reason (drops_<reason>, zero or not, so JSON and Prometheus readers see
// a stable set), refused connections, peers' and local requests refused
// by the region table, and its connections' integrity counters as sim's
// summary has them: checksum_drops (packets a transport dropped for a bad
// checksum of its own, MetaRoCE's CRC32C), corrupt_dropped (those plus the
// NIC's ICRC drops: every corrupted packet this NIC refused to place) and
// dup_received (data packets received again).
func nicStat(st softnic.Stats, tt softnic.TransportTotals) NICStat {
	m := NICStat{
		"tx_packets": st.TxPackets, "tx_bytes": st.TxBytes, "rx_packets": st.RxPackets, "rx_bytes": st.RxBytes,
		"host_tx_packets": st.HostTxPackets, "host_rx_packets": st.HostRxPackets,
		"ce_received": st.CEReceived, "drops": st.Dropped(), "accepted": st.Accepted, "refused": st.Refused,
		"access_errors": st.AccessErrors, "protection_errors": st.ProtectionErrors,
		"half_open_opened": st.HalfOpenOpened, "half_open_evicted": st.HalfOpenEvicted,
		"checksum_drops": tt.ChecksumDrops, "corrupt_dropped": st.Drops[softnic.DropICRC] + tt.ChecksumDrops,
		"dup_received": tt.Duplicates,
	}
	for _, r := range softnic.DropReasons() {
		m[nicDropPrefix+r.String()] = st.Drops[r]
	}
	return m
}

// sourceStats adds a NIC's per-source counters (softnic.SourceStats: the
// setup requests of each source address, their fate, the access errors
// its connections caused and whether it is rate-limited now) to m as
// "src:ADDR:counter", zero or not once the source is known.
func sourceStats(m NICStat, srcs []softnic.SourceStats) {
	for _, s := range srcs {
		p := nicSourcePrefix + s.Addr.String() + ":"
		limited := uint64(0)
		if s.Limited {
			limited = 1
		}
		for k, v := range map[string]uint64{
			"requests": s.Requests, "established": s.Established, "half_open": uint64(s.HalfOpen),
			"refused_half_open": s.RefusedHalfOpen, "refused_limited": s.RefusedLimited, "evicted": s.Evicted,
			"access_errors": s.AccessErrors, "poisoned_conns": s.PoisonedConns, "limited": limited,
		} {
			m[p+k] = v
		}
	}
}

// nicSourcePrefix starts the name of a per-source counter in NICStat
// ("src:198.18.0.1:access_errors").
const nicSourcePrefix = "src:"

// nicDropPrefix starts the name of a NIC's per-reason drop counter in
// NICStat ("drops_spoofed", "drops_host-queue-full", ...).
const nicDropPrefix = "drops_"

// Routes mounts the engine's own endpoints on the control server, before
// the loop starts:
//
//	GET /capture?point=P[&filter=F][&count=N]  pcapng stream of a NIC port, link or switch (package capture)
//	GET /trace[?filter=F][&fabric=drops,marks]  the protocol trace, streamed (package prototrace)
//	GET /telemetry                              the latest telemetry sample as JSON (`mrlab top`)
//
// The capture and trace observers cost a length check and an atomic load
// per packet while nobody reads.
func (e *labEngine) Routes(p *Pacer, mux *http.ServeMux) (closer func()) { return e.routes(p, mux) }

// routes is Routes for any capture runner (tests run the engine's loop
// themselves, with no pacer).
func (e *labEngine) routes(run capture.Runner, mux *http.ServeMux) (closer func()) {
	addr := map[string]netip.Addr{}
	for _, h := range e.hosts {
		addr[h.Name] = h.Addr
	}
	lv := capture.NewLive(capture.LayoutOf(e.topo), e.loop, run, func(name string) (netip.Addr, bool) {
		a, ok := addr[name]
		return a, ok
	})
	e.net.SetObserver(capture.Tee(lv.Observer(), e.hub.Fabric()))
	mux.Handle("GET /capture", lv)
	mux.Handle("GET /trace", e.hub)
	mux.HandleFunc("GET /telemetry", e.exp.ServeSnapshot)
	e.webRoutes(run, mux)
	return func() {
		lv.Close()
		e.hub.Close()
	}
}

// MetricsHandler serves the telemetry exporter: GET /metrics (Prometheus
// text format) and GET /telemetry. Up serves it on the lab's loopback
// metrics address. Call it after Start.
func (e *labEngine) MetricsHandler() http.Handler { return e.exp.Handler() }

// RegisterCollector adds the runtime's own series to the exporter.
func (e *labEngine) RegisterCollector(c prometheus.Collector) error { return e.exp.Register(c) }
