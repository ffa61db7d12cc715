package metaroce

import (
	"fmt"
	"runtime"
	"testing"
	"unsafe"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/transporttest"
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
		idle, used := connState(n, Options{})
		b.ReportMetric(idle, "B/conn-idle")
		b.ReportMetric(used, "B/conn-after-write")
	}
}

// BenchmarkConnState128Paths is BenchmarkConnState4000 with 128 paths per
// connection (400 connections): path state dominates, and the WRITEs'
// targets never allocate sending paths.
func BenchmarkConnState128Paths(b *testing.B) {
	for i := 0; i < b.N; i++ {
		idle, used := connState(400, Options{Paths: 128})
		b.ReportMetric(idle, "B/conn-idle")
		b.ReportMetric(used, "B/conn-after-write")
	}
}

func connState(n int, opts Options) (idle, used float64) {
	var ms runtime.MemStats
	heap := func() uint64 {
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	base := heap()
	m := newMesh(opts)
	for i := 0; i < n; i++ {
		m.dial()
	}
	m.settle(func() bool {
		for _, c := range m.conns[0] {
			if c.State() != transport.StateEstablished {
				return false
			}
		}
		return len(m.conns[1]) == n
	}, "connection setup")
	m.free, m.q = nil, [2][]meshPkt{} // the wire is not connection state
	h1 := heap()
	for _, c := range m.conns[0] {
		wr := write(1, 0, addrRW, addrRW+0x80000, 64<<10)
		if err := c.PostSend(m.now, wr); err != nil {
			panic(err)
		}
	}
	m.settle(func() bool { return m.done == n }, fmt.Sprintf("%d WRITEs", n))
	m.free, m.q = nil, [2][]meshPkt{}
	h2 := heap()
	runtime.KeepAlive(m)
	// The mesh's memory regions (two 2 MiB tables) are not connection
	// state; the mesh's list of connections (16 bytes each) is, roughly, a
	// NIC's table too.
	regions := float64(2 * 2 * bigSize)
	idle = (float64(h1-base) - regions) / float64(2*n)
	used = (float64(h2-base) - regions) / float64(2*n)
	return idle, used
}

// mesh is two NICs (Protocols) with many connections between them over
// one in-memory wire, as a NIC holds them: for measuring state per
// connection without per-connection test scaffolding.
type mesh struct {
	now    sim.Time
	protos [2]*Protocol
	mems   [2]*transporttest.Memory
	conns  [2][]*Conn // by LocalID-1
	q      [2][]meshPkt
	free   [][]byte
	done   int
}

type meshPkt struct {
	b  []byte
	at sim.Time
}

func newMesh(opts Options) *mesh {
	m := &mesh{}
	for i := range m.protos {
		m.protos[i] = NewProtocol(opts)
		m.mems[i] = newTestMemory(i)
	}
	return m
}

func (m *mesh) cfg(side int) transport.Config {
	return transport.Config{LocalID: uint32(len(m.conns[side]) + 1), Ports: 1, LineRate: 100e9, PathMTU: 4096,
		Memory: m.mems[side], Complete: func(wc transport.Completion) {
			if side == 0 && wc.Status == transport.StatusOK {
				m.done++
			}
		}, Rand: sim.NewRand(uint64(len(m.conns[side])), "mesh")}
}

func (m *mesh) dial() {
	c, err := m.protos[0].Dial(m.now, m.cfg(0))
	if err != nil {
		panic(err)
	}
	m.conns[0] = append(m.conns[0], c.(*Conn))
}

func (m *mesh) buf() []byte {
	if n := len(m.free); n > 0 {
		b := m.free[n-1]
		m.free = m.free[:n-1]
		return b
	}
	return make([]byte, 4096+transport.HeaderRoom)
}

// settle runs the mesh until done reports true, jumping from event to
// event (a packet's arrival, a connection's deadline): with thousands of
// connections sharing a NIC, pacing spaces each one's packets
// milliseconds apart. It panics, naming what, if done is still false
// after a second of virtual time.
func (m *mesh) settle(done func() bool, what string) {
	limit := m.now + sim.Second
	// active lists, in a fixed order, the connections that may have
	// something to send; marked dedupes it.
	var active []*Conn
	marked := map[*Conn]bool{}
	mark := func(c *Conn) {
		if !marked[c] {
			marked[c] = true
			active = append(active, c)
		}
	}
	for side := range m.conns {
		for _, c := range m.conns[side] {
			mark(c)
		}
	}
	side := map[*Conn]int{}
	for s := range m.conns {
		for _, c := range m.conns[s] {
			side[c] = s
		}
	}
	for !done() {
		if m.now > limit {
			panic(fmt.Sprintf("mesh: %s not done after %v", what, m.now))
		}
		// Let every connection that may have something to say say it.
		for _, c := range active {
			for {
				b := m.buf()
				n, _ := c.Transmit(m.now, 0, b)
				if n == 0 {
					m.free = append(m.free, b)
					break
				}
				s := side[c]
				m.q[1-s] = append(m.q[1-s], meshPkt{b: b[:n], at: m.now + 2*sim.Microsecond})
			}
		}
		active = active[:0]
		clear(marked)
		// The next event: an arrival or a deadline.
		next := sim.Never
		for s := range m.q {
			for _, p := range m.q[s] {
				next = min(next, p.at)
			}
		}
		for s := range m.conns {
			for _, c := range m.conns[s] {
				next = min(next, c.Deadline())
			}
		}
		if next == sim.Never {
			panic(fmt.Sprintf("mesh: %s stalled at %v", what, m.now))
		}
		m.now = max(m.now, next)
		for s := range m.q {
			k := 0
			for _, p := range m.q[s] {
				if p.at > m.now {
					m.q[s][k] = p
					k++
					continue
				}
				id, setup, err := m.protos[s].Demux(p.b)
				switch {
				case err != nil:
				case setup:
					c, err := m.protos[s].Accept(m.now, m.cfg(s), p.b, transport.RxMeta{})
					if err != nil {
						panic(err)
					}
					m.conns[s] = append(m.conns[s], c.(*Conn))
					side[c.(*Conn)] = s
					mark(c.(*Conn))
				default:
					c := m.conns[s][id-1]
					c.Receive(m.now, p.b, transport.RxMeta{})
					mark(c)
				}
				m.free = append(m.free, p.b[:cap(p.b)])
			}
			m.q[s] = m.q[s][:k]
		}
		for s := range m.conns {
			for _, c := range m.conns[s] {
				if c.Deadline() <= m.now {
					c.OnTimer(m.now)
					mark(c)
				}
			}
		}
	}
}

// TestConnSize guards the size class a Conn is allocated in (see Conn).
func TestConnSize(t *testing.T) {
	if n := unsafe.Sizeof(Conn{}); n > 1528 {
		t.Errorf("Conn is %d bytes, want at most 1528 (the 1536-byte size class with the allocator's 8-byte header)", n)
	}
}
