// Package workload runs perftest-style and collective RDMA workloads on a
// lab's software NICs in virtual time: write_bw, send_bw, read_bw,
// write_lat, permutation, N-to-1 incast, all-to-all and ring all-reduce.
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
	Permutation Name = "permutation"
	Incast      Name = "incast"
	AllToAll    Name = "alltoall"
	AllReduce   Name = "allreduce"
)

var names = []Name{WriteBW, SendBW, ReadBW, WriteLat, Permutation, Incast, AllToAll, AllReduce}

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
	// Size is the message size in bytes (default 65536). For alltoall it is
	// what each host sends in one exchange, split evenly over the others
	// (perftest's and NCCL's convention: size/N to every peer); for
	// allreduce it is the vector being reduced.
	Size int
	// Iterations is the number of messages per flow, or of collective
	// operations (default 1000 for point-to-point, 1000 for write_lat, 20
	// for collectives).
	Iterations int
	// Duration, if set, runs bandwidth tests for this long (virtual time)
	// instead of a fixed number of iterations.
	Duration sim.Time
	// QueueDepth is the messages in flight per connection (default 16; 1
	// for write_lat).
	QueueDepth int
	// Conns is the number of connections per host pair (default: the
	// cluster's, see Cluster.ConnsPerPeer). A pair's messages are striped
	// over them: the k-th of C connections carries messages k, k+C, ...
	// (point-to-point), the k-th slice of every chunk (alltoall) or its own
	// ring over the k-th slice of the vector (allreduce), as NCCL channels
	// do. RoCEv2 queue pairs of a pair sit on consecutive planes, starting
	// from one drawn at random per pair, so C = planes puts one on each.
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
	if s.Transport == 0 {
		s.Transport = transport.MetaRoCE
	}
	if s.Size == 0 {
		s.Size = 65536
	}
	if s.Iterations == 0 {
		switch s.Name {
		case AllToAll, AllReduce:
			s.Iterations = 20
		default:
			s.Iterations = 1000
		}
	}
	if s.QueueDepth == 0 {
		s.QueueDepth = 16
		if s.Name == WriteLat {
			s.QueueDepth = 1
		}
	}
	if s.Conns == 0 {
		s.Conns = 1
		if cl != nil {
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
	switch {
	case s.Size < 1 || s.Size > 1<<30:
		return s, fmt.Errorf("%w: size %d outside 1..1GiB", ErrBadSpec, s.Size)
	case s.Iterations < 1:
		return s, fmt.Errorf("%w: iterations %d < 1", ErrBadSpec, s.Iterations)
	case s.QueueDepth < 1 || s.QueueDepth > 4096:
		return s, fmt.Errorf("%w: queue depth %d outside 1..4096", ErrBadSpec, s.QueueDepth)
	case s.Conns < 1 || s.Conns > 256:
		return s, fmt.Errorf("%w: conns %d outside 1..256", ErrBadSpec, s.Conns)
	case s.Streams < 1 || s.Streams > 1024:
		return s, fmt.Errorf("%w: streams %d outside 1..1024", ErrBadSpec, s.Streams)
	case s.Streams > 1 && s.Transport == transport.RoCEv2:
		return s, fmt.Errorf("%w: rocev2 has one stream per connection (got streams %d)", ErrBadSpec, s.Streams)
	case s.Duration < 0:
		return s, fmt.Errorf("%w: negative duration", ErrBadSpec)
	}
	if s.Duration == 0 && s.Iterations < s.Conns && s.Name != AllToAll && s.Name != AllReduce {
		return s, fmt.Errorf("%w: %d iterations over %d connections per pair: every connection needs a message", ErrBadSpec, s.Iterations, s.Conns)
	}
	if s.Name == WriteLat && s.QueueDepth != 1 {
		return s, fmt.Errorf("%w: write_lat is ping-pong, queue depth must be 1", ErrBadSpec)
	}
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
				return s, fmt.Errorf("%w: unknown host %q (hosts: %s)", ErrBadSpec, h, strings.Join(known, ", "))
			}
			if seen[h] {
				return s, fmt.Errorf("%w: host %q named twice", ErrBadSpec, h)
			}
			seen[h] = true
		}
	}
	return s, nil
}
