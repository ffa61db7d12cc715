package experiment

import (
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/softnic"
)

// maxSamples bounds a sampler: a run that goes on far longer than planned
// (a stalled transport waiting out its timeouts) stops being sampled
// rather than costing time and memory for nothing.
const maxSamples = 5000

// sampler calls fn every interval on a loop, from start until end (or
// maxSamples calls). It only reads counters, so arming it does not change
// what the simulation does: the loop orders every other event exactly as
// without it.
type sampler struct {
	loop       *sim.Loop
	every, end sim.Time
	timer      sim.Timer
	fn         func(now sim.Time)
	n          int
}

// startSampler arms a sampler whose first call is at start.
func startSampler(loop *sim.Loop, start, every, end sim.Time, fn func(now sim.Time)) *sampler {
	s := &sampler{loop: loop, every: every, end: end, fn: fn}
	s.timer.Init(func(now sim.Time, _ any) {
		s.fn(now)
		s.n++
		if next := now + s.every; next <= s.end && s.n < maxSamples {
			s.loop.Arm(&s.timer, next)
		}
	}, nil)
	loop.Arm(&s.timer, start)
	return s
}

// stop disarms the sampler.
func (s *sampler) stop() { s.loop.Disarm(&s.timer) }

// connTrack is one connection end's cumulative traffic, one entry per
// sample (zero before the connection existed).
type connTrack struct {
	conn *softnic.Conn
	nic  int
	// rx and tx are IPv4 bytes (transport payload plus the IPv4 and UDP
	// headers) received and sent by this end.
	rx, tx []uint64
}

// traffic samples every connection's and every plane's received bytes.
type traffic struct {
	nics   []*softnic.NIC
	times  []sim.Time
	tracks []*connTrack
	byConn map[*softnic.Conn]*connTrack
	// planeRx is, by sample, the IPv4 bytes every NIC received on each
	// plane's port (data and ACKs).
	planeRx [][]uint64
}

func newTraffic(nics []*softnic.NIC) *traffic {
	return &traffic{nics: nics, byConn: map[*softnic.Conn]*connTrack{}}
}

// sample records the counters now.
func (tr *traffic) sample(now sim.Time) {
	k := len(tr.times)
	tr.times = append(tr.times, now)
	planes := 0
	for _, n := range tr.nics {
		planes = max(planes, n.Ports())
	}
	pr := make([]uint64, planes)
	for i, n := range tr.nics {
		for p := 0; p < n.Ports(); p++ {
			pr[p] += n.PortStats(p).RxBytes
		}
		for _, c := range n.Conns() {
			t := tr.byConn[c]
			if t == nil {
				t = &connTrack{conn: c, nic: i, rx: make([]uint64, k), tx: make([]uint64, k)}
				tr.byConn[c] = t
				tr.tracks = append(tr.tracks, t)
			}
			s := c.Stats()
			t.rx = append(t.rx, s.RxBytes+softnic.IPv4UDPSize*s.RxPackets)
			t.tx = append(t.tx, s.TxBytes+softnic.IPv4UDPSize*s.TxPackets)
		}
	}
	// A connection that went away (closed after an error) keeps its last
	// counts, so every track has one entry per sample.
	for _, t := range tr.tracks {
		for len(t.rx) < k+1 {
			t.rx = append(t.rx, t.rx[len(t.rx)-1])
			t.tx = append(t.tx, t.tx[len(t.tx)-1])
		}
	}
	tr.planeRx = append(tr.planeRx, pr)
}

// receivers returns the connection ends that received more than they
// sent over the samples: the data receivers of one-way flows.
func (tr *traffic) receivers() []*connTrack {
	var out []*connTrack
	for _, t := range tr.tracks {
		last := len(t.rx) - 1
		if last >= 0 && t.rx[last] > t.tx[last] {
			out = append(out, t)
		}
	}
	return out
}

// total returns, by sample, the sum of the tracks' received bytes.
func total(tracks []*connTrack, samples int) []uint64 {
	out := make([]uint64, samples)
	for _, t := range tracks {
		for i := range out {
			if i < len(t.rx) {
				out[i] += t.rx[i]
			}
		}
	}
	return out
}

// index returns the first sample at or after t (len(times) if none).
func (tr *traffic) index(t sim.Time) int {
	for i, s := range tr.times {
		if s >= t {
			return i
		}
	}
	return len(tr.times)
}

// gbpsBetween is the rate of a cumulative byte count between samples i
// and j, in Gbit/s.
func gbpsBetween(times []sim.Time, cum []uint64, i, j int) float64 {
	if j <= i || j >= len(times) || times[j] <= times[i] {
		return 0
	}
	return float64(cum[j]-cum[i]) * 8 / float64(times[j]-times[i])
}

// jain returns Jain's fairness index of xs: 1 when all are equal, 1/n
// when one takes everything.
func jain(xs []float64) float64 {
	var s, sq float64
	for _, x := range xs {
		s += x
		sq += x * x
	}
	if sq == 0 {
		return 0
	}
	return s * s / (float64(len(xs)) * sq)
}
