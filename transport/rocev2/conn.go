package rocev2

import (
	"fmt"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/rocev2/ib"
)

// ipUDPOverhead is what the NIC adds in front of a payload (IPv4 and UDP
// headers); pacing counts it because the fabric serializes it.
const ipUDPOverhead = 28

// Conn is one RC queue pair. It is both a requester (it sends the WRITEs,
// SENDs and READs posted on it) and a responder (it places the peer's).
//
// Life cycle:
//
//	Dial:   Connecting --REP received--> Established
//	Accept: Connecting --RTU or first request--> Established
//	Established --Close / DREQ--> Closed
//	any --retry/RNR exceeded, remote or local error--> Error
//
// A Conn is not safe for concurrent use. Complete callbacks run inside the
// Conn's methods after its state is consistent; they must not call back
// into the Conn synchronously.
type Conn struct {
	p    *Protocol
	o    *Options
	cfg  transport.Config
	tr   transport.Tracer
	done func(transport.Completion)

	state   transport.State
	active  bool // the Dial side
	localID uint32
	qpn     uint32
	peerQPN uint32
	port    int
	srcPort uint16
	mtu     int
	tid     uint64
	lastNow sim.Time

	cm   cmState
	req  requester
	resp responder
	rp   rateControl
	// nextSend is when the pacer lets the next data packet out (used only
	// while DCQCN holds the rate below line rate).
	nextSend sim.Time

	stats ConnStats
}

var _ transport.Conn = (*Conn)(nil)

// cmState is the connection-management side of a QP.
type cmState struct {
	send     CMAttr   // message to put out at the next Transmit, or 0
	waiting  CMAttr   // message being retried until answered, or 0
	deadline sim.Time // when waiting is sent again
	retries  int      // retries of waiting left
}

func newConn(p *Protocol, now sim.Time, cfg transport.Config, active bool) (*Conn, error) {
	if cfg.LocalID == 0 || cfg.LocalID > ib.QPNMask-QPNOffset {
		return nil, fmt.Errorf("%w: LocalID %d out of range 1..%d", ErrBadConfig, cfg.LocalID, ib.QPNMask-QPNOffset)
	}
	if cfg.Ports < 1 {
		return nil, fmt.Errorf("%w: Ports %d, want at least 1", ErrBadConfig, cfg.Ports)
	}
	if cfg.PathMTU == 0 {
		cfg.PathMTU = 4096
	}
	if !validMTU(cfg.PathMTU) {
		return nil, fmt.Errorf("%w: PathMTU %d is not an IB MTU (256, 512, 1024, 2048, 4096)", ErrBadConfig, cfg.PathMTU)
	}
	if cfg.Memory == nil {
		return nil, fmt.Errorf("%w: Memory is nil", ErrBadConfig)
	}
	if cfg.LineRate < 0 {
		return nil, fmt.Errorf("%w: LineRate %g is negative", ErrBadConfig, cfg.LineRate)
	}
	o := &p.opts
	c := &Conn{
		p:       p,
		o:       o,
		cfg:     cfg,
		tr:      cfg.Trace,
		done:    cfg.Complete,
		state:   transport.StateConnecting,
		active:  active,
		localID: cfg.LocalID,
		qpn:     cfg.LocalID + QPNOffset,
		mtu:     cfg.PathMTU,
		lastNow: now,
	}
	if c.done == nil {
		c.done = func(transport.Completion) {}
	}
	// A QP lives on one port (plane) for its whole life, as on a real
	// multi-port HCA. Spread QPs over ports at random rather than by QPN:
	// every host's first QP has the same QPN, and QPN mod ports would put
	// a whole cluster's first QPs on one plane. The passive side follows
	// the port its REQ arrived on (see Accept).
	c.port = int(c.qpn % uint32(cfg.Ports))
	if active && cfg.Rand != nil {
		c.port = cfg.Rand.IntN(cfg.Ports)
	}
	if active && cfg.PinPort {
		if cfg.Port < 0 || cfg.Port >= cfg.Ports {
			return nil, fmt.Errorf("%w: Config.Port %d but the NIC has %d ports", ErrBadConfig, cfg.Port, cfg.Ports)
		}
		c.port = cfg.Port
	}
	if o.PinPort {
		if o.Port >= cfg.Ports {
			return nil, fmt.Errorf("%w: Options.Port %d but the NIC has %d ports", ErrBadConfig, o.Port, cfg.Ports)
		}
		c.port = o.Port
	}
	c.srcPort = sourcePort(c.qpn)
	var startPSN uint32
	if cfg.Rand != nil {
		c.tid = cfg.Rand.Uint64()
		startPSN = cfg.Rand.Uint32()
	} else {
		// Deterministic fallback for callers without a random stream.
		c.tid = uint64(c.qpn)*0x9E3779B97F4A7C15 | 1
		startPSN = c.qpn * 0x9E3779B1
	}
	c.req.init(o, ib.PSN(startPSN&ib.PSNMask), c.defaultWindow())
	c.req.conn = c
	c.resp.init(o, c.req.window)
	c.rp.init(cfg.LineRate, &o.DCQCN, !o.NoDCQCN)
	c.stats.Rate = cfg.LineRate
	c.cm.deadline = sim.Never
	if active {
		c.cm.send, c.cm.waiting, c.cm.retries = CMReq, CMReq, o.CMRetries
	}
	return c, nil
}

// defaultWindow is Options.Window or the BDP of the line rate over
// WindowRTT in MTU packets (at least 64).
func (c *Conn) defaultWindow() int {
	if c.o.Window > 0 {
		return c.o.Window
	}
	if c.cfg.LineRate == 0 {
		return 1024
	}
	w := int(c.cfg.LineRate*c.o.WindowRTT.Seconds()/8/float64(c.mtu)) + 1
	return min(max(w, 64), 1<<22)
}

// LocalID returns the NIC's id for this QP (its QPN minus QPNOffset).
func (c *Conn) LocalID() uint32 { return c.localID }

// SetRNRRetry sets the QP's rnr_retry (transport.RNRPolicy): 0..6 RNR
// NAKs in a row before StatusRNRRetryExceeded, 7 forever. Values outside
// 0..7 are ignored. The count starts afresh.
func (c *Conn) SetRNRRetry(retry int) {
	if retry < 0 || retry > 7 {
		return
	}
	c.req.rnrLimit, c.req.rnrRetries = retry, retry
}

// SetMinRNRTimer sets the RNR timer code (IBTA table 45) of this QP's RNR
// NAKs (transport.RNRPolicy); codes above 31 are ignored.
func (c *Conn) SetMinRNRTimer(code uint8) {
	if code <= 31 {
		c.resp.minRNR = code
	}
}

// QPN returns the queue pair number on the wire.
func (c *Conn) QPN() uint32 { return c.qpn }

// StartPSN returns the first PSN this QP sends (perftest prints it).
func (c *Conn) StartPSN() uint32 { return uint32(c.req.startPSN) }

// PeerQPN returns the peer's QPN, or 0 before the CM exchange told it.
func (c *Conn) PeerQPN() uint32 { return c.peerQPN }

// Port returns the NIC port (plane) the QP sends on.
func (c *Conn) Port() int { return c.port }

// SourcePort returns the QP's fixed UDP source port.
func (c *Conn) SourcePort() uint16 { return c.srcPort }

// MTU returns the path MTU in use (negotiated down to the peer's).
func (c *Conn) MTU() int { return c.mtu }

// State reports where the QP is in its life.
func (c *Conn) State() transport.State { return c.state }

// PostSend queues a WRITE, WRITE_IMM, SEND, SEND_IMM or READ. It may be
// called while connecting; requests go out once the QP is established.
func (c *Conn) PostSend(now sim.Time, wr *transport.WorkRequest) error {
	c.lastNow = now
	if c.state == transport.StateClosed || c.state == transport.StateError {
		return transport.ErrClosed
	}
	return c.req.post(c, wr)
}

// PostRecv queues a receive buffer for incoming SENDs and WRITE_IMMs.
func (c *Conn) PostRecv(now sim.Time, wr *transport.WorkRequest) error {
	c.lastNow = now
	if c.state == transport.StateClosed || c.state == transport.StateError {
		return transport.ErrClosed
	}
	return c.resp.post(c, wr)
}

// Receive processes one UDP payload (BTH through ICRC; the NIC has
// checked the ICRC). Malformed or misdirected payloads are counted in
// Stats().Malformed and dropped.
func (c *Conn) Receive(now sim.Time, payload []byte, rx transport.RxMeta) {
	c.lastNow = now
	var pk ib.Packet
	if err := pk.Decode(payload); err != nil {
		c.stats.Malformed++
		return
	}
	c.stats.RxPackets++
	c.stats.RxBytes += uint64(len(payload))
	dst := pk.BTH.DestQP()
	if dst == cmQPN {
		c.receiveCM(now, &pk)
		return
	}
	if dst != c.qpn {
		c.stats.Malformed++
		return
	}
	class := pk.BTH.Opcode().Class()
	if pk.BTH.Opcode() == ib.OpAtomicAcknowledge {
		c.stats.Malformed++ // a response to an atomic we never sent
		return
	}
	if rx.CE && class != ib.ClassCNP {
		c.resp.noteCE(c, now)
	}
	switch c.state {
	case transport.StateEstablished:
	case transport.StateConnecting:
		// A passive QP is ready to receive once it sent its REP; its first
		// request packet stands for a lost RTU.
		if c.active || c.cm.waiting != CMRep || !isRequest(class) {
			c.stats.Dropped++
			return
		}
		c.establish(now, "first request packet (implicit RTU)")
	default:
		c.stats.Dropped++
		return
	}
	switch class {
	case ib.ClassSend, ib.ClassWrite, ib.ClassReadRequest, ib.ClassUnsupported:
		c.resp.receive(c, now, &pk, payload)
	case ib.ClassAck, ib.ClassReadResponse:
		c.req.receive(c, now, &pk)
	case ib.ClassCNP:
		c.stats.CNPsReceived++
		c.rateEvent(now, c.rp.cnp(now), "CNP")
	}
}

func isRequest(c ib.Class) bool {
	return c == ib.ClassSend || c == ib.ClassWrite || c == ib.ClassReadRequest
}

// Transmit writes the next packet for port into b: connection management
// first, then CNPs, then the responder's ACK/NAKs and READ responses, then
// requests. Data (requests and READ responses) is paced at the DCQCN rate
// and marked ECT; control packets are not. The last 4 bytes of every packet
// are the ICRC, left zero for the NIC to seal.
func (c *Conn) Transmit(now sim.Time, port int, b []byte) (int, transport.TxMeta) {
	c.lastNow = now
	if port != c.port {
		return 0, transport.TxMeta{}
	}
	if n, meta := c.transmitCtl(now, b); n > 0 || c.state != transport.StateEstablished {
		return n, meta
	}
	if c.rp.limited && now < c.nextSend {
		return 0, transport.TxMeta{}
	}
	n := c.resp.buildReadResponse(c, now, b)
	if n == 0 {
		n = c.req.build(c, now, b)
	}
	if n == 0 {
		return 0, transport.TxMeta{}
	}
	c.pace(now, n)
	return c.sent(n, transport.TxMeta{SrcPort: c.srcPort, ECT: true})
}

// TransmitControl implements transport.ControlTransmitter: connection
// management, a CNP, or the responder's ACK or NAK, never a request or a
// READ response. An ACK still waits for the READ responses before it
// (they share the PSN space; the responder sends them in order).
func (c *Conn) TransmitControl(now sim.Time, port int, b []byte) (int, transport.TxMeta) {
	c.lastNow = now
	if port != c.port {
		return 0, transport.TxMeta{}
	}
	return c.transmitCtl(now, b)
}

// transmitCtl sends the next control packet, if any.
func (c *Conn) transmitCtl(now sim.Time, b []byte) (int, transport.TxMeta) {
	ctl := transport.TxMeta{SrcPort: c.srcPort}
	if c.cm.send != 0 {
		if n := c.buildCM(now, b); n > 0 {
			return c.sent(n, ctl)
		}
	}
	if c.state != transport.StateEstablished {
		// An errored responder still owes its peer the NAK that says why.
		if c.state == transport.StateError {
			if n := c.resp.buildControl(c, b); n > 0 {
				return c.sent(n, ctl)
			}
		}
		return 0, transport.TxMeta{}
	}
	if c.resp.cnpPending {
		if n := c.buildCNP(b); n > 0 {
			c.resp.cnpPending = false
			c.stats.CNPsSent++
			return c.sent(n, ctl)
		}
	}
	if !c.resp.readsPending() {
		if n := c.resp.buildControl(c, b); n > 0 {
			return c.sent(n, ctl)
		}
	}
	return 0, transport.TxMeta{}
}

func (c *Conn) sent(n int, m transport.TxMeta) (int, transport.TxMeta) {
	c.stats.TxPackets++
	c.stats.TxBytes += uint64(n)
	return n, m
}

// pace accounts an n-byte data packet to the rate controller and the pacer.
func (c *Conn) pace(now sim.Time, n int) {
	if !c.rp.on {
		return
	}
	old := c.rp.rc
	if c.rp.sent(now, n) {
		c.rateEvent(now, old, "byte counter")
	}
	if c.rp.limited {
		if c.nextSend < now {
			c.nextSend = now
		}
		c.nextSend += sim.Time(float64(n+ipUDPOverhead) * 8e9 / c.rp.rc)
	}
}

// rateEvent traces a rate change from old and refreshes the stats.
func (c *Conn) rateEvent(now sim.Time, old float64, why string) {
	if c.rp.rc == old {
		return
	}
	if c.rp.rc < old {
		c.stats.RateCuts++
	}
	c.stats.Rate = c.rp.rc
	if c.tr != nil {
		c.tr.Tracef(now, c.localID, "qp %#x: DCQCN %s: rate %.4g -> %.4g Gb/s (target %.4g, alpha %.3f)",
			c.qpn, why, old/1e9, c.rp.rc/1e9, c.rp.rt/1e9, c.rp.alpha)
	}
}

// Deadline returns the earliest of the ACK timeout, the end of an RNR
// wait, a CM retry, a DCQCN timer and (when data waits only for the pacer)
// the pacer's release time.
func (c *Conn) Deadline() sim.Time {
	d := c.cm.deadline
	if c.state == transport.StateEstablished {
		d = min(d, c.req.deadline())
		if c.rp.limited {
			d = min(d, c.rp.deadline())
			if c.nextSend > c.lastNow && (c.resp.readsPending() || c.req.hasWork()) {
				d = min(d, c.nextSend)
			}
		}
	}
	return d
}

// OnTimer runs whatever is due at now: CM retries, the local ACK timeout,
// the end of an RNR wait and DCQCN's alpha and rate-increase timers.
func (c *Conn) OnTimer(now sim.Time) {
	c.lastNow = now
	if c.cm.waiting != 0 && c.cm.deadline <= now {
		c.cmTimeout(now)
	}
	if c.state != transport.StateEstablished {
		return
	}
	c.req.onTimer(c, now)
	if c.rp.limited {
		old := c.rp.rc
		c.rp.timer(now)
		c.rateEvent(now, old, "timer")
	}
}

// Close flushes every queued request and receive (StatusFlushed), moves
// the QP to Closed and sends a DREQ so the peer closes too.
func (c *Conn) Close(now sim.Time) {
	c.lastNow = now
	if c.state == transport.StateClosed {
		return
	}
	wasUp := c.state == transport.StateEstablished || (c.state == transport.StateConnecting && c.peerQPN != 0)
	c.state = transport.StateClosed
	c.cm.send, c.cm.waiting, c.cm.deadline = 0, 0, sim.Never
	if wasUp {
		c.cm.send, c.cm.waiting, c.cm.retries = CMDReq, CMDReq, c.o.CMRetries
	}
	c.stopTimers()
	c.req.flush(c, transport.StatusFlushed)
	c.resp.flush(c)
	c.p.forget(c)
	if c.tr != nil {
		c.tr.Tracef(now, c.localID, "qp %#x: closed locally", c.qpn)
	}
}

// fail moves the QP to Error: the oldest outstanding request completes with
// status, everything else is flushed. A responder-side NAK that is pending
// still goes out.
func (c *Conn) fail(now sim.Time, status transport.Status, why string) {
	if c.state == transport.StateError || c.state == transport.StateClosed {
		return
	}
	c.state = transport.StateError
	c.cm.send, c.cm.waiting, c.cm.deadline = 0, 0, sim.Never
	c.stopTimers()
	if c.tr != nil {
		c.tr.Tracef(now, c.localID, "qp %#x: error: %s (%v)", c.qpn, why, status)
	}
	c.req.flush(c, status)
	c.resp.flush(c)
}

// Abort implements transport.Aborter: the QP goes to Error at once, sends
// nothing more (no REP retry, no DREQ) and leaves the protocol's table of
// accepted REQs. A NIC aborts a half-open passive QP it evicts.
func (c *Conn) Abort(now sim.Time) {
	c.fail(now, transport.StatusFlushed, "aborted before the handshake completed")
	c.p.forget(c)
}

func (c *Conn) stopTimers() {
	c.req.ackDeadline, c.req.rnrUntil = sim.Never, 0
	c.rp.stop()
}

// Stats returns the QP's counters.
func (c *Conn) Stats() ConnStats {
	s := c.stats
	s.Rate = c.rp.rate()
	s.Alpha = c.rp.alpha
	s.Window = c.req.window
	return s
}
