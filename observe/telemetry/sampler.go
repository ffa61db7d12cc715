package telemetry

import (
	"fmt"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
)

// DefaultInterval is the sampling period when none is given: 10us of lab
// time, a few round trips of a small lab.
const DefaultInterval = 10 * sim.Microsecond

// linkStats is one link direction's state at one instant.
type linkStats struct {
	QueueBytes         int64
	TxBytes, TxPackets uint64
	Drops, Marks       uint64
	Rate               float64 // the direction's rate, bits/s
}

// linkSource is a link direction the sampler polls.
type linkSource interface {
	telemetryLink() linkStats
}

// linkFunc adapts a function to linkSource.
type linkFunc func() linkStats

// telemetryLink implements linkSource.
func (f linkFunc) telemetryLink() linkStats { return f() }

// prev holds a series' previous cumulative counters.
type prev struct {
	t                                 sim.Time
	valid                             bool
	bytesAcked, packetsAcked, ceAcked uint64
	entropy                           uint16
	entropyChanges                    uint64
	txBytes                           uint64
}

type connEntry struct {
	host, peer string
	id         uint32
	transport  string
	src        transport.StatsReporter
	// acked, if set, returns the bytes of this end's requests the peer
	// acknowledged (softnic.Conn.BytesCompleted): the sender's side of
	// bytes_acked and rate_bps.
	acked   func() uint64
	st      transport.Stats // the last report, its paths' storage reused
	prev    prev
	paths   []prev
	removed bool
}

type linkEntry struct {
	name string
	src  linkSource
	prev prev
}

// Sampler polls connections and links every interval of lab time on the
// lab's event loop and writes samples to a sink. Series are written in
// the order they were added, so a seeded sim run gives the same file.
type Sampler struct {
	sched sim.Scheduler
	every sim.Time
	sink  Sink
	timer sim.Timer
	conns []*connEntry
	links []*linkEntry
	nets  []*networkSource
	nics  []*nicSource
	s     Sample
	err   error
	n     uint64
}

// NewSampler returns a sampler writing to sink every interval (0 means
// DefaultInterval). Call Start to begin.
func NewSampler(sched sim.Scheduler, every sim.Time, sink Sink) *Sampler {
	if every <= 0 {
		every = DefaultInterval
	}
	s := &Sampler{sched: sched, every: every, sink: sink}
	s.timer.Init(s.tick, nil)
	return s
}

// Interval returns the sampling period.
func (s *Sampler) Interval() sim.Time { return s.every }

// addConn adds a connection: host is where it lives, peer the host at
// the other end, id its local id, kind its transport. (Labs add NICs,
// whose connections come and go, with AddNIC.)
func (s *Sampler) addConn(host, peer string, id uint32, kind transport.Kind, src transport.StatsReporter) {
	s.conns = append(s.conns, &connEntry{host: host, peer: peer, id: id, transport: kind.String(), src: src})
}

// addLink adds a link direction, named as captures and counters name it
// ("p0-leaf0-spine1:ab").
func (s *Sampler) addLink(name string, src linkSource) {
	s.links = append(s.links, &linkEntry{name: name, src: src})
}

// Start takes a first sample now and then one every interval.
func (s *Sampler) Start(now sim.Time) {
	s.Sample(now)
	s.sched.Arm(&s.timer, now+s.every)
}

// Stop cancels the periodic sampling.
func (s *Sampler) Stop() { s.sched.Disarm(&s.timer) }

// Err returns the first error a sink returned.
func (s *Sampler) Err() error { return s.err }

// Batches returns how many sampling instants have been written.
func (s *Sampler) Batches() uint64 { return s.n }

func (s *Sampler) tick(now sim.Time, _ any) {
	s.Sample(now)
	s.sched.Arm(&s.timer, now+s.every)
}

// Sample writes one sample of every series at time now.
func (s *Sampler) Sample(now sim.Time) {
	for _, e := range s.conns {
		s.sampleConn(now, e)
	}
	for _, ns := range s.nics {
		s.sampleNIC(now, ns)
	}
	for _, l := range s.links {
		s.sampleLink(now, l)
	}
	for _, ns := range s.nets {
		s.sampleNetwork(now, ns)
	}
	s.note(s.sink.EndBatch(now))
	s.n++
}

func (s *Sampler) note(err error) {
	if err != nil && s.err == nil {
		s.err = fmt.Errorf("telemetry sink: %w", err)
	}
}

// rates turns cumulative counters into the interval's delivery rate, send
// rate and ECN fraction, and remembers them.
func rates(p *prev, now sim.Time, bytes, pkts, ce, tx uint64) (rate, send, ecn float64) {
	if p.valid && now > p.t {
		secs := (now - p.t).Seconds()
		if bytes >= p.bytesAcked {
			rate = float64(bytes-p.bytesAcked) * 8 / secs
		}
		if tx >= p.txBytes {
			send = float64(tx-p.txBytes) * 8 / secs
		}
		if pkts > p.packetsAcked && ce >= p.ceAcked {
			ecn = float64(ce-p.ceAcked) / float64(pkts-p.packetsAcked)
		}
	}
	p.t, p.valid = now, true
	p.bytesAcked, p.packetsAcked, p.ceAcked, p.txBytes = bytes, pkts, ce, tx
	return rate, send, ecn
}

// sampleConn writes a connection's sample and one per path. Its delivered
// bytes (bytes_acked) and delivery rate (rate_bps) count the bytes its own
// requests had acknowledged (as a sender, message by message as they
// complete) plus the bytes it placed (as a receiver), so a flow's goodput
// shows on both its ends; a path's entropy changes are the
// transport's count or, where it keeps none, the changes the sampler saw.
func (s *Sampler) sampleConn(now sim.Time, e *connEntry) {
	e.src.ReportStats(&e.st)
	cs := &e.st
	smp := &s.s
	*smp = Sample{T: now, Kind: KindConn, Host: e.host, Peer: e.peer, Conn: e.id, Transport: e.transport,
		Cwnd: int64(cs.Cwnd), InFlight: int64(cs.InFlight), SRTT: cs.SRTT, RTO: cs.RTO, PacingRate: cs.PacingRate,
		RateHint: cs.RateHint, Retransmits: cs.Retransmits, Timeouts: cs.Timeouts}
	delivered := cs.BytesPlaced
	if e.acked != nil {
		delivered += e.acked()
	}
	smp.BytesAcked = delivered
	smp.Rate, smp.SendRate, smp.ECNFraction = rates(&e.prev, now, delivered, cs.PacketsAcked, cs.CEAcked, cs.TxBytes)

	for len(e.paths) < len(cs.Paths) {
		e.paths = append(e.paths, prev{})
	}
	var pathChanges uint64
	for i := range cs.Paths {
		ps := &cs.Paths[i]
		p := &e.paths[i]
		if ps.EntropyChanges > 0 {
			p.entropyChanges = ps.EntropyChanges
		} else if p.valid && ps.Entropy != p.entropy {
			p.entropyChanges++
		}
		p.entropy = ps.Entropy
		pathChanges += p.entropyChanges
	}
	smp.EntropyChanges = max(cs.EntropyChanges, pathChanges)
	s.note(s.sink.Write(smp))

	for i := range cs.Paths {
		ps := &cs.Paths[i]
		p := &e.paths[i]
		*smp = Sample{T: now, Kind: KindPath, Host: e.host, Peer: e.peer, Conn: e.id, Path: i,
			Plane: ps.Port, Entropy: ps.Entropy, State: ps.State, Cwnd: int64(ps.Cwnd), InFlight: int64(ps.InFlight),
			SRTT: ps.SRTT, RTO: ps.RTO, BytesAcked: ps.BytesAcked, Retransmits: ps.Retransmits,
			Timeouts: ps.Timeouts, EntropyChanges: p.entropyChanges}
		smp.Rate, smp.SendRate, smp.ECNFraction = rates(p, now, ps.BytesAcked, ps.PacketsAcked, ps.CEAcked, ps.TxBytes)
		s.note(s.sink.Write(smp))
	}
}

func (s *Sampler) sampleLink(now sim.Time, l *linkEntry) {
	s.note(s.sink.Write(s.linkSample(now, l.name, &l.prev, l.src.telemetryLink())))
}

// linkSample makes a link direction's sample in s.s, with its utilization
// over the interval since p, and moves p on.
func (s *Sampler) linkSample(now sim.Time, name string, p *prev, ls linkStats) *Sample {
	smp := &s.s
	*smp = Sample{T: now, Kind: KindLink, Link: name, QueueBytes: ls.QueueBytes, TxBytes: ls.TxBytes,
		TxPackets: ls.TxPackets, Drops: ls.Drops, Marks: ls.Marks}
	if p.valid && now > p.t && ls.Rate > 0 && ls.TxBytes >= p.txBytes {
		smp.Util = float64(ls.TxBytes-p.txBytes) * 8 / (now - p.t).Seconds() / ls.Rate
	}
	p.t, p.valid, p.txBytes = now, true, ls.TxBytes
	return smp
}
