package conformance

import (
	"fmt"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/metaroce"
	"github.com/mrlab/mrlab/transport/transporttest"
)

// SimTarget runs mrlab's MetaRoCE engine as the IUT in virtual time: the
// tester is wired straight to its NIC ports, which serialize at LineRate.
type SimTarget struct {
	// Mutations plants faults in every IUT (the suite's self-check).
	Mutations metaroce.Mutation
	// Seed seeds the engine's randomness (default 1).
	Seed uint64
}

// Name returns "sim".
func (SimTarget) Name() string { return "sim" }

// simLineRate is the IUT's port rate in the sim target, bits per second.
const simLineRate = 100e9

// Open starts the engine with the script's settings.
func (t SimTarget) Open(settings map[string]uint64) (IUT, error) {
	opts, ports, err := engineSettings(settings)
	if err != nil {
		return nil, err
	}
	if m, _ := opts.Faults.(metaroce.Mutation); m|t.Mutations != 0 {
		opts.Faults = m | t.Mutations
	}
	seed := t.Seed
	if seed == 0 {
		seed = 1
	}
	e := newEngine(sim.NewLoop(), metaroce.NewProtocol(opts), ports, simLineRate, seed)
	return e, nil
}

// Engine is the engine behind a NIC with a fixed memory layout, driven
// by a sim.Loop. The sim target runs the loop in virtual time; the UDP
// agent runs it paced to the wall clock and sets out to send packets.
type Engine struct {
	loop  *sim.Loop
	proto *metaroce.Protocol
	cfg   transport.Config
	conn  transport.Conn
	mem   *transporttest.Memory
	timer sim.Timer
	ports []simPort
	sent  []Sent
	comps []Completion
	nic   map[string]uint64 // NIC-level drops: nic_demux, nic_no_conn, nic_accept
	// out, when set, carries what the IUT sends instead of collecting it
	// (the UDP agent).
	out func(s Sent)
}

// NewAgentEngine starts the engine for a one-port IUT that the udp agent
// (labs/conformudp) paces to the wall clock: settings are a script's
// "iut:" settings, udpPort the MetaRoCE port it speaks, and out receives
// every packet it sends. The agent drives time with RunUntil and Next.
func NewAgentEngine(settings map[string]uint64, udpPort uint16, seed uint64, out func(Sent)) (*Engine, error) {
	opts, ports, err := engineSettings(settings)
	if err != nil {
		return nil, err
	}
	if ports != 1 {
		return nil, fmt.Errorf("unknown iut setting ports=%d: the agent has one port", ports)
	}
	opts.UDPPort = udpPort
	e := newEngine(sim.NewLoop(), metaroce.NewProtocol(opts), 1, simLineRate, seed)
	e.out = out
	return e, nil
}

// RunUntil fires the engine's events up to virtual time t.
func (e *Engine) RunUntil(t sim.Time) { e.loop.RunUntil(t) }

// Next is the virtual time of the engine's next event (sim.Never if none).
func (e *Engine) Next() sim.Time { return e.loop.Next() }

type simPort struct {
	e     *Engine
	q     int
	busy  bool
	done  sim.Timer
	frame []byte
}

func newEngine(loop *sim.Loop, p *metaroce.Protocol, ports int, rate float64, seed uint64) *Engine {
	e := &Engine{loop: loop, proto: p, mem: newMemory(), nic: map[string]uint64{}}
	e.cfg = transport.Config{LocalID: 0x1001, Ports: ports, LineRate: rate, PathMTU: 4096, Memory: e.mem,
		Complete: func(wc transport.Completion) { e.comps = append(e.comps, completionOf(wc)) },
		Rand:     sim.NewRand(seed, "conformance/iut")}
	e.timer.Init(func(now sim.Time, _ any) {
		if e.conn != nil {
			e.conn.OnTimer(now)
		}
		e.kick()
	}, nil)
	e.ports = make([]simPort, ports)
	for q := range e.ports {
		sp := &e.ports[q]
		sp.e, sp.q = e, q
		sp.frame = make([]byte, e.cfg.PathMTU+transport.HeaderRoom)
		sp.done.Init(func(now sim.Time, _ any) { sp.busy = false; sp.e.poll(sp) }, nil)
	}
	return e
}

func (e *Engine) Now() int64 { return int64(e.loop.Now()) }

// kick rearms the connection's timer and polls every idle port.
func (e *Engine) kick() {
	if e.conn == nil {
		return
	}
	if d := e.conn.Deadline(); d != sim.Never {
		e.loop.Arm(&e.timer, max(d, e.loop.Now()))
	} else {
		e.loop.Disarm(&e.timer)
	}
	for q := range e.ports {
		if !e.ports[q].busy {
			e.poll(&e.ports[q])
		}
	}
}

// poll takes one packet from the connection for port p, if it has one,
// and keeps the port busy for its serialization time.
func (e *Engine) poll(p *simPort) {
	if e.conn == nil || p.busy {
		return
	}
	now := e.loop.Now()
	n, meta := e.conn.Transmit(now, p.q, p.frame)
	if d := e.conn.Deadline(); d != sim.Never {
		e.loop.Arm(&e.timer, max(d, now))
	}
	if n <= 0 {
		return
	}
	s := Sent{At: int64(now), Port: p.q, SrcPort: meta.SrcPort, ECT: meta.ECT, Bytes: append([]byte(nil), p.frame[:n]...)}
	if e.out != nil {
		e.out(s)
	} else {
		e.sent = append(e.sent, s)
	}
	// IPv4 + UDP + Ethernet framing on the wire.
	ser := sim.Time(float64(n+20+8+38) * 8 / e.cfg.LineRate * 1e9)
	p.busy = true
	e.loop.Arm(&p.done, now+max(ser, 1))
}

func (e *Engine) Run(until int64) ([]Sent, error) {
	for len(e.sent) == 0 {
		next := e.loop.Next()
		if next == sim.Never || int64(next) > until {
			if sim.Time(until) > e.loop.Now() {
				e.loop.RunUntil(sim.Time(until))
			}
			break
		}
		e.loop.RunUntil(next)
	}
	out := e.sent
	e.sent = nil
	return out, nil
}

func (e *Engine) Inject(pkt []byte, m InMeta) error {
	now := e.loop.Now()
	rx := transport.RxMeta{Port: m.Port, SrcPort: m.SrcPort, CE: m.CE}
	if m.Port < 0 || m.Port >= len(e.ports) {
		return fmt.Errorf("port %d: the IUT has %d ports", m.Port, len(e.ports))
	}
	id, setup, err := e.proto.Demux(pkt)
	switch {
	case err != nil:
		e.nic["nic_demux"]++
	case setup:
		c, err := e.proto.Accept(now, e.cfg, pkt, rx)
		if err != nil {
			e.nic["nic_accept"]++
			break
		}
		if e.conn == nil {
			e.conn = c
		}
	case e.conn == nil || id != e.conn.LocalID():
		e.nic["nic_no_conn"]++
	default:
		e.conn.Receive(now, pkt, rx)
	}
	e.kick()
	return nil
}

func (e *Engine) Do(verb string, args map[string]uint64) error {
	now := e.loop.Now()
	defer e.kick()
	switch verb {
	case "dial":
		if e.conn != nil {
			return fmt.Errorf("dial: the IUT already has a connection")
		}
		c, err := e.proto.Dial(now, e.cfg)
		if err != nil {
			return err
		}
		e.conn = c
		return nil
	case "close":
		if e.conn == nil {
			return fmt.Errorf("close: no connection")
		}
		e.conn.Close(now)
		return nil
	}
	if e.conn == nil {
		return fmt.Errorf("%s: no connection", verb)
	}
	wr, recv, err := workRequest(verb, args)
	if err != nil {
		return err
	}
	if recv {
		return e.conn.PostRecv(now, wr)
	}
	return e.conn.PostSend(now, wr)
}

func (e *Engine) Completions() ([]Completion, error) {
	out := e.comps
	e.comps = nil
	return out, nil
}

func (e *Engine) Mem(key uint32, addr uint64, n int) ([]byte, error) {
	r, ok := e.mem.Region(key)
	if !ok || n < 0 || addr < r.Addr || addr-r.Addr > uint64(len(r.Buf)) || uint64(n) > uint64(len(r.Buf))-(addr-r.Addr) {
		return nil, fmt.Errorf("memory %#x+%d is not in region %#x", addr, n, key)
	}
	return append([]byte(nil), r.Buf[addr-r.Addr:][:n]...), nil
}

func (e *Engine) Counter(name string) (uint64, error) {
	if v, ok := e.nic[name]; ok || len(name) > 4 && name[:4] == "nic_" {
		return v, nil
	}
	if e.conn == nil {
		return 0, nil
	}
	v, ok := counters(e.conn.(*metaroce.Conn).Stats())[name]
	if !ok {
		return 0, fmt.Errorf("unknown counter %q", name)
	}
	return v, nil
}

func (e *Engine) State() (string, error) {
	if e.conn == nil {
		return "none", nil
	}
	return e.conn.State().String(), nil
}

func (e *Engine) Close() error { return nil }
