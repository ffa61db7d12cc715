package softnic

import (
	"encoding/binary"
	"errors"

	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
)

// fakeWire is a point-to-point link for tests: it serializes at its rate,
// delivers after its delay to the far NIC, and can drop packets.
type fakeWire struct {
	loop    *sim.Loop
	rate    float64
	delay   sim.Time
	busy    bool
	idleTmr sim.Timer
	onIdle  func(sim.Time)
	to      interface {
		Receive(sim.Time, int, *packet.Buffer)
	}
	toPort  int
	deliver sim.Func
	down    bool
	// tap, if set, sees every packet sent (before delivery).
	tap  func(b []byte)
	drop func(b []byte) bool
	// seen, if set, sees every packet sent as the NIC handed it over.
	seen func(p *packet.Buffer)
	sent int
}

func newFakeWire(loop *sim.Loop, rate float64, delay sim.Time) *fakeWire {
	w := &fakeWire{loop: loop, rate: rate, delay: delay}
	w.idleTmr.Init(func(now sim.Time, _ any) {
		w.busy = false
		if w.onIdle != nil {
			w.onIdle(now)
		}
	}, nil)
	w.deliver = func(now sim.Time, arg any) {
		p := arg.(*packet.Buffer)
		if w.to == nil {
			p.Free()
			return
		}
		w.to.Receive(now, w.toPort, p)
	}
	return w
}

func (w *fakeWire) Send(now sim.Time, p *packet.Buffer) {
	w.busy = true
	w.sent++
	ser := sim.Time(float64(p.Len()*8) / w.rate * 1e9)
	w.loop.Arm(&w.idleTmr, now+ser)
	if w.seen != nil {
		w.seen(p)
	}
	if w.tap != nil || w.drop != nil {
		// Taps see (and may change) every byte, as the fabric's
		// corruption does: a header-only packet gets its bytes back.
		p = p.Expand()
	}
	if w.tap != nil {
		w.tap(p.Data())
	}
	if w.drop != nil && w.drop(p.Data()) {
		p.Free()
		return
	}
	p.Timer.Init(w.deliver, p)
	w.loop.Arm(&p.Timer, now+ser+w.delay)
}

func (w *fakeWire) Idle() bool                  { return !w.busy }
func (w *fakeWire) SetOnIdle(fn func(sim.Time)) { w.onIdle = fn }
func (w *fakeWire) Rate() float64               { return w.rate }
func (w *fakeWire) Up() bool                    { return !w.down }

// toy is a minimal, loss-intolerant transport for testing the NIC before
// (and independently of) the real ones: one packet per request, no
// retransmission, RNR retried after a fixed back-off.
type toy struct {
	// trailer is room left after each payload for a Sealer's CRC.
	trailer int
	kind    transport.Kind
	port    uint16
	conns   []*toyConn
}

const (
	tSyn = iota + 1
	tSynAck
	tWrite
	tSend
	tReadReq
	tReadResp
	tResp
	tRNR
)

const toyHdr = 1 + 4 + 8 // type, dst id, wr id

var errToyShort = errors.New("toy: short packet")

func (p *toy) Kind() transport.Kind { return p.kind }
func (p *toy) UDPPort() uint16      { return p.port }
func (p *toy) Demux(b []byte) (uint32, bool, error) {
	if len(b) < toyHdr {
		return 0, false, errToyShort
	}
	if b[0] == tSyn {
		return 0, true, nil
	}
	return binary.BigEndian.Uint32(b[1:]), false, nil
}

func (p *toy) Dial(now sim.Time, cfg transport.Config) (transport.Conn, error) {
	c := &toyConn{cfg: cfg, state: transport.StateConnecting, trailer: p.trailer}
	c.pushCtl(ctl{typ: tSyn})
	p.conns = append(p.conns, c)
	return c, nil
}

func (p *toy) Accept(now sim.Time, cfg transport.Config, b []byte, rx transport.RxMeta) (transport.Conn, error) {
	c := &toyConn{cfg: cfg, state: transport.StateEstablished, peer: binary.BigEndian.Uint32(b[5:]), trailer: p.trailer}
	c.pushCtl(ctl{typ: tSynAck})
	c.lastRx = rx
	p.conns = append(p.conns, c)
	return c, nil
}

type ctl struct {
	typ    byte
	wrid   uint64
	status transport.Status
	data   []byte // READ response payload (a view of registered memory)
}

type toyConn struct {
	cfg     transport.Config
	state   transport.State
	peer    uint32
	sq      [64]transport.WorkRequest
	sqHead  int
	sqN     int
	ctls    [64]ctl
	cHead   int
	cN      int
	rq      [64]transport.WorkRequest
	rqHead  int
	rqN     int
	reads   [64]transport.WorkRequest // outstanding READs by wrid slot
	retryAt sim.Time
	lastRx  transport.RxMeta
	rxCount int
	trailer int
	// portsUp is what the NIC last said of its ports (SetPortsUp), told
	// how many times it said so.
	portsUp uint32
	told    int
}

func (c *toyConn) SetPortsUp(now sim.Time, up uint32) { c.portsUp, c.told = up, c.told+1 }

func (c *toyConn) pushCtl(x ctl) {
	c.ctls[(c.cHead+c.cN)%len(c.ctls)] = x
	c.cN++
}

func (c *toyConn) PostSend(now sim.Time, wr *transport.WorkRequest) error {
	if c.state == transport.StateClosed {
		return transport.ErrClosed
	}
	if c.sqN == len(c.sq) {
		return transport.ErrQueueFull
	}
	c.sq[(c.sqHead+c.sqN)%len(c.sq)] = *wr
	c.sqN++
	return nil
}

func (c *toyConn) PostRecv(now sim.Time, wr *transport.WorkRequest) error {
	if c.rqN == len(c.rq) {
		return transport.ErrQueueFull
	}
	c.rq[(c.rqHead+c.rqN)%len(c.rq)] = *wr
	c.rqN++
	return nil
}

func (c *toyConn) gather(wr *transport.WorkRequest, dst []byte) (int, bool) {
	n := 0
	for i := 0; i < wr.NumSGE; i++ {
		s := wr.SGL[i]
		if n+int(s.Len) > len(dst) {
			return 0, false
		}
		if st := c.cfg.Memory.Read(dst[n:n+int(s.Len)], s.LKey, s.Addr, 0); st != transport.StatusOK {
			return 0, false
		}
		n += int(s.Len)
	}
	return n, true
}

func (c *toyConn) scatter(wr *transport.WorkRequest, src []byte) transport.Status {
	for i := 0; i < wr.NumSGE && len(src) > 0; i++ {
		s := wr.SGL[i]
		k := min(int(s.Len), len(src))
		if st := c.cfg.Memory.Write(s.LKey, s.Addr, src[:k], transport.AccessLocalWrite); st != transport.StatusOK {
			return st
		}
		src = src[k:]
	}
	if len(src) > 0 {
		return transport.StatusLocalLength
	}
	return transport.StatusOK
}

func (c *toyConn) Transmit(now sim.Time, port int, b []byte) (int, transport.TxMeta) {
	n, meta := c.transmit(now, port, b[:len(b)-c.trailer])
	if n > 0 {
		n += c.trailer
	}
	return n, meta
}

func (c *toyConn) transmit(now sim.Time, port int, b []byte) (int, transport.TxMeta) {
	meta := transport.TxMeta{SrcPort: 0xc000 | uint16(c.cfg.LocalID), ECT: true}
	if port != 0 {
		return 0, meta // the toy is single-path
	}
	if c.cN > 0 {
		x := c.ctls[c.cHead]
		c.ctls[c.cHead] = ctl{}
		c.cHead = (c.cHead + 1) % len(c.ctls)
		c.cN--
		b[0] = x.typ
		binary.BigEndian.PutUint32(b[1:], c.peer)
		binary.BigEndian.PutUint64(b[5:], x.wrid)
		switch x.typ {
		case tSyn, tSynAck:
			binary.BigEndian.PutUint32(b[5:], c.cfg.LocalID)
			return toyHdr, meta
		case tResp, tRNR:
			b[toyHdr] = byte(x.status)
			return toyHdr + 1, meta
		case tReadResp:
			b[toyHdr] = byte(x.status)
			return toyHdr + 1 + copy(b[toyHdr+1:], x.data), meta
		}
		return 0, meta
	}
	if c.state != transport.StateEstablished || c.sqN == 0 || now < c.retryAt {
		return 0, meta
	}
	wr := &c.sq[c.sqHead]
	b[5+8] = 0
	binary.BigEndian.PutUint32(b[1:], c.peer)
	binary.BigEndian.PutUint64(b[5:], wr.ID)
	h := toyHdr + 8 + 4 + 4 + 4
	binary.BigEndian.PutUint64(b[toyHdr:], wr.RemoteAddr)
	binary.BigEndian.PutUint32(b[toyHdr+8:], wr.RKey)
	binary.BigEndian.PutUint32(b[toyHdr+12:], wr.Imm)
	binary.BigEndian.PutUint32(b[toyHdr+16:], uint32(wr.Len()))
	n := 0
	switch wr.Op {
	case transport.OpWrite, transport.OpWriteImm, transport.OpSend, transport.OpSendImm:
		b[0] = tWrite
		if wr.Op == transport.OpSend || wr.Op == transport.OpSendImm {
			b[0] = tSend
		}
		k, ok := c.gather(wr, b[h:])
		if !ok {
			c.cfg.Complete(transport.Completion{ID: wr.ID, Op: wr.Op, Status: transport.StatusLocalProtection})
			c.popSQ()
			return 0, meta
		}
		n = k
	case transport.OpRead:
		b[0] = tReadReq
		c.reads[wr.ID%64] = *wr
	}
	// Keep the request for its response (the slot stays until tResp).
	c.popSQToPending(wr)
	return h + n, meta
}

// pending holds sent requests awaiting their response, by id modulo 64.
func (c *toyConn) popSQToPending(wr *transport.WorkRequest) {
	c.reads[wr.ID%64] = *wr
	c.popSQ()
}

func (c *toyConn) popSQ() {
	c.sq[c.sqHead] = transport.WorkRequest{}
	c.sqHead = (c.sqHead + 1) % len(c.sq)
	c.sqN--
}

func (c *toyConn) Receive(now sim.Time, b []byte, rx transport.RxMeta) {
	c.lastRx = rx
	c.rxCount++
	if len(b) < toyHdr+c.trailer {
		return
	}
	b = b[:len(b)-c.trailer]
	wrid := binary.BigEndian.Uint64(b[5:])
	switch b[0] {
	case tSyn:
		c.pushCtl(ctl{typ: tSynAck}) // repeated request: answer again
	case tSynAck:
		c.peer = binary.BigEndian.Uint32(b[5:])
		c.state = transport.StateEstablished
	case tWrite, tSend:
		h := toyHdr + 20
		if len(b) < h {
			return
		}
		raddr := binary.BigEndian.Uint64(b[toyHdr:])
		rkey := binary.BigEndian.Uint32(b[toyHdr+8:])
		imm := binary.BigEndian.Uint32(b[toyHdr+12:])
		data := b[h:]
		if b[0] == tWrite {
			if st := c.cfg.Memory.Write(rkey, raddr, data, transport.AccessRemoteWrite); st != transport.StatusOK {
				c.pushCtl(ctl{typ: tResp, wrid: wrid, status: st})
				return
			}
			_ = imm
			c.pushCtl(ctl{typ: tResp, wrid: wrid})
			return
		}
		if c.rqN == 0 {
			c.pushCtl(ctl{typ: tRNR, wrid: wrid})
			return
		}
		rwr := c.rq[c.rqHead]
		c.rqHead = (c.rqHead + 1) % len(c.rq)
		c.rqN--
		st := c.scatter(&rwr, data)
		c.cfg.Complete(transport.Completion{ID: rwr.ID, Op: transport.OpRecv, Status: st, Bytes: uint32(len(data))})
		if st == transport.StatusLocalLength {
			st = transport.StatusRemoteInvalidRequest
		}
		c.pushCtl(ctl{typ: tResp, wrid: wrid, status: st})
	case tReadReq:
		if len(b) < toyHdr+20 {
			return
		}
		raddr := binary.BigEndian.Uint64(b[toyHdr:])
		rkey := binary.BigEndian.Uint32(b[toyHdr+8:])
		n := binary.BigEndian.Uint32(b[toyHdr+16:])
		m := make([]byte, min(n, 1<<20)) // the toy's READ response is a staging copy
		st := c.cfg.Memory.Read(m, rkey, raddr, transport.AccessRemoteRead)
		if st != transport.StatusOK || int(n) != len(m) {
			m = nil
		}
		c.pushCtl(ctl{typ: tReadResp, wrid: wrid, status: st, data: m})
	case tResp, tReadResp:
		if len(b) < toyHdr+1 {
			return
		}
		wr := c.reads[wrid%64]
		st := transport.Status(b[toyHdr])
		if b[0] == tReadResp && st == transport.StatusOK {
			st = c.scatter(&wr, b[toyHdr+1:])
		}
		c.cfg.Complete(transport.Completion{ID: wr.ID, Op: wr.Op, Status: st, Bytes: uint32(wr.Len())})
	case tRNR:
		// Put the request back at the head and retry after a back-off.
		wr := c.reads[wrid%64]
		c.sqHead = (c.sqHead - 1 + len(c.sq)) % len(c.sq)
		c.sq[c.sqHead] = wr
		c.sqN++
		c.retryAt = now + 10*sim.Microsecond
	}
}

func (c *toyConn) Deadline() sim.Time {
	if c.sqN > 0 && c.retryAt > 0 {
		return c.retryAt
	}
	return sim.Never
}

func (c *toyConn) OnTimer(now sim.Time) {
	if now >= c.retryAt {
		c.retryAt = 0
	}
}

func (c *toyConn) Close(now sim.Time)     { c.state = transport.StateClosed }
func (c *toyConn) State() transport.State { return c.state }
func (c *toyConn) LocalID() uint32        { return c.cfg.LocalID }

// ReportStats reports no figures: the toy keeps none.
func (c *toyConn) ReportStats(s *transport.Stats) { *s = transport.Stats{Paths: s.Paths[:0]} }
