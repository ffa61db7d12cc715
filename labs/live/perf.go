package live

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/workload"
)

// errPerfBusy is returned when a perf run is asked for while one runs: the
// workload package listens on every NIC it uses, so runs do not overlap.
var errPerfBusy = errors.New("a perf run is already in progress on this lab")

// perfSlack is how long past its planned duration a live perf run may take
// before it fails (connection set-up, retransmissions after faults).
const perfSlack = 30 * time.Second

// Perf starts write_bw, send_bw or read_bw between two hosts' NICs: the
// softnic issue's workloads, run on the live loop. The data check always
// runs; Verify only makes a failed check fail the run.
func (e *labEngine) Perf(now sim.Time, req PerfRequest, done func(PerfResult)) (func(error), error) {
	if e.perfOn {
		return nil, errPerfBusy
	}
	spec, err := e.perfSpec(req)
	if err != nil {
		return nil, err
	}
	run, err := workload.Launch(e.cl, spec, func(r *workload.Result, err error) {
		e.perfOn = false
		e.oracle.record(checkHost(req), r)
		done(perfResult(req, r, err))
	})
	if err != nil {
		return nil, fmt.Errorf("perf %s %s -> %s: %w", req.Op, req.From, req.To, err)
	}
	e.perfOn = true
	return run.Cancel, nil
}

// perfSpec turns a request into a workload spec, checking it first so a
// bad request is a clear error.
func (e *labEngine) perfSpec(req PerfRequest) (workload.Spec, error) {
	var spec workload.Spec
	switch req.Op {
	case "write", "":
		spec.Name = workload.WriteBW
	case "send":
		spec.Name = workload.SendBW
	case "read":
		spec.Name = workload.ReadBW
	default:
		return spec, fmt.Errorf("perf: op %q: want write, send or read", req.Op)
	}
	for _, h := range []string{req.From, req.To} {
		if !e.hasHost(h) {
			return spec, fmt.Errorf("perf: lab %s has no host %q (hosts: %s)", e.lab.Name, h, strings.Join(e.hostNames(), ", "))
		}
	}
	if req.From == req.To {
		return spec, fmt.Errorf("perf: --from and --to are both %s", req.From)
	}
	spec.Transport = e.lab.Transport
	if req.Transport != "" {
		k, err := transport.ParseKind(req.Transport)
		if err != nil {
			return spec, fmt.Errorf("perf: %w", err)
		}
		spec.Transport = k
	}
	if req.Size < 0 || req.Count < 0 || req.Depth < 0 || req.Duration < 0 {
		return spec, fmt.Errorf("perf: negative size, count, depth or duration")
	}
	spec.Size, spec.Iterations, spec.QueueDepth = req.Size, req.Count, req.Depth
	planned := 10 * time.Second
	if req.Count == 0 {
		if req.Duration == 0 {
			req.Duration = 2 * time.Second
		}
		spec.Duration = sim.Time(req.Duration)
		planned = req.Duration
	}
	spec.From, spec.To = []string{req.From}, []string{req.To}
	spec.Timeout = sim.Time(planned + perfSlack)
	return spec, nil
}

func (e *labEngine) hasHost(name string) bool {
	for _, h := range e.hosts {
		if h.Name == name {
			return true
		}
	}
	return false
}

func (e *labEngine) hostNames() []string {
	var s []string
	for _, h := range e.hosts {
		s = append(s, h.Name)
	}
	return s
}

// perfResult converts a workload result.
func perfResult(req PerfRequest, r *workload.Result, err error) PerfResult {
	res := PerfResult{Request: req, Status: "ok"}
	if r != nil {
		res.Messages = int(r.Messages)
		res.Bytes = r.Bytes
		res.Elapsed = time.Duration(r.Elapsed)
		res.Goodput = r.GoodputGbps * 1e9
		res.Verified = r.Check.OK
		res.Errors = r.Errors
		if r.FirstError != "" {
			res.Status = r.FirstError
		}
		res.Counters = map[string]uint64{
			"retransmits": r.Retransmits, "timeouts": r.Timeouts, "ecn_marks": r.ECNMarks,
			"ce_received": r.CEReceived, "packets_sent": r.PacketsSent, "refused_connections": uint64(r.Refused),
			// The data oracle: messages checked whole as each completed, and
			// those that failed then; corrupt and duplicate packets.
			"messages_checked": uint64(r.Check.Messages), "check_failures": uint64(r.Check.Failures),
			"corrupted": r.Corrupted, "corrupt_dropped": r.CorruptDropped,
			"duplicated": r.Duplicated, "dup_received": r.DupReceived,
		}
		for k, v := range r.Drops {
			res.Counters["drops_"+k] = v
		}
	}
	if err != nil {
		res.Status = err.Error()
		if res.Errors == 0 {
			res.Errors = 1
		}
	}
	return res
}

// oracleTally counts, per host, the messages the data oracle checked at
// their completion in the lab's perf runs and those that failed, for
// status and metrics (oracle_messages_checked, oracle_failures). Loop
// goroutine only.
type oracleTally struct {
	by map[string]*[2]uint64
}

// checkHost is the host whose memory a perf run's oracle checks: the
// receiver of a WRITE's or SEND's data, the requester of a READ.
func checkHost(req PerfRequest) string {
	if req.Op == "read" {
		return req.From
	}
	return req.To
}

// record adds a finished run's checks to host's tally (r may be nil: a
// run that never started checked nothing).
func (o *oracleTally) record(host string, r *workload.Result) {
	if r == nil {
		return
	}
	if o.by == nil {
		o.by = map[string]*[2]uint64{}
	}
	t := o.by[host]
	if t == nil {
		t = new([2]uint64)
		o.by[host] = t
	}
	t[0] += uint64(r.Check.Messages)
	t[1] += uint64(r.Check.Failures)
}

// add puts host's tally into its NIC's status counters, zero or not.
func (o *oracleTally) add(m NICStat, host string) {
	var t [2]uint64
	if p := o.by[host]; p != nil {
		t = *p
	}
	m["oracle_messages_checked"], m["oracle_failures"] = t[0], t[1]
}
