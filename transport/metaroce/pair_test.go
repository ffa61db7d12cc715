package metaroce

import (
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/transporttest"
)

// pair is two connected engines joined by an in-memory wire with a fixed
// delay and per-port serialization at line rate: no fabric, no harness
// allocation, so benchmarks and allocation tests measure the engines.
type pair struct {
	now   sim.Time
	ends  [2]*pairEnd
	delay sim.Time
	rate  float64 // bytes per second per port
	// acceptCfg is the passive end's config, used when its SYN arrives.
	acceptCfg transport.Config
	// dropEvery, if positive, loses every dropEvery-th data packet.
	dropEvery int
	// Counters.
	dataPackets, packets, dropped int
	posted                        int
	wr                            transport.WorkRequest
}

type pairEnd struct {
	proto    *Protocol
	conn     *Conn
	mem      *transporttest.Memory
	portFree []sim.Time
	q        pktRing // packets on their way to this end
	done     int     // completions seen
	failed   int
	last     transport.Completion
}

// pktRing is a FIFO of preallocated packet buffers.
type pktRing struct {
	buf  [][]byte
	n    []int
	at   []sim.Time
	port []int
	ce   []bool
	head int
	size int
}

func newPktRing(cap, mtu int) pktRing {
	r := pktRing{buf: make([][]byte, cap), n: make([]int, cap), at: make([]sim.Time, cap), port: make([]int, cap), ce: make([]bool, cap)}
	for i := range r.buf {
		r.buf[i] = make([]byte, mtu+transport.HeaderRoom)
	}
	return r
}

func (r *pktRing) full() bool { return r.size == len(r.buf) }

// slot returns the buffer the next pushed packet goes into.
func (r *pktRing) slot() []byte { return r.buf[(r.head+r.size)%len(r.buf)] }

func (r *pktRing) push(n int, at sim.Time, port int) {
	i := (r.head + r.size) % len(r.buf)
	r.n[i], r.at[i], r.port[i] = n, at, port
	r.size++
}

// newPair connects two engines with opts; ports ports per NIC at rate bits/s.
func newPair(opts Options, ports int, rate float64, mtu int) *pair {
	return newPairRing(opts, ports, rate, mtu, 4096)
}

// newPairRing is newPair with a wire holding at most ring packets per
// direction.
func newPairRing(opts Options, ports int, rate float64, mtu, ring int) *pair {
	p := &pair{delay: 2 * sim.Microsecond, rate: rate / 8}
	for i := range p.ends {
		e := &pairEnd{proto: NewProtocol(opts), mem: newTestMemory(i), portFree: make([]sim.Time, ports)}
		e.q = newPktRing(ring, mtu)
		p.ends[i] = e
	}
	for i, e := range p.ends {
		e := e
		cfg := transport.Config{
			LocalID: uint32(i + 1), Ports: ports, LineRate: rate, PathMTU: mtu, Memory: e.mem,
			Complete: func(wc transport.Completion) {
				e.done++
				e.last = wc
				if wc.Status != transport.StatusOK {
					e.failed++
				}
			},
			Rand: sim.NewRand(uint64(i), "pair"),
		}
		if i == 0 {
			c, err := e.proto.Dial(0, cfg)
			if err != nil {
				panic(err)
			}
			e.conn = c.(*Conn)
		} else {
			// Accept happens when the SYN arrives; remember the config.
			p.acceptCfg = cfg
		}
	}
	for p.ends[1].conn == nil || p.ends[0].conn.State() != transport.StateEstablished || !p.ends[1].conn.confirmed {
		if !p.step() {
			panic("pair: setup stalled")
		}
	}
	return p
}

func newTestMemory(i int) *transporttest.Memory {
	m := transporttest.NewMemory()
	buf := make([]byte, bigSize)
	for k := range buf {
		buf[k] = byte(k + i)
	}
	m.Register(keyRW, addrRW, buf, transport.AccessLocalWrite|transport.AccessRemoteWrite|transport.AccessRemoteRead)
	m.Register(keyRecv, addrRcv, make([]byte, bigSize), transport.AccessLocalWrite)
	return m
}

// step runs the earliest event: a delivery, a timer, or a port becoming
// free; it reports whether anything could happen.
func (p *pair) step() bool {
	// Transmit on every free port while there is something to send.
	sent := false
	for i, e := range p.ends {
		if e.conn == nil {
			continue
		}
		peer := p.ends[1-i]
		for port := range e.portFree {
			if e.portFree[port] > p.now || peer.q.full() {
				continue
			}
			buf := peer.q.slot()
			n, _ := e.conn.Transmit(p.now, port, buf)
			if n == 0 {
				continue
			}
			ser := sim.Time(float64(n+ipUDPOverhead) / p.rate * 1e9)
			e.portFree[port] = p.now + ser
			p.packets++
			drop := false
			if buf[0]&0xf <= 4 { // data types
				p.dataPackets++
				drop = p.dropEvery > 0 && p.dataPackets%p.dropEvery == 0
			}
			if drop {
				p.dropped++
			} else {
				peer.q.push(n, p.now+ser+p.delay, port)
			}
			sent = true
		}
	}
	if sent {
		return true
	}
	// Otherwise advance to the next event.
	next := sim.Never
	for _, e := range p.ends {
		if e.q.size > 0 {
			next = min(next, e.q.at[e.q.head])
		}
		if e.conn != nil {
			next = min(next, e.conn.Deadline())
			for _, f := range e.portFree {
				if f > p.now {
					next = min(next, f)
				}
			}
		}
	}
	if next == sim.Never {
		return false
	}
	p.now = max(p.now, next)
	for i, e := range p.ends {
		for e.q.size > 0 && e.q.at[e.q.head] <= p.now {
			h := e.q.head
			b := e.q.buf[h][:e.q.n[h]]
			rx := transport.RxMeta{Port: e.q.port[h], CE: e.q.ce[h]}
			e.q.head = (h + 1) % len(e.q.buf)
			e.q.size--
			if e.conn == nil && i == 1 {
				c, err := e.proto.Accept(p.now, p.acceptCfg, b, rx)
				if err != nil {
					panic(err)
				}
				e.conn = c.(*Conn)
				continue
			}
			e.conn.Receive(p.now, b, rx)
		}
		if e.conn != nil && e.conn.Deadline() <= p.now {
			e.conn.OnTimer(p.now)
		}
	}
	return true
}

// pump keeps depth WRITEs of size bytes outstanding from end 0 to end 1
// and runs until n more data packets have been sent.
func (p *pair) pump(n, depth, size int) {
	target := p.dataPackets + n
	a := p.ends[0]
	for p.dataPackets < target {
		for p.posted-a.done < depth {
			p.wr = transport.WorkRequest{ID: uint64(p.posted + 1), Op: transport.OpWrite, Stream: uint16(p.posted % 4),
				RemoteAddr: addrRW, RKey: keyRW, NumSGE: 1}
			p.wr.SGL[0] = transport.SGE{Addr: addrRW, Len: uint32(size), LKey: keyRW}
			if err := a.conn.PostSend(p.now, &p.wr); err != nil {
				panic(err)
			}
			p.posted++
		}
		if !p.step() {
			panic("pair: stalled")
		}
	}
}

// pumpFor is pump bounded by a number of steps and a virtual-time limit; it
// reports whether n data packets went out.
func (p *pair) pumpFor(n, depth, size, steps int, limit sim.Time) bool {
	target := p.dataPackets + n
	end := p.now + limit
	a := p.ends[0]
	for i := 0; p.dataPackets < target; i++ {
		if i > steps || p.now > end || a.conn.State() != transport.StateEstablished {
			return false
		}
		for p.posted-a.done < depth {
			p.wr = transport.WorkRequest{ID: uint64(p.posted + 1), Op: transport.OpWrite, RemoteAddr: addrRW, RKey: keyRW, NumSGE: 1}
			p.wr.SGL[0] = transport.SGE{Addr: addrRW, Len: uint32(size), LKey: keyRW}
			if err := a.conn.PostSend(p.now, &p.wr); err != nil {
				return false
			}
			p.posted++
		}
		if !p.step() {
			return false
		}
	}
	return true
}
