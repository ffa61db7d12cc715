package metaroce

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
)

// TestNoAllocsSteadyState: once warm, moving data allocates nothing per
// packet — sending, placing, ACKing, completing, and recovering losses.
func TestNoAllocsSteadyState(t *testing.T) {
	for _, tc := range []struct {
		name      string
		paths     int
		dropEvery int
	}{{"lossless", 16, 0}, {"1% loss", 16, 100}, {"256 paths, 2% loss", 256, 50}} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(Options{Paths: tc.paths}, 2, 100e9, 4096)
			p.dropEvery = tc.dropEvery
			p.pump(50000, 8, 256<<10) // warm up: rings reach their working size
			allocs := testing.AllocsPerRun(5, func() { p.pump(2000, 8, 256<<10) })
			if allocs != 0 {
				t.Errorf("%v allocations per 2000 data packets", allocs)
			}
			if f := p.ends[0].failed; f != 0 {
				t.Errorf("%d failed completions", f)
			}
			if tc.dropEvery > 0 && metaConn0(p).Stats().Retransmits == 0 {
				t.Error("no retransmissions: the loss path was not exercised")
			}
		})
	}
}

func metaConn0(p *pair) *Conn { return p.ends[0].conn }

// BenchmarkPairWrite moves 1 MiB WRITEs through a pair of engines joined in
// memory (no fabric): one op is one data packet (sent, placed, ACKed).
func BenchmarkPairWrite(b *testing.B) {
	for _, bc := range []struct {
		paths, drop int
	}{{16, 0}, {16, 100}, {256, 0}} {
		name := fmt.Sprintf("paths=%d/loss=%g%%", bc.paths, 100/float64(max(bc.drop, 1))*float64(min(bc.drop, 1)))
		b.Run(name, func(b *testing.B) {
			p := newPair(Options{Paths: bc.paths}, 1, 400e9, 4096)
			p.dropEvery = bc.drop
			p.pump(20000, 8, 1<<20)
			b.SetBytes(4096)
			b.ReportAllocs()
			b.ResetTimer()
			p.pump(b.N, 8, 1<<20)
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pkts/s")
			b.ReportMetric(float64(p.packets)/float64(p.dataPackets), "pkts/datapkt")
		})
	}
}

// BenchmarkConnState4000 sets up 4000 established connections between two
// NICs and reports the heap they hold per connection end, idle and after
// each has moved one 64 KiB WRITE (when its rings exist).
func BenchmarkConnState4000(b *testing.B) {
	const n = 4000
	for i := 0; i < b.N; i++ {
		idle, used := connState(n)
		b.ReportMetric(idle, "B/conn-idle")
		b.ReportMetric(used, "B/conn-after-write")
	}
}

func connState(n int) (idle, used float64) {
	var ms runtime.MemStats
	heap := func() uint64 {
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	base := heap()
	ps := make([]*pair, n)
	for i := range ps {
		ps[i] = newPairShared(ps, i)
	}
	h1 := heap()
	for _, p := range ps {
		p.pump(16, 1, 64<<10)
	}
	h2 := heap()
	runtime.KeepAlive(ps)
	// Each pair also holds test scaffolding (its in-memory wire and
	// memory regions); subtract what one pair's scaffolding costs.
	per := float64(scaffold())
	idle = (float64(h1-base)/float64(n) - per) / 2
	used = (float64(h2-base)/float64(n) - per) / 2
	return idle, used
}

// sharedNIC makes all pairs of connState share two Protocols and two
// memory tables, as 4000 connections between two NICs would.
var sharedNIC [2]*pairEnd

func newPairShared(ps []*pair, i int) *pair {
	if i == 0 {
		sharedNIC = [2]*pairEnd{}
	}
	p := newPairSmall(sharedNIC)
	if i == 0 {
		sharedNIC = [2]*pairEnd{p.ends[0], p.ends[1]}
	}
	return p
}

// newPairSmall is newPair with a small wire, reusing NIC state from nic.
func newPairSmall(nic [2]*pairEnd) *pair {
	p := &pair{delay: 2 * sim.Microsecond, rate: 100e9 / 8}
	for i := range p.ends {
		e := &pairEnd{portFree: make([]sim.Time, 1), q: newPktRing(8, 4096)}
		if nic[i] != nil {
			e.proto, e.mem = nic[i].proto, nic[i].mem
		} else {
			e.proto, e.mem = NewProtocol(Options{}), newTestMemory(i)
		}
		p.ends[i] = e
	}
	for i, e := range p.ends {
		e := e
		cfg := transport.Config{LocalID: uint32(i + 1), Ports: 1, LineRate: 100e9, PathMTU: 4096, Memory: e.mem,
			Complete: func(wc transport.Completion) { e.done++ }, Rand: sim.NewRand(uint64(i), "pair")}
		if i == 0 {
			c, _ := e.proto.Dial(0, cfg)
			e.conn = c.(*Conn)
		} else {
			p.acceptCfg = cfg
		}
	}
	for p.ends[1].conn == nil || p.ends[0].conn.State() != transport.StateEstablished || !p.ends[1].conn.confirmed {
		if !p.step() {
			panic("setup stalled")
		}
	}
	return p
}

// scaffold is the heap one small pair's test scaffolding holds (its
// in-memory wire), measured without connections.
func scaffold() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	before := ms.HeapAlloc
	const k = 1000
	keep := make([][2]pktRing, k)
	for i := range keep {
		keep[i] = [2]pktRing{newPktRing(8, 4096), newPktRing(8, 4096)}
	}
	runtime.GC()
	runtime.ReadMemStats(&ms)
	runtime.KeepAlive(keep)
	return (ms.HeapAlloc - before) / k
}
