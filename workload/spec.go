// Package workload runs perftest-style and collective RDMA workloads on a
// lab's software NICs in virtual time: write_bw, send_bw, read_bw,
// write_lat, send_lat, read_lat (perftest's tests, with its defaults and
// its way of computing BW peak and latency percentiles), permutation,
// N-to-1 incast, all-to-all and ring all-reduce.
// Every workload checks at the end that the destination memory holds
// exactly the bytes that were sent, and reports goodput, message and flow
// completion times, retransmissions, ECN marks, drops by cause and
// per-plane utilisation, as a perftest-style table or JSON.
//
// A workload is event-driven: Start sets it up on a Cluster's event loop
// and calls back when it is done (the live runtime uses this, pacing the
// loop to the wall clock); Run drives a sim loop until then.
package workload

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/softnic"
	"github.com/mrlab/mrlab/transport"
)

// Name is a workload's name.
type Name string

// Workloads.
const (
	WriteBW     Name = "write_bw"
	SendBW      Name = "send_bw"
	ReadBW      Name = "read_bw"
	WriteLat    Name = "write_lat"
	SendLat     Name = "send_lat"
	ReadLat     Name = "read_lat"
	Permutation Name = "permutation"
	Incast      Name = "incast"
	AllToAll    Name = "alltoall"
	AllReduce   Name = "allreduce"
)

var names = []Name{WriteBW, SendBW, ReadBW, WriteLat, SendLat, ReadLat, Permutation, Incast, AllToAll, AllReduce}

// IsLatency reports whether n is one of perftest's latency tests
// (ping-pong, one message in flight).
func (n Name) IsLatency() bool { return n == WriteLat || n == SendLat || n == ReadLat }

// IsPerftest reports whether n is one of perftest's six tests, which take
// perftest's defaults and print perftest's report.
func (n Name) IsPerftest() bool {
	return n == WriteBW || n == SendBW || n == ReadBW || n.IsLatency()
}

// Perftest's defaults (perftest_parameters.h), which the six perftest
// tests take so that a number read off mrlab compares with one read off
// ib_write_bw run the same way.
const (
	// PerftestBWSize and PerftestLatSize are the default message sizes.
	PerftestBWSize  = 65536
	PerftestLatSize = 2
	// PerftestWriteBWIters is ib_write_bw's default iteration count;
	// PerftestIters every other test's.
	PerftestWriteBWIters = 5000
	PerftestIters        = 1000
	// PerftestTxDepth is the bandwidth tests' send queue depth.
	PerftestTxDepth = 128
	// PerftestMinIters is the fewest iterations perftest accepts (its
	// command line's rule, which mrlab's command line keeps).
	PerftestMinIters = 5
	// PerftestMaxSize is the largest message -a sweeps to (8 MiB).
	PerftestMaxSize = 8 << 20
	// perftestCQModLimit: above this message size perftest signals every
	// completion; at or below it, one in perftestCQMod.
	perftestCQModLimit = 8192
	perftestCQMod      = 100
)

// SweepSizes returns the message sizes perftest's -a runs: 2 B to 8 MiB,
// doubling.
func SweepSizes() []int {
	var s []int
	for n := 2; n <= PerftestMaxSize; n *= 2 {
		s = append(s, n)
	}
	return s
}

// Names lists the workloads.
func Names() []Name { return append([]Name(nil), names...) }

// ParseName checks a workload name.
func ParseName(s string) (Name, error) {
	for _, n := range names {
		if string(n) == s {
			return n, nil
		}
	}
	all := make([]string, len(names))
	for i, n := range names {
		all[i] = string(n)
	}
	return "", fmt.Errorf("unknown workload %q (want one of %s)", s, strings.Join(all, ", "))
}

// Spec says what to run. Zero fields take the defaults listed.
type Spec struct {
	Name Name
	// Transport is metaroce or rocev2; 0 means MetaRoCE.
	Transport transport.Kind
	// Size is the message size in bytes (default 65536; 2 for the
	// latency tests, as in perftest). For alltoall it is
	// what each host sends in one exchange, split evenly over the others
	// (perftest's and NCCL's convention: size/N to every peer); for
	// allreduce it is the vector being reduced.
	Size int
	// Iterations is the number of messages per flow, or of collective
	// operations (perftest's defaults: 5000 for write_bw, 1000 for the
	// other perftest tests; 1000 for permutation and incast, 20 for
	// collectives).
	Iterations int
	// Duration, if set, runs the test for this long (virtual time)
	// instead of a fixed number of iterations. Bandwidth tests then report
	// no BW peak (perftest's rule) and their BW average over the window
	// Margin after the start to Margin before the end; latency tests
	// report perftest's duration line (average latency, transactions per
	// second).
	Duration sim.Time
	// Margin is the warm-up and cool-down excluded from a duration run's
	// figures (perftest's -f; its default is a quarter of the duration,
	// which callers choose; 0 here means none).
	Margin sim.Time
	// Interval, if set with Duration, calls OnInterval every Interval
	// with what completed in it (perftest's --run_infinitely reports).
	Interval   sim.Time
	OnInterval func(Interval)
	// OnBegin, if set, is called once every connection is up and the
	// first messages are posted, with the result as far as it is known
	// (the test's settings and its connections), so a caller can print a
	// header before the figures.
	OnBegin func(*Result)
	// QueueDepth is the messages in flight per connection (perftest's tx
	// depth: 128 for its bandwidth tests, capped at Iterations as perftest
	// does; 1 for the latency tests; 16 for permutation and incast).
	QueueDepth int
	// CQMod is perftest's CQ moderation (-Q): the BW peak considers only
	// windows ending at every CQMod-th completion, as perftest, which
	// sees only signalled completions, does. 0 means perftest's default:
	// 100 for messages up to 8 KiB, else 1, and never above QueueDepth.
	CQMod int
	// Conns is the number of connections per host pair (perftest's -q;
	// default: the cluster's, see Cluster.ConnsPerPeer). A pair's messages
	// are striped over them: the k-th of C connections carries messages
	// k, k+C, ... (point-to-point), the k-th slice of every chunk
	// (alltoall) or its own ring over the k-th slice of the vector
	// (allreduce), as NCCL channels do. RoCEv2 queue pairs of a pair sit
	// on consecutive planes, starting from one drawn at random per pair,
	// so C = planes puts one on each.
	Conns int
	// Streams is the number of ordered streams per connection that
	// messages are spread over (default 1; MetaRoCE only).
	Streams int
	// From and To select hosts by name: the sender and receiver for the
	// point-to-point tests (default the first and last host), the senders
	// and receiver for incast (default every other host into the first),
	// the hosts taking part in permutation, alltoall and allreduce (From;
	// default all).
	From, To []string
	// Seed seeds the data patterns and the permutation (default 1). The
	// fabric's and transports' random streams come from the lab's seed.
	Seed uint64
	// Timeout bounds the run in virtual time (default 10s): a workload that
	// has not finished by then fails, naming what is outstanding.
	Timeout sim.Time
	// Payload is how memory and packets hold payload: real bytes (the
	// zero value) or synthetic content streams, checked as exactly and
	// neither stored nor copied. allreduce adds vectors, so it always
	// uses bytes.
	Payload softnic.PayloadMode
	// OnMessage, if set, hears every completed application message (its
	// completion time and payload bytes) as it completes: an in-process
	// probe for goodput over time. It changes nothing in the run.
	OnMessage func(now sim.Time, bytes int) `json:"-"`
}

// Errors a run can return.
var (
	ErrTimeout  = errors.New("workload did not finish in time")
	ErrStalled  = errors.New("workload stalled: nothing left to run")
	ErrBadSpec  = errors.New("bad workload spec")
	ErrDataDiff = errors.New("data check failed")
)

// withDefaults fills in defaults (connections per pair from cl, if not
// nil) and checks the spec against a cluster of hosts.
func (s Spec) withDefaults(cl *Cluster, hosts []string) (Spec, error) {
	if s.Name == "" {
		s.Name = WriteBW
	}
	if _, err := ParseName(string(s.Name)); err != nil {
		return s, fmt.Errorf("%w: %w", ErrBadSpec, err)
	}
	s.fillDefaults(cl)
	if err := s.check(); err != nil {
		return s, err
	}
	return s, s.checkHosts(hosts)
}

// fillDefaults sets the fields left zero to perftest's defaults for the
// workload (connections per pair from cl, if not nil).
func (s *Spec) fillDefaults(cl *Cluster) {
	if s.Transport == 0 {
		s.Transport = transport.MetaRoCE
	}
	if s.Name == AllReduce {
		s.Payload = softnic.PayloadBytes // it adds vectors: real bytes
	}
	if s.Size == 0 {
		s.Size = PerftestBWSize
		if s.Name.IsLatency() {
			s.Size = PerftestLatSize
		}
	}
	if s.Iterations == 0 {
		switch s.Name {
		case AllToAll, AllReduce:
			s.Iterations = 20
		case WriteBW:
			s.Iterations = PerftestWriteBWIters
		default:
			s.Iterations = PerftestIters
		}
	}
	if s.QueueDepth == 0 {
		switch {
		case s.Name.IsLatency():
			s.QueueDepth = 1
		case s.Name.IsPerftest():
			s.QueueDepth = PerftestTxDepth
			if s.Duration == 0 {
				s.QueueDepth = min(s.QueueDepth, s.Iterations) // perftest caps tx depth at iters
			}
		default:
			s.QueueDepth = 16
		}
	}
	if s.CQMod == 0 {
		s.CQMod = 1
		if s.Size <= perftestCQModLimit {
			s.CQMod = perftestCQMod
		}
	}
	s.CQMod = max(1, min(s.CQMod, s.QueueDepth))
	if s.Conns == 0 {
		s.Conns = 1
		if cl != nil && !s.Name.IsLatency() { // ping-pong runs on one connection
			s.Conns = cl.ConnsPerPeer(s.Transport)
		}
	}
	if s.Streams == 0 {
		s.Streams = 1
	}
	if s.Seed == 0 {
		s.Seed = 1
	}
	if s.Timeout == 0 {
		s.Timeout = 10 * sim.Second
	}
}

// check checks the filled-in spec's sizes, counts and durations.
func (s *Spec) check() error {
	switch {
	case s.Size < 1 || s.Size > 1<<30:
		return fmt.Errorf("%w: size %d outside 1..1GiB", ErrBadSpec, s.Size)
	case s.Iterations < 1:
		return fmt.Errorf("%w: iterations %d < 1", ErrBadSpec, s.Iterations)
	case s.QueueDepth < 1 || s.QueueDepth > 4096:
		return fmt.Errorf("%w: queue depth %d outside 1..4096", ErrBadSpec, s.QueueDepth)
	case s.Conns < 1 || s.Conns > 256:
		return fmt.Errorf("%w: conns %d outside 1..256", ErrBadSpec, s.Conns)
	case s.Streams < 1 || s.Streams > 1024:
		return fmt.Errorf("%w: streams %d outside 1..1024", ErrBadSpec, s.Streams)
	case s.Streams > 1 && s.Transport == transport.RoCEv2:
		return fmt.Errorf("%w: rocev2 has one stream per connection (got streams %d)", ErrBadSpec, s.Streams)
	case s.Duration < 0 || s.Margin < 0 || s.Interval < 0:
		return fmt.Errorf("%w: negative duration, margin or interval", ErrBadSpec)
	case s.Duration > 0 && 2*s.Margin >= s.Duration:
		return fmt.Errorf("%w: duration %v must exceed twice the margin %v", ErrBadSpec, s.Duration, s.Margin)
	}
	if s.Duration == 0 && s.Iterations < s.Conns && s.Name != AllToAll && s.Name != AllReduce {
		return fmt.Errorf("%w: %d iterations over %d connections per pair: every connection needs a message", ErrBadSpec, s.Iterations, s.Conns)
	}
	if s.Name.IsLatency() && (s.QueueDepth != 1 || s.Conns != 1 || s.Streams != 1) {
		return fmt.Errorf("%w: %s is ping-pong on one connection: queue depth, conns and streams must be 1", ErrBadSpec, s.Name)
	}
	return nil
}

// checkHosts checks that From and To name hosts of the cluster, each once.
func (s *Spec) checkHosts(hosts []string) error {
	idx := map[string]int{}
	for i, h := range hosts {
		idx[h] = i
	}
	for _, list := range [][]string{s.From, s.To} {
		seen := map[string]bool{}
		for _, h := range list {
			if _, ok := idx[h]; !ok {
				known := append([]string(nil), hosts...)
				sort.Strings(known)
				return fmt.Errorf("%w: unknown host %q (hosts: %s)", ErrBadSpec, h, strings.Join(known, ", "))
			}
			if seen[h] {
				return fmt.Errorf("%w: host %q named twice", ErrBadSpec, h)
			}
			seen[h] = true
		}
	}
	return nil
}

// mix64 is SplitMix64's finalizer.
func mix64(z uint64) uint64 {
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// msgSeed names a message's contents (the content stream MR.Fill writes):
// run seed, flow and message number.
func msgSeed(seed uint64, flow int, msg int64) uint64 {
	return mix64(seed ^ mix64(uint64(flow)<<40^uint64(msg)+1))
}
