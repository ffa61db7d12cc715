package live

import (
	"net/http"
	"net/netip"
	"time"

	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/softnic"
	"github.com/mrlab/mrlab/transport"
)

// HostSpec is one lab host as the live runtime sees it.
type HostSpec struct {
	Name string
	Addr netip.Addr
	// Rate is the host's NIC rate in bits per second, all ports together
	// (0: unknown); the runtime sizes the host's kernel queue by it.
	Rate float64
}

// Engine is a lab's fabric and NICs as the live runtime drives them. Every
// method runs on the loop goroutine, so an Engine needs no locks; it is the
// same code sim mode runs, with a different clock outside.
type Engine interface {
	// Hosts lists the lab's hosts; the runtime names them by index.
	Hosts() []HostSpec
	// Start builds the fabric and NICs on loop. deliver hands an IPv4
	// packet to host i's kernel (through its TUN); it copies ip, so the
	// caller keeps it (the contract of softnic.HostPort).
	Start(loop *sim.Loop, pool *packet.Pool, deliver func(host int, now sim.Time, ip []byte)) error
	// FromKernel takes a packet host i's kernel sent (an IPv4 packet read
	// from its TUN) and owns it from then on.
	FromKernel(host int, now sim.Time, p *packet.Buffer)
	// Fault applies a fault (link/switch/plane down or up, link impairment).
	Fault(now sim.Time, f FaultRequest) error
	// Perf starts a transport workload between two hosts' NICs; done runs
	// on the loop goroutine when it finishes. cancel ends it early (its
	// client went away): done then runs with the reason in Status, and the
	// NICs are free for the next run at once.
	Perf(now sim.Time, req PerfRequest, done func(PerfResult)) (cancel func(why error), err error)
	// Status reports links, switches and counters.
	Status(now sim.Time) EngineStatus
}

// router is an Engine with control endpoints of its own (packet capture).
// Routes runs once, before the loop starts; the returned function runs
// when the lab stops, before the control server shuts down (it ends
// streaming responses).
type router interface {
	Routes(p *Pacer, mux *http.ServeMux) (closer func())
}

// VerbsHost is an Engine whose hosts' NICs programs running in the hosts
// drive through the verbs endpoint (package uverbs). Up serves one
// endpoint in each host's namespace. Both methods run before the loop
// starts; the NIC is then touched only on the loop.
type VerbsHost interface {
	NIC(host int) *softnic.NIC
	// Tracer receives host's endpoint events for the protocol trace.
	Tracer(host int) transport.Tracer
}

// metricsExporter is an Engine that exports telemetry over HTTP. Up serves
// MetricsHandler (GET /metrics in Prometheus text format, GET /telemetry)
// on the lab's loopback metrics address (Options.Metrics), after Start.
// The handler runs on HTTP goroutines: it reads a snapshot the loop
// publishes, never the engine itself.
type metricsExporter interface {
	MetricsHandler() http.Handler
}

// FaultRequest is a fault to apply to a running lab. Target is "link",
// "switch" or "plane"; Name is the link or switch name or the plane number;
// Action is "down", "up" or (links only) "impair" with netem's spelling in
// Impair (e.g. ["loss", "1%", "delay", "1ms"]).
type FaultRequest struct {
	Target string   `json:"target"`
	Name   string   `json:"name"`
	Action string   `json:"action"`
	Impair []string `json:"impair,omitempty"`
	// Dir limits a link's impairment to one direction, as tc does on one
	// interface: "ab" (from the link's a end to b) or "ba"; empty: both.
	Dir string `json:"dir,omitempty"`
}

// PerfRequest is a transport workload between two hosts' NICs: the
// softnic issue's write_bw/send_bw/read_bw.
type PerfRequest struct {
	From      string        `json:"from"`
	To        string        `json:"to"`
	Op        string        `json:"op"`        // write, send or read
	Transport string        `json:"transport"` // metaroce (default) or rocev2
	Size      int           `json:"size"`      // message size in bytes
	Count     int           `json:"count"`     // messages (0: use Duration)
	Duration  time.Duration `json:"duration_ns"`
	Depth     int           `json:"depth"` // messages in flight
	Verify    bool          `json:"verify"`
}

// PerfResult is a finished workload.
type PerfResult struct {
	Request  PerfRequest   `json:"request"`
	Messages int           `json:"messages"`
	Bytes    int64         `json:"bytes"`
	Elapsed  time.Duration `json:"elapsed_ns"`
	// Goodput is application bytes per second.
	Goodput float64 `json:"goodput_bps"`
	// Verified is true when Verify was asked and every byte matched.
	Verified bool `json:"verified"`
	Errors   int  `json:"errors"`
	// Status is "ok" only when the run completed without error and its
	// figures hold in wall time; otherwise the first error, or why the
	// timing does not hold (Timing.Verdict).
	Status string `json:"status"`
	// Timing relates the run's lab time to the wall clock.
	Timing Timing `json:"timing"`
	// Retransmits and other transport counters, by name.
	Counters map[string]uint64 `json:"counters,omitempty"`
}

// EngineStatus is the fabric and NIC side of a status report.
type EngineStatus struct {
	Planes   int                `json:"planes"`
	Links    []LinkStatus       `json:"links"`
	Switches []SwitchStatus     `json:"switches"`
	Counters map[string]uint64  `json:"counters,omitempty"`
	NICs     map[string]NICStat `json:"nics,omitempty"`
}

// LinkStatus is one link's state and counters (both directions summed).
type LinkStatus struct {
	Name    string  `json:"name"`
	Up      bool    `json:"up"`
	Rate    float64 `json:"rate_bps"`
	Impair  string  `json:"impair,omitempty"`
	Packets uint64  `json:"packets"`
	Bytes   uint64  `json:"bytes"`
	Drops   uint64  `json:"drops"`
	Marks   uint64  `json:"marks"`
	// Corrupted and Duplicated count packets the link's impairment
	// flipped a bit of or sent twice.
	Corrupted  uint64 `json:"corrupted"`
	Duplicated uint64 `json:"duplicated"`
}

// SwitchStatus is one switch's state.
type SwitchStatus struct {
	Name  string `json:"name"`
	Plane int    `json:"plane"`
	Role  string `json:"role"`
	Up    bool   `json:"up"`
}

// NICStat is a host NIC's counters, by name.
type NICStat map[string]uint64
