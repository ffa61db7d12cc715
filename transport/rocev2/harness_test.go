package rocev2

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/mrlab/mrlab/internal/header"
	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/rocev2/ib"
)

// This file is a minimal two-NIC harness: two Protocols joined by a
// full-duplex link (serialization at a rate, a propagation delay, FIFO),
// framing every payload in real IPv4/UDP headers with a sealed ICRC and
// checking it on arrival. A filter sees every packet and may drop it, mark
// it CE or deliver it twice.

// testMem is a memory-region table: key -> region.
type testMem struct {
	regions []region // index = key
}

type region struct {
	base   uint64
	buf    []byte
	access transport.Access
}

func (m *testMem) add(base uint64, size int, access transport.Access) (key uint32, buf []byte) {
	buf = make([]byte, size)
	m.regions = append(m.regions, region{base: base, buf: buf, access: access})
	return uint32(len(m.regions) - 1), buf
}

func (m *testMem) Check(key uint32, addr uint64, n int, access transport.Access) transport.Status {
	_, st := m.Resolve(key, addr, n, access)
	return st
}

func (m *testMem) Read(dst []byte, key uint32, addr uint64, access transport.Access) transport.Status {
	b, st := m.Resolve(key, addr, len(dst), access)
	copy(dst, b)
	return st
}

func (m *testMem) Write(key uint32, addr uint64, src []byte, access transport.Access) transport.Status {
	b, st := m.Resolve(key, addr, len(src), access)
	copy(b, src)
	return st
}

func (m *testMem) Resolve(key uint32, addr uint64, n int, access transport.Access) ([]byte, transport.Status) {
	bad := transport.StatusLocalProtection
	if access&(transport.AccessRemoteRead|transport.AccessRemoteWrite) != 0 {
		bad = transport.StatusRemoteAccess
	}
	if int(key) >= len(m.regions) || n < 0 {
		return nil, bad
	}
	r := &m.regions[key]
	if r.buf == nil || addr < r.base || r.access&access != access {
		return nil, bad
	}
	off := addr - r.base
	if off > uint64(len(r.buf)) || uint64(n) > uint64(len(r.buf))-off {
		return nil, bad
	}
	return r.buf[off : off+uint64(n)], transport.StatusOK
}

const allAccess = transport.AccessLocalWrite | transport.AccessRemoteWrite | transport.AccessRemoteRead

type verdict uint8

const (
	pass verdict = iota
	drop
	markCE
	duplicate
)

type endpoint struct {
	name  string
	h     *harness
	proto *Protocol
	conn  *Conn
	mem   *testMem
	addr  netip.Addr
	peer  *endpoint
	id    uint32
	timer sim.Timer
	kick  sim.Timer
	busy  bool
	// arriveFn is e.arrive as a sim.Func, made once: a method value
	// stored in a timer would allocate per packet.
	arriveFn sim.Func
	ipID     uint16
	comps    []transport.Completion
	nComp    int
	keep     bool // append completions to comps
	// counters of what the harness saw
	sent, delivered, dropped int
}

type harness struct {
	t       testing.TB
	loop    *sim.Loop
	pool    *packet.Pool
	rate    float64
	delay   sim.Time
	mtu     int
	a, b    *endpoint
	filter  func(from *endpoint, pk *ib.Packet) verdict
	onSend  func(from *endpoint, pk *ib.Packet)
	trace   *traceLog
	icrcBad int
	// capture, if set, sees every packet put on the link (after the
	// filter; CE marks included).
	capture func(now sim.Time, b *packet.Buffer)
}

type traceLog struct {
	lines []string
	print bool
}

func (l *traceLog) Tracef(now sim.Time, conn uint32, format string, args ...any) {
	s := fmt.Sprintf("%v conn %d: ", now, conn) + fmt.Sprintf(format, args...)
	l.lines = append(l.lines, s)
	if l.print {
		fmt.Println(s)
	}
}

func (l *traceLog) count(substr string) int {
	n := 0
	for _, s := range l.lines {
		if strings.Contains(s, substr) {
			n++
		}
	}
	return n
}

type harnessConfig struct {
	opts    Options // both sides
	optsB   *Options
	rate    float64
	delay   sim.Time
	mtu     int
	trace   bool
	noTrace bool
}

func newHarness(t testing.TB, hc harnessConfig) *harness {
	if hc.rate == 0 {
		hc.rate = 10e9
	}
	if hc.delay == 0 {
		hc.delay = 2 * sim.Microsecond
	}
	if hc.mtu == 0 {
		hc.mtu = 4096
	}
	h := &harness{t: t, loop: sim.NewLoop(), pool: packet.NewPool(), rate: hc.rate, delay: hc.delay, mtu: hc.mtu}
	if !hc.noTrace {
		h.trace = &traceLog{print: hc.trace}
	}
	ob := hc.opts
	if hc.optsB != nil {
		ob = *hc.optsB
	}
	h.a = h.newEndpoint("a", netip.MustParseAddr("198.18.0.1"), hc.opts)
	h.b = h.newEndpoint("b", netip.MustParseAddr("198.18.0.2"), ob)
	h.a.peer, h.b.peer = h.b, h.a
	h.b.id = 4 // b's QPs get other numbers than a's, so a mix-up shows
	return h
}

func (h *harness) newEndpoint(name string, addr netip.Addr, o Options) *endpoint {
	e := &endpoint{name: name, h: h, proto: NewProtocol(o), mem: &testMem{}, addr: addr, keep: true}
	e.mem.regions = append(e.mem.regions, region{}) // key 0 is never valid
	e.timer.Init(func(now sim.Time, _ any) { e.onTimer(now) }, nil)
	e.kick.Init(func(now sim.Time, _ any) { e.busy = false; e.pump(now) }, nil)
	e.arriveFn = e.arrive
	return e
}

func (e *endpoint) config() transport.Config {
	e.id++
	cfg := transport.Config{
		LocalID:  e.id,
		Ports:    1,
		LineRate: e.h.rate,
		PathMTU:  e.h.mtu,
		Memory:   e.mem,
		Complete: e.complete,
		Rand:     sim.NewRand(7, e.name+"/conn"),
	}
	if e.h.trace != nil {
		cfg.Trace = e.h.trace
	}
	return cfg
}

func (e *endpoint) complete(c transport.Completion) {
	e.nComp++
	if e.keep {
		e.comps = append(e.comps, c)
	}
}

// dial connects a to b and runs until both are established.
func (h *harness) dial() {
	h.t.Helper()
	tc, err := h.a.proto.Dial(h.loop.Now(), h.a.config())
	if err != nil {
		h.t.Fatal(err)
	}
	h.a.conn = tc.(*Conn)
	h.a.after(h.loop.Now())
	h.runUntil(func() bool {
		return h.a.conn.State() == transport.StateEstablished && h.b.conn != nil &&
			h.b.conn.State() == transport.StateEstablished
	}, sim.Second)
}

// runUntil runs the loop until cond holds, failing after limit of virtual
// time or if the loop runs dry first.
func (h *harness) runUntil(cond func() bool, limit sim.Time) {
	h.t.Helper()
	end := h.loop.Now() + limit
	for !cond() {
		if h.loop.Next() > end || !h.loop.Step() {
			h.t.Fatalf("condition not met by %v (now %v, a=%v b=%v)", end, h.loop.Now(), h.a.state(), h.b.state())
		}
	}
}

func (e *endpoint) state() string {
	if e.conn == nil {
		return "none"
	}
	return e.conn.State().String()
}

// after re-arms the QP's timer and offers it the port, as a NIC does after
// every call into a connection.
func (e *endpoint) after(now sim.Time) {
	if e.conn == nil {
		return
	}
	if d := e.conn.Deadline(); d == sim.Never {
		e.h.loop.Disarm(&e.timer)
	} else {
		e.h.loop.Arm(&e.timer, d)
	}
	e.pump(now)
}

func (e *endpoint) onTimer(now sim.Time) {
	e.conn.OnTimer(now)
	e.after(now)
}

const framing = header.IPv4MinSize + header.UDPSize

// pump sends one packet if the port is idle and the QP has one.
func (e *endpoint) pump(now sim.Time) {
	if e.busy || e.conn == nil {
		return
	}
	b := e.h.pool.Get(packet.MaxSize)
	b.SetLen(e.h.mtu + transport.HeaderRoom)
	n, meta := e.conn.Transmit(now, 0, b.Data())
	if n == 0 {
		b.Free()
		if d := e.conn.Deadline(); d != sim.Never {
			e.h.loop.Arm(&e.timer, d)
		}
		return
	}
	b.SetLen(n)
	header.UDP(b.Prepend(header.UDPSize)).Encode(meta.SrcPort, UDPPort, n)
	f := header.IPv4Fields{TotalLength: uint16(framing + n), ID: e.ipID, Protocol: header.IPv4ProtoUDP, Src: e.addr, Dst: e.peer.addr}
	if meta.ECT {
		f.TOS = header.ECNECT0
	}
	e.ipID++
	header.IPv4(b.Prepend(header.IPv4MinSize)).Encode(&f)
	SealICRC(b.Data())
	e.sent++
	ser := sim.Time(float64(b.Len()*8) * 1e9 / e.h.rate)
	e.busy = true
	e.h.loop.Arm(&e.kick, now+ser)
	v := pass
	if e.h.onSend != nil || e.h.filter != nil {
		var pk ib.Packet
		if err := pk.Decode(b.Data()[framing:]); err != nil {
			e.h.t.Fatalf("%s sent an undecodable packet: %v", e.name, err)
		}
		if e.h.onSend != nil {
			e.h.onSend(e, &pk)
		}
		if e.h.filter != nil {
			v = e.h.filter(e, &pk)
		}
	}
	switch v {
	case drop:
		e.dropped++
		b.Free()
		e.after(now)
		return
	case markCE:
		if header.IPv4(b.Data()).ECN() != header.ECNNotECT {
			header.IPv4(b.Data()).SetECN(header.ECNCE)
		}
	case duplicate:
		c := e.h.pool.Copy(b)
		c.Timer.Init(e.peer.arriveFn, c)
		e.h.loop.Arm(&c.Timer, now+ser+e.h.delay)
	}
	if e.h.capture != nil {
		e.h.capture(now, b)
	}
	b.Timer.Init(e.peer.arriveFn, b)
	e.h.loop.Arm(&b.Timer, now+ser+e.h.delay)
	e.after(now)
}

// arrive is a packet reaching e: check it as a NIC would and hand it on.
func (e *endpoint) arrive(now sim.Time, arg any) {
	b := arg.(*packet.Buffer)
	defer b.Free()
	ip := header.IPv4(b.Data())
	if err := ip.Validate(); err != nil {
		e.h.t.Fatalf("%s: bad IPv4 packet: %v", e.name, err)
	}
	if !CheckICRC(ip) {
		e.h.icrcBad++
		return
	}
	udp := header.UDP(ip.Payload())
	payload := udp.Payload()
	rx := transport.RxMeta{SrcPort: udp.SrcPort(), CE: ip.ECN() == header.ECNCE}
	id, setup, err := e.proto.Demux(payload)
	if err != nil {
		e.h.t.Fatalf("%s: demux: %v", e.name, err)
	}
	e.delivered++
	if setup {
		if e.conn != nil {
			e.h.t.Fatalf("%s: second setup request opened a second QP", e.name)
		}
		tc, err := e.proto.Accept(now, e.config(), payload, rx)
		if err != nil {
			e.h.t.Fatalf("%s: accept: %v", e.name, err)
		}
		e.conn = tc.(*Conn)
		e.after(now)
		return
	}
	if e.conn == nil || id != e.conn.LocalID() {
		e.h.t.Fatalf("%s: packet for unknown id %d", e.name, id)
	}
	e.conn.Receive(now, payload, rx)
	e.after(now)
}

// post helpers.

func (e *endpoint) postSend(wr transport.WorkRequest) {
	e.h.t.Helper()
	if err := e.conn.PostSend(e.h.loop.Now(), &wr); err != nil {
		e.h.t.Fatalf("%s: PostSend: %v", e.name, err)
	}
	e.after(e.h.loop.Now())
}

func (e *endpoint) postRecv(wr transport.WorkRequest) {
	e.h.t.Helper()
	if err := e.conn.PostRecv(e.h.loop.Now(), &wr); err != nil {
		e.h.t.Fatalf("%s: PostRecv: %v", e.name, err)
	}
	e.after(e.h.loop.Now())
}

func sgl(key uint32, addr uint64, n int) ([transport.MaxSGE]transport.SGE, int) {
	var s [transport.MaxSGE]transport.SGE
	s[0] = transport.SGE{Addr: addr, Len: uint32(n), LKey: key}
	return s, 1
}

func writeWR(id uint64, lkey uint32, laddr uint64, n int, rkey uint32, raddr uint64) transport.WorkRequest {
	s, k := sgl(lkey, laddr, n)
	return transport.WorkRequest{ID: id, Op: transport.OpWrite, SGL: s, NumSGE: k, RemoteAddr: raddr, RKey: rkey}
}

func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = byte(i*7) ^ seed ^ byte(i>>9)
	}
}
