package metaroce

import (
	"math"
	"math/bits"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/metaroce/wire"
)

// sndState is the sending side of a connection.
//
// Messages get a connection-wide message sequence number (MSN) when they
// are posted and live in a ring indexed by MSN until they complete; they
// are cut into chunks, each with a connection-wide data sequence number
// (DSN) that stays with the chunk whatever path carries it, in a ring
// indexed by DSN. Paths carry chunks under their own PSNs. A stream has no
// state of its own beyond the tail table entry that exists while it has a
// message outstanding.
type sndState struct {
	paths []sndPath

	msgs             []sndMsg // ring by MSN; len is a power of two
	msnNext, msnBase uint32   // [msnBase, msnNext) are posted, not completed
	segNext          uint32   // first MSN that may have chunks left to cut
	tails            []streamTail
	tokens           uint32 // next receive match token

	chunks           []chunk // ring by DSN
	dsnNext, dsnBase uint32  // [dsnBase, dsnNext) are unresolved

	rexmit   []uint32 // DSNs of chunks moved off a path, FIFO from rexHead
	rexHead  int
	rnr      []rnrWait // chunks refused for want of a receive, backing off
	resp     []respJob // READ responses we serve
	respFree []int32
	respQ    []int32 // response jobs with chunks left to cut, FIFO
	respHead int
	fromResp bool // alternate new chunks between messages and responses

	// Paths that need attention, so Transmit does not scan them all:
	// lostSet has the paths with lost PSNs to resend, probeSet those with
	// a probe due.
	lostSet, probeSet [4]uint64
	// Path choice per port: a round-robin cursor, and a memo that nothing
	// of blockedSize bytes fitted at roomEpoch (room only changes when a
	// packet arrives or a timer runs, which bump roomEpoch).
	cursor       []int
	blockedEpoch []uint64
	blockedSize  []int
	roomEpoch    uint64

	// lossSent and lossLost are the connection's packets and losses,
	// halved every lossHalfLife packets: its recent loss rate.
	lossSent, lossLost float64

	inflight int      // payload bytes outstanding on all paths
	unsent   int64    // payload bytes not yet cut into chunks
	hint     float64  // receiver's fair share for us, bytes/s; 0 = none
	nextSend sim.Time // pacing: earliest next data packet
	srtt     sim.Time // connection-wide smoothed RTT (all paths)
	minRTT   sim.Time
	lastRTT  sim.Time // the latest RTT sample (drainRate)
	heard    bool     // an ACK (and its hint, or its lack of one) has arrived
}

// sndMsg is a posted message.
type sndMsg struct {
	wr        transport.WorkRequest
	typ       wire.Type
	imm       bool
	used      bool
	unsent    bool // chunks are left to cut
	failed    bool
	released  bool // completion delivered
	hasWaiter bool
	rnrTries  uint8
	status    transport.Status
	prev      uint16 // MSN distance to the previous open message of the stream
	length    uint32
	nextOff   uint32 // next byte to cut
	respGot   uint32 // READ: response bytes placed
	token     uint32
	waiter    uint32 // next message of the stream, waiting for us to complete
	out       int32  // chunks cut and not yet resolved
	rnrUntil  sim.Time
}

type streamTail struct {
	stream uint16
	msn    uint32 // newest open message of the stream
}

// chunkWhere says where a chunk is.
type chunkWhere uint8

const (
	chunkFree   chunkWhere = iota
	chunkOnPath            // outstanding on (path, gen, psn)
	chunkQueued            // in rexmit, waiting for any path
	chunkRNR               // waiting out an RNR back-off
)

// chunk is one packet's worth of a message or of a READ response.
type chunk struct {
	msn    uint32 // our message, or the peer's READ for a response
	job    int32  // -1: our message; else index into resp
	offset uint32
	psn    uint32
	size   uint16
	path   uint8
	gen    uint8
	tx     uint8 // transmissions
	probes uint8 // of tx, tail-loss probes under heavy loss: not retries
	round  uint8 // the message's RNR round when the chunk was last sent
	where  chunkWhere
	abort  bool // send as ABORT (its message failed)
	status transport.Status
}

type rnrWait struct {
	dsn uint32
	at  sim.Time
}

// respJob is a READ we serve: the responder's half of the peer's READ.
type respJob struct {
	used    bool
	ready   bool // the READ is released in stream order: serve it
	stream  uint16
	nsinks  uint8
	msn     uint32 // the requester's READ
	src     uint64 // our memory
	key     uint32
	length  uint32
	nextOff uint32
	out     int32
	sinks   [wire.MaxSinks]sink
}

type sink struct {
	addr     uint64
	len, key uint32
}

// msg returns the ring slot of a message.
func (c *Conn) msg(msn uint32) *sndMsg { return &c.s.msgs[msn&uint32(len(c.s.msgs)-1)] }

// msgOpen reports whether msn is posted and not yet forgotten.
func (c *Conn) msgOpen(msn uint32) bool { return msn-c.s.msnBase < c.s.msnNext-c.s.msnBase }

func (c *Conn) chunk(dsn uint32) *chunk { return &c.s.chunks[dsn&uint32(len(c.s.chunks)-1)] }

// classify maps a work request's operation to its packet type.
func classify(op transport.Op) (t wire.Type, imm, consumes, ok bool) {
	switch op {
	case transport.OpWrite:
		return wire.TypeWrite, false, false, true
	case transport.OpWriteImm:
		return wire.TypeWrite, true, true, true
	case transport.OpSend:
		return wire.TypeSend, false, true, true
	case transport.OpSendImm:
		return wire.TypeSend, true, true, true
	case transport.OpRead:
		return wire.TypeReadReq, false, false, true
	}
	return 0, false, false, false
}

func (c *Conn) postSend(wr *transport.WorkRequest) error {
	typ, imm, consumes, ok := classify(wr.Op)
	if !ok || wr.NumSGE < 0 || wr.NumSGE > transport.MaxSGE {
		return transport.ErrBadRequest
	}
	length := wr.Len()
	if length > math.MaxUint32 || (typ == wire.TypeReadReq && wr.NumSGE == 0) {
		return transport.ErrBadRequest
	}
	if typ != wire.TypeSend && wr.RemoteAddr > math.MaxUint64-uint64(length) {
		return transport.ErrBadRequest
	}
	if int(c.s.msnNext-c.s.msnBase) >= c.opts.SendQueue {
		return transport.ErrQueueFull
	}
	msn := c.s.msnNext
	if int(msn-c.s.msnBase) >= len(c.s.msgs) {
		c.growMsgs()
	}
	c.s.msnNext++
	m := c.msg(msn)
	*m = sndMsg{wr: *wr, typ: typ, imm: imm, used: true, length: uint32(length)}
	m.prev = c.streamLink(wr.Stream, msn)
	// Local buffers are checked now; a bad one completes the request with
	// a local protection error, in stream order, and nothing is sent.
	access := transport.Access(0)
	if typ == wire.TypeReadReq {
		access = transport.AccessLocalWrite
	}
	for i := 0; i < wr.NumSGE; i++ {
		s := &wr.SGL[i]
		if st := c.cfg.Memory.Check(s.LKey, s.Addr, int(s.Len), access); st != transport.StatusOK {
			m.failed, m.status = true, transport.StatusLocalProtection
			c.releaseSnd(msn)
			return nil
		}
	}
	if consumes {
		m.token = c.s.tokens
		c.s.tokens++
	}
	m.unsent = true
	if typ != wire.TypeReadReq {
		c.s.unsent += int64(length)
	}
	c.st.posted++
	return nil
}

func (c *Conn) growMsgs() {
	old := c.s.msgs
	size := max(2*len(old), 4)
	c.s.msgs = make([]sndMsg, size)
	for msn := c.s.msnBase; msn != c.s.msnNext; msn++ {
		c.s.msgs[msn&uint32(size-1)] = old[msn&uint32(len(old)-1)]
	}
}

// streamLink makes msn the newest open message of its stream and returns
// the MSN distance back to the previous one (0 if the stream had none).
func (c *Conn) streamLink(stream uint16, msn uint32) uint16 {
	for i := range c.s.tails {
		t := &c.s.tails[i]
		if t.stream == stream {
			d := msn - t.msn
			t.msn = msn
			return uint16(d)
		}
	}
	c.s.tails = append(c.s.tails, streamTail{stream: stream, msn: msn})
	return 0
}

// streamUnlink forgets the stream's tail if msn was its newest message.
func (c *Conn) streamUnlink(stream uint16, msn uint32) {
	for i := range c.s.tails {
		if t := &c.s.tails[i]; t.stream == stream {
			if t.msn == msn {
				last := len(c.s.tails) - 1
				c.s.tails[i] = c.s.tails[last]
				c.s.tails = c.s.tails[:last]
			}
			return
		}
	}
}

// sndDone reports whether a message has nothing left to do but complete.
func sndDone(m *sndMsg) bool {
	return !m.unsent && m.out == 0 && (m.failed || m.typ != wire.TypeReadReq || m.respGot == m.length)
}

// releaseSnd completes msn, and the messages of its stream waiting behind
// it, if each is done and its predecessor has completed.
func (c *Conn) releaseSnd(msn uint32) {
	for {
		m := c.msg(msn)
		if !m.used || m.released || !sndDone(m) {
			break
		}
		if m.prev != 0 {
			p := msn - uint32(m.prev)
			if c.msgOpen(p) {
				if pm := c.msg(p); !pm.released {
					pm.waiter, pm.hasWaiter = msn, true
					break
				}
			}
		}
		m.released = true
		wc := transport.Completion{ID: m.wr.ID, Op: m.wr.Op, Status: transport.StatusOK, Stream: m.wr.Stream, Bytes: m.length}
		if m.failed {
			wc.Status, wc.Bytes = m.status, 0
		}
		c.st.completions++
		c.streamUnlink(m.wr.Stream, msn)
		next, more := m.waiter, m.hasWaiter
		c.cfg.Complete(wc) // may post (and grow the ring): m is stale after
		if !more || c.state != transport.StateEstablished && c.state != transport.StateConnecting {
			break
		}
		msn = next
	}
	for c.s.msnBase != c.s.msnNext {
		m := c.msg(c.s.msnBase)
		if !m.released {
			break
		}
		m.used = false
		c.s.msnBase++
	}
}

// failMsg marks a message failed: nothing more of it is cut, and chunks
// still to be sent go out as ABORT.
func (c *Conn) failMsg(msn uint32, status transport.Status) {
	m := c.msg(msn)
	if m.failed {
		return
	}
	m.failed, m.status = true, status
	if m.unsent {
		m.unsent = false
		if m.typ != wire.TypeReadReq {
			c.s.unsent -= int64(m.length - m.nextOff)
		}
	}
}

// chunkFailed reports whether a chunk must go out as ABORT, and why.
func (c *Conn) chunkFailed(ch *chunk) (bool, transport.Status) {
	if ch.abort {
		return true, ch.status
	}
	if ch.job < 0 {
		if m := c.msg(ch.msn); m.failed {
			return true, m.status
		}
	}
	return false, 0
}

// nextChunkSize says what the next new chunk would be without cutting it:
// from a message (job -1, msn) or a READ response (job).
func (c *Conn) nextChunkSize() (job int32, msn uint32, size int, ok bool) {
	if int(c.s.dsnNext-c.s.dsnBase) >= c.dsnWindow {
		return 0, 0, 0, false
	}
	// Skip messages that have nothing left to cut.
	for c.s.segNext != c.s.msnNext {
		if wire.Seq(c.s.segNext).Before(wire.Seq(c.s.msnBase)) {
			c.s.segNext = c.s.msnBase
			continue
		}
		if m := c.msg(c.s.segNext); m.used && m.unsent {
			break
		}
		c.s.segNext++
	}
	haveMsg := c.s.segNext != c.s.msnNext && int(c.s.segNext-c.s.msnBase) < c.msgWindow
	haveResp := c.s.respHead < len(c.s.respQ)
	if haveResp && (!haveMsg || c.s.fromResp) {
		j := c.s.respQ[c.s.respHead]
		r := &c.s.resp[j]
		_, room := r.sinkAt(r.nextOff)
		return j, r.msn, int(min(uint32(c.mss), r.length-r.nextOff, room)), true
	}
	if haveMsg {
		m := c.msg(c.s.segNext)
		if m.typ == wire.TypeReadReq {
			return -1, c.s.segNext, m.wr.NumSGE * wire.SinkSize, true
		}
		return -1, c.s.segNext, int(min(uint32(c.mss), m.length-m.nextOff)), true
	}
	return 0, 0, 0, false
}

// cutChunk commits the chunk nextChunkSize described and returns its DSN.
func (c *Conn) cutChunk(job int32, msn uint32, size int) uint32 {
	dsn := c.s.dsnNext
	if int(dsn-c.s.dsnBase) >= len(c.s.chunks) {
		c.growChunks()
	}
	c.s.dsnNext++
	ch := c.chunk(dsn)
	*ch = chunk{msn: msn, job: job, size: uint16(size)}
	if job < 0 {
		m := c.msg(msn)
		ch.offset = m.nextOff
		m.out++
		if m.typ == wire.TypeReadReq {
			m.nextOff = m.length
		} else {
			m.nextOff += uint32(size)
			c.s.unsent -= int64(size)
		}
		if m.nextOff >= m.length {
			m.unsent = false
		}
		c.s.fromResp = true
		return dsn
	}
	r := &c.s.resp[job]
	ch.offset = r.nextOff
	r.out++
	r.nextOff += uint32(size)
	c.s.unsent -= int64(size)
	if r.nextOff >= r.length {
		c.s.respHead++
		if c.s.respHead == len(c.s.respQ) {
			c.s.respQ, c.s.respHead = c.s.respQ[:0], 0
		}
	}
	c.s.fromResp = false
	return dsn
}

func (c *Conn) growChunks() {
	old := c.s.chunks
	size := max(2*len(old), 16)
	c.s.chunks = make([]chunk, size)
	for dsn := c.s.dsnBase; dsn != c.s.dsnNext; dsn++ {
		c.s.chunks[dsn&uint32(size-1)] = old[dsn&uint32(len(old)-1)]
	}
}

// chunkResolved is called when a chunk's PSN is acknowledged (as data or
// as ABORT): the chunk is done with.
func (c *Conn) chunkResolved(dsn uint32) {
	ch := c.chunk(dsn)

	job, msn := ch.job, ch.msn
	ch.where = chunkFree
	for c.s.dsnBase != c.s.dsnNext && c.chunk(c.s.dsnBase).where == chunkFree {
		c.s.dsnBase++
	}
	if job < 0 {
		c.msg(msn).out--
		c.releaseSnd(msn)
		return
	}
	r := &c.s.resp[job]
	r.out--
	if r.nextOff >= r.length && r.out == 0 {
		*r = respJob{}
		c.s.respFree = append(c.s.respFree, job)
	}
}

// sinkAt returns where response byte off goes: the sink entry's address
// and key, and how many bytes are left in that entry.
func (r *respJob) sinkAt(off uint32) (s sink, room uint32) {
	for i := 0; i < int(r.nsinks); i++ {
		e := r.sinks[i]
		if off < e.len {
			return sink{addr: e.addr + uint64(off), key: e.key}, e.len - off
		}
		off -= e.len
	}
	return sink{}, 0
}

// newRespJob records a READ we will serve once it is released in order.
func (c *Conn) newRespJob(d wire.Data, sinks wire.Sinks) int32 {
	var j int32
	if n := len(c.s.respFree); n > 0 {
		j = c.s.respFree[n-1]
		c.s.respFree = c.s.respFree[:n-1]
	} else {
		c.s.resp = append(c.s.resp, respJob{})
		j = int32(len(c.s.resp) - 1)
	}
	r := &c.s.resp[j]
	*r = respJob{used: true, stream: d.Stream(), msn: d.MSN(), src: d.Addr(), key: d.Key(), length: d.MsgLen(),
		nsinks: uint8(sinks.Len())}
	for i := 0; i < sinks.Len(); i++ {
		a, n, k := sinks.At(i)
		r.sinks[i] = sink{addr: a, len: n, key: k}
	}
	return j
}

// startResp queues a released READ for serving.
func (c *Conn) startResp(j int32) {
	r := &c.s.resp[j]
	r.ready = true
	c.s.unsent += int64(r.length)
	c.s.respQ = append(c.s.respQ, j)
}

// transmitData sends one data packet on port if pacing and windows allow:
// a lost PSN again on its path, else a chunk moved off a failed path, else
// a new chunk.
func (c *Conn) transmitData(port int, b []byte) (int, transport.TxMeta) {
	if c.now < c.s.nextSend {
		c.timers.Arm(&c.paceTimer, c.s.nextSend)
		return 0, transport.TxMeta{}
	}
	for w, word := range c.s.lostSet {
		for word != 0 {
			i := 64*w + bits.TrailingZeros64(word)
			word &= word - 1
			p := &c.s.paths[i]
			if p.plane(c.cfg.Ports) != port || p.state != PathActive && p.state != PathDraining {
				continue
			}
			if n := c.resendLost(p, b); n > 0 {
				return c.dataSent(n, p)
			}
		}
	}
	if c.s.rexHead < len(c.s.rexmit) {
		dsn := c.s.rexmit[c.s.rexHead]
		ch := c.chunk(dsn)
		size := int(ch.size)
		if f, _ := c.chunkFailed(ch); f {
			size = 0
		}
		if p := c.pickPath(port, size); p != nil {
			c.s.rexHead++
			if c.s.rexHead == len(c.s.rexmit) {
				c.s.rexmit, c.s.rexHead = c.s.rexmit[:0], 0
			}
			c.st.retransmits++
			return c.dataSent(c.sendChunk(p, dsn, b), p)
		}
	}
	if job, msn, size, ok := c.nextChunkSize(); ok {
		if p := c.pickPath(port, size); p != nil {
			dsn := c.cutChunk(job, msn, size)
			return c.dataSent(c.sendChunk(p, dsn, b), p)
		}
	}
	return 0, transport.TxMeta{}
}

// dataSent finishes a data transmission: pacing and the packet's framing.
func (c *Conn) dataSent(n int, p *sndPath) (int, transport.TxMeta) {
	if n == 0 || c.state != transport.StateEstablished {
		return 0, transport.TxMeta{}
	}
	c.pace(n)
	c.armPath(p)
	return n, transport.TxMeta{SrcPort: p.entropy, ECT: true}
}

// pickPath chooses, round robin among the active paths of port's plane,
// one with congestion-window room for a size-byte chunk; it returns nil if
// none has room or the connection-wide in-flight cap is reached.
func (c *Conn) pickPath(port, size int) *sndPath {
	if size > 0 && c.s.inflight > 0 && c.s.inflight+size > c.inflightCap() {
		return nil
	}
	if c.s.blockedEpoch[port] == c.s.roomEpoch && size >= c.s.blockedSize[port] {
		return nil // nothing has changed since nothing fitted
	}
	ports := c.cfg.Ports
	n := (len(c.s.paths) - port + ports - 1) / ports // paths on this plane
	k := c.s.cursor[port]
	for tries := 0; tries < n; tries++ {
		if k >= n {
			k = 0
		}
		p := &c.s.paths[port+k*ports]
		k++
		if p.state != PathActive || !p.room() {
			continue
		}
		if size > 0 && p.inflight > 0 && p.cwnd-p.inflight < size {
			continue
		}
		c.s.cursor[port] = k
		return p
	}
	c.s.blockedEpoch[port], c.s.blockedSize[port] = c.s.roomEpoch, size
	return nil
}

// flagPath records whether p has lost PSNs to resend or a probe due.
func (c *Conn) flagPath(p *sndPath) {
	w, m := p.id/64, uint64(1)<<(p.id%64)
	if p.lost > 0 {
		c.s.lostSet[w] |= m
	} else {
		c.s.lostSet[w] &^= m
	}
	if p.probeWant {
		c.s.probeSet[w] |= m
	} else {
		c.s.probeSet[w] &^= m
	}
}

// sendChunk sends chunk dsn on path p under a new PSN.
func (c *Conn) sendChunk(p *sndPath, dsn uint32, b []byte) int {
	ch := c.chunk(dsn)
	e := sbEntry{dsn: dsn, size: ch.size, kind: sbData}
	if f, st := c.chunkFailed(ch); f {
		ch.abort, ch.status = true, st
		e.kind, e.size = sbAbort, 0
	}
	p.txSeq++
	e.txSeq = p.txSeq
	if p.una == p.nxt {
		p.rtoBase = c.now
	}
	psn := p.push(e)
	ch.where, ch.path, ch.gen, ch.psn = chunkOnPath, p.id, p.gen, psn
	ch.tx++
	if ch.job < 0 {
		ch.round = c.msg(ch.msn).rnrTries
	}
	n := c.encodeChunk(b, p, psn, dsn, ch.tx > 1)
	se := p.entry(psn)
	if ch.abort && se.kind == sbData { // gathering the payload failed
		se.kind, se.size = sbAbort, 0
	}
	p.inflight += int(se.size)
	c.s.inflight += int(se.size)
	p.tlpBase, p.tlpSent = c.now, false
	p.st.packets++
	p.st.bytes += uint64(n)
	c.st.dataPackets++
	if c.s.lossSent++; c.s.lossSent > lossHalfLife {
		c.s.lossSent /= 2
		c.s.lossLost /= 2
	}
	if ch.tx > 1 {
		p.st.retransmits++
	}
	if c.retries(ch) > c.opts.MaxRetries {
		c.giveUp(ch)
	}
	return n
}

// retries is how many times ch has been sent for lack of an answer, the
// count MaxRetries bounds. A tail-loss probe under heavy random loss does
// not count: it re-sends the newest chunk of a path whose ACK is late,
// which at a third of packets lost each way is mostly a lost ACK; in a
// 10% per-link loss trial one chunk, probed on path after path, used up
// its 16 sends in 260us and failed a healthy connection. A dead peer is
// still caught: its paths time out and fail (AllFailedTimeout).
func (c *Conn) retries(ch *chunk) int {
	if ch.tx == math.MaxUint8 {
		return math.MaxUint8 // the count would wrap: give up
	}
	return int(ch.tx) - int(ch.probes)
}

// resendLost sends the first lost PSN of p again, under the same PSN.
func (c *Conn) resendLost(p *sndPath, b []byte) int {
	for psn := p.una; psn != p.nxt; psn++ {
		e := p.entry(psn)
		if !e.lost || e.acked {
			continue
		}
		e.lost, e.resent = false, true
		p.lost--
		c.flagPath(p)
		p.txSeq++
		e.txSeq = p.txSeq
		var n int
		switch e.kind {
		case sbProbe:
			n = c.encodeProbe(b, p, psn, true)
		default:
			ch := c.chunk(e.dsn)
			if f, st := c.chunkFailed(ch); f {
				ch.abort, ch.status = true, st
				e.kind, e.size = sbAbort, 0
			}
			ch.tx++
			n = c.encodeChunk(b, p, psn, e.dsn, true)
			if ch.abort && e.kind == sbData {
				e.kind, e.size = sbAbort, 0
			}
			if c.retries(ch) > c.opts.MaxRetries {
				c.giveUp(ch)
			}
		}
		p.inflight += int(e.size)
		c.s.inflight += int(e.size)
		p.tlpBase = c.now
		p.st.packets++
		p.st.bytes += uint64(n)
		p.st.retransmits++
		c.st.retransmits++
		if c.cfg.Trace != nil {
			c.tracef("path %d: retransmit psn %d (dsn %d)", p.id, psn, e.dsn)
		}
		return n
	}
	p.lost = 0 // nothing was actually lost: resynchronize
	c.flagPath(p)
	return 0
}

// giveUp fails the connection when a chunk has been sent MaxRetries times.
func (c *Conn) giveUp(ch *chunk) {
	if ch.job < 0 {
		c.fail(transport.StatusRetryExceeded, ch.msn, true)
	} else {
		c.fail(transport.StatusRetryExceeded, 0, false)
	}
}

// encodeChunk writes a data packet for chunk dsn on (p, psn) into b.
func (c *Conn) encodeChunk(b []byte, p *sndPath, psn, dsn uint32, retx bool) int {
	ch := c.chunk(dsn)
	f := wire.DataFields{
		Common:  wire.Common{Path: p.id, Gen: p.gen, DstConn: c.peer, PSN: psn, TS: c.ts()},
		MSNBase: c.s.msnBase,
		DSN:     dsn,
		Offset:  ch.offset,
		Demand:  c.demandKBs(int(ch.size)),
	}
	if retx {
		f.Flags |= wire.FlagRetx
	}
	payload := b[wire.DataSize : wire.DataSize+int(ch.size)]
	n := 0
	ok := true
	if ch.job < 0 {
		m := c.msg(ch.msn)
		f.Type, f.Stream, f.StreamPrev, f.MSN, f.MsgLen = m.typ, m.wr.Stream, m.prev, ch.msn, m.length
		switch m.typ {
		case wire.TypeWrite:
			f.Addr, f.Key = m.wr.RemoteAddr+uint64(ch.offset), m.wr.RKey
			if m.imm {
				f.Token = m.token
			}
		case wire.TypeSend:
			f.Token = m.token
		case wire.TypeReadReq:
			f.Addr, f.Key = m.wr.RemoteAddr, m.wr.RKey
			f.Flags |= wire.FlagFirst | wire.FlagLast
		}
		if m.imm {
			f.Flags |= wire.FlagImm
			f.Imm = m.wr.Imm
		}
		if !ch.abort {
			if m.typ == wire.TypeReadReq {
				for i := 0; i < m.wr.NumSGE; i++ {
					s := &m.wr.SGL[i]
					wire.PutSink(payload, i, s.Addr, s.Len, s.LKey)
				}
				n = len(payload)
			} else if n, ok = c.gather(m, ch.offset, payload); !ok {
				c.failMsg(ch.msn, transport.StatusLocalProtection)
			}
		}
	} else {
		r := &c.s.resp[ch.job]
		f.Type, f.Stream, f.MSN, f.MsgLen = wire.TypeReadResp, r.stream, r.msn, r.length
		s, _ := r.sinkAt(ch.offset)
		f.Addr, f.Key = s.addr, s.key
		if !ch.abort {
			k := min(len(payload), int(ch.size))
			if st := c.cfg.Memory.Read(payload[:k], r.key, r.src+uint64(ch.offset), transport.AccessRemoteRead); st != transport.StatusOK {
				ok = false
				ch.status = transport.StatusRemoteAccess
			} else {
				n = k
			}
		}
	}
	if !ok {
		ch.abort = true
		if ch.status == 0 {
			ch.status = transport.StatusLocalProtection
		}
		n = 0
	}
	if f.Type != wire.TypeReadReq {
		if ch.offset == 0 {
			f.Flags |= wire.FlagFirst
		}
		if ch.offset+uint32(ch.size) >= f.MsgLen {
			f.Flags |= wire.FlagLast
		}
	}
	if f.Flags&wire.FlagLast != 0 {
		f.Flags |= wire.FlagAckReq // the message completes on this ACK: do not delay it
	}
	if ch.abort {
		f.Flags |= wire.FlagAbort
		f.Imm = uint32(ch.status)
		n = 0
	}
	wire.Data(b).Put(&f)
	return wire.Seal(b, wire.DataSize+n)
}

// gather copies a message's bytes from off into dst through its
// scatter-gather list.
func (c *Conn) gather(m *sndMsg, off uint32, dst []byte) (int, bool) {
	n := 0
	for i := 0; i < m.wr.NumSGE && n < len(dst); i++ {
		s := &m.wr.SGL[i]
		if off >= s.Len {
			off -= s.Len
			continue
		}
		k := min(int(s.Len-off), len(dst)-n)
		if st := c.cfg.Memory.Read(dst[n:n+k], s.LKey, s.Addr+uint64(off), 0); st != transport.StatusOK {
			return 0, false
		}
		n += k
		off = 0
	}
	return n, n == len(dst)
}

// encodeProbe writes a PROBE for (p, psn).
func (c *Conn) encodeProbe(b []byte, p *sndPath, psn uint32, retx bool) int {
	f := wire.Common{Type: wire.TypeProbe, Flags: wire.FlagAckReq, Path: p.id, Gen: p.gen, DstConn: c.peer, PSN: psn, TS: c.ts()}
	if retx {
		f.Flags |= wire.FlagRetx
	}
	wire.Header(b).Put(&f)
	return wire.Seal(b, wire.CommonSize)
}

// transmitProbe sends a due probe (tail-loss probe, or a probe of a
// probing or failed path) on port's plane.
func (c *Conn) transmitProbe(port int, b []byte) (int, transport.TxMeta) {
	for w, word := range c.s.probeSet {
		for word != 0 {
			i := 64*w + bits.TrailingZeros64(word)
			word &= word - 1
			if p := &c.s.paths[i]; p.plane(c.cfg.Ports) == port && p.room() {
				return c.sendProbe(p, b)
			}
		}
	}
	return 0, transport.TxMeta{}
}

// sendProbe sends p's due probe under a new PSN. Under heavy random loss
// a tail-loss probe of a path carrying data is the path's newest
// outstanding chunk, sent again (tailLossProbe); otherwise a bare probe,
// which costs nothing when the ACK was only late (a queue), as it mostly
// is when loss is rare.
func (c *Conn) sendProbe(p *sndPath, b []byte) (int, transport.TxMeta) {
	if p.tlpSent && (p.state == PathActive || p.state == PathDraining) && c.lossRate() > randomLossRate {
		if n := c.tailLossProbe(p, b); n > 0 {
			p.tlps++
			p.tlpSentAt = c.now
			p.probeWant = false
			c.flagPath(p)
			p.st.probes++
			c.armPath(p)
			return n, transport.TxMeta{SrcPort: p.entropy, ECT: true}
		}
	}
	{
		p.probeWant = false
		c.flagPath(p)
		p.txSeq++
		if p.una == p.nxt {
			p.rtoBase = c.now
		}
		psn := p.push(sbEntry{kind: sbProbe, txSeq: p.txSeq})
		n := c.encodeProbe(b, p, psn, false)
		p.tlpBase = c.now
		p.st.probes++
		p.st.packets++
		p.st.bytes += uint64(n)
		c.armPath(p)
		return n, transport.TxMeta{SrcPort: p.entropy, ECT: true}
	}
}

// tailLossProbe sends p's newest outstanding chunk again under a new PSN,
// as RFC 8985's probe does with the last segment, and returns the packet's
// size (0 if p has no chunk outstanding). Its ACK reports the holes before
// it, as a bare probe's would, and if the chunk itself was the loss it
// is already resent: one round trip instead of two, which is most of a
// tail's recovery when each path has a packet or two in flight (heavy
// loss). The chunk's old PSN becomes a filler (no payload, like an RNR
// refusal's), so that if it turns out lost only the hole is closed; the
// receiver places the chunk once whichever copy arrives (the DSN window).
func (c *Conn) tailLossProbe(p *sndPath, b []byte) int {
	for psn := p.nxt - 1; psn-p.una < p.nxt-p.una; psn-- {
		e := p.entry(psn)
		if e.acked || e.lost || e.kind != sbData {
			continue
		}
		ch := c.chunk(e.dsn)
		if ch.where != chunkOnPath || ch.path != p.id || ch.gen != p.gen || ch.psn != psn {
			continue
		}
		p.inflight -= int(e.size)
		c.s.inflight -= int(e.size)
		e.kind, e.size = sbProbe, 0
		c.st.retransmits++
		if c.cfg.Trace != nil {
			c.tracef("path %d: tail-loss probe resends dsn %d (psn %d)", p.id, e.dsn, psn)
		}
		if ch.probes < 255 {
			ch.probes++
		}
		return c.sendChunk(p, e.dsn, b)
	}
	return 0
}

// onAck processes one path's ACK: settle what it covers, take an RTT
// sample, run congestion control, detect losses (a hole below a PSN that
// was sent later and has arrived), and note the rate hint.
func (c *Conn) onAck(a wire.Ack) {
	c.st.acksReceived++
	if int(a.Path()) >= len(c.s.paths) {
		c.st.dropMalformed++
		return
	}
	p := &c.s.paths[a.Path()]
	if a.Gen() != p.gen {
		c.st.staleAcks++
		return
	}
	cum := a.PSN()
	// cum is in [una, nxt], or a little before una (an older ACK overtaken
	// by a newer one); anything else is not an ACK of this path.
	if cum-p.una > p.nxt-p.una && p.una-cum > 4*maxPathWindow {
		c.st.dropMalformed++
		return
	}
	c.noteHint(a.RateHint())
	pkts, bytes := 0, 0
	// Only an ACK whose cum is in [una, nxt] acknowledges cumulatively; an
	// older one, overtaken by a newer, carries nothing cumulative we lack.
	for psn := p.una; cum-p.una <= p.nxt-p.una && psn != cum; psn++ {
		k, n := c.ackEntry(p, psn)
		pkts += k
		bytes += n
	}
	for w := 0; w < 4; w++ {
		word := a.SACKWord(w)
		for word != 0 {
			i := bits.LeadingZeros64(word)
			word &^= 1 << (63 - i)
			psn := cum + 1 + uint32(64*w+i)
			if !p.outstanding(psn) {
				continue
			}
			k, n := c.ackEntry(p, psn)
			pkts += k
			bytes += n
		}
	}
	if c.state != transport.StateEstablished {
		return // a completion callback closed us
	}
	for p.una != p.nxt && p.entry(p.una).acked {
		p.una++
	}
	if pkts > 0 {
		// The path delivers: restart its timers (RFC 8985 re-arms the RTO
		// on every ACK that acknowledges something new, SACKed or not).
		p.rtoBase, p.tlpBase, p.tlpSent, p.tlps = c.now, c.now, false, 0
		if p.timeouts > 0 || p.state != PathActive && p.state != PathDraining {
			c.pathRecovered(p)
		}
		p.timeouts = 0
	}
	if pkts > 0 {
		c.rttSample(p, sim.Time(c.ts()-a.EchoTS()))
	}
	dce := int(int16(a.CECount() - p.lastCE))
	if dce > 0 {
		p.lastCE = a.CECount()
	} else {
		dce = 0
	}
	c.ccOnAck(p, pkts, bytes, dce)
	if pkts > 0 {
		c.detectLoss(p)
	}
	if p.state == PathDraining && p.una == p.nxt {
		c.repath(p, whyMarks, false)
		p.state = PathActive
	}
	c.armPath(p)
}

// ackEntry settles one PSN; it returns the packets and payload bytes it
// newly acknowledged.
func (c *Conn) ackEntry(p *sndPath, psn uint32) (int, int) {
	e := p.entry(psn)
	if e.acked {
		return 0, 0
	}
	e.acked = true
	if e.lost {
		e.lost = false
		p.lost-- // it arrived after all
		c.flagPath(p)
	} else {
		p.inflight -= int(e.size)
		c.s.inflight -= int(e.size)
	}
	// Karn: an ACK of a PSN sent twice does not say which copy arrived (a
	// late original would make everything sent before the copy look
	// lost), so only PSNs sent once advance the loss-detection clock.
	if !e.resent && wire.Seq(e.txSeq).After(wire.Seq(p.maxAckedTx)) {
		p.maxAckedTx = e.txSeq
	}
	if e.kind != sbProbe {
		ch := c.chunk(e.dsn)
		if ch.where == chunkOnPath && ch.path == p.id && ch.gen == p.gen && ch.psn == psn {
			c.chunkResolved(e.dsn)
		}
	}
	return 1, int(e.size)
}

// detectLoss declares lost every outstanding PSN sent before the latest
// transmission known to have arrived: paths are FIFO, so it is a loss, not
// reordering.
func (c *Conn) detectLoss(p *sndPath) {
	newLosses := 0
	for psn := p.una; psn != p.nxt; psn++ {
		e := p.entry(psn)
		if e.acked || e.lost || !wire.Seq(e.txSeq).Before(wire.Seq(p.maxAckedTx)) {
			continue
		}
		c.markLost(p, e)
		newLosses++
		if c.cfg.Trace != nil {
			c.tracef("path %d: SACK hole psn %d, retransmit", p.id, psn)
		}
	}
	if newLosses == 0 {
		return
	}
	if p.nxt-p.lossBase > uint32(c.opts.LossWindow) {
		p.lossBase, p.losses = p.nxt, 0
	}
	p.losses += newLosses
	c.s.lossLost += float64(newLosses)
	// Repath only a path that loses clearly more than the connection as a
	// whole: under loss spread evenly over every route, moving cannot
	// help and would only re-send what the path has in flight.
	if p.losses >= c.opts.LossesBeforeRepath && p.state == PathActive && c.otherActivePath(p) {
		window := float64(min(int(p.nxt-p.lossBase), c.opts.LossWindow))
		if float64(p.losses)/max(window, 1) > 2*c.s.lossLost/max(c.s.lossSent, 1) {
			c.repath(p, whyLosses, true)
		}
	}
}

// lossHalfLife is how many packets the connection's loss rate averages
// over (roughly).
const lossHalfLife = 4096

// markLost takes an entry out of flight and queues it to be sent again.
func (c *Conn) markLost(p *sndPath, e *sbEntry) {
	e.lost = true
	p.lost++
	c.flagPath(p)
	p.inflight -= int(e.size)
	c.s.inflight -= int(e.size)
	p.st.losses++
	c.st.losses++
}

// otherActivePath reports whether some path besides p can carry data.
func (c *Conn) otherActivePath(p *sndPath) bool {
	for i := range c.s.paths {
		if q := &c.s.paths[i]; q != p && q.state == PathActive {
			return true
		}
	}
	return false
}

// onNak handles a refused chunk. An RNR turns the PSN into a filler (a
// probe under the same PSN, so the path's hole closes) and parks the chunk
// for a back-off; a protection or invalid-request NAK fails the message
// and resends the PSN as ABORT, which tells the receiver the sender has
// seen the error.
func (c *Conn) onNak(n wire.Nak) {
	c.st.naksReceived++
	if int(n.Path()) >= len(c.s.paths) {
		c.st.dropMalformed++
		return
	}
	p := &c.s.paths[n.Path()]
	psn := n.PSN()
	if n.Gen() != p.gen || !p.outstanding(psn) {
		c.st.staleAcks++
		return
	}
	e := p.entry(psn)
	if e.acked || e.kind == sbProbe || e.dsn != n.DSN() || e.kind == sbAbort && n.Reason() != wire.NakRNR {
		c.st.staleAcks++
		return
	}
	ch := c.chunk(e.dsn)
	if ch.job >= 0 || ch.msn != n.MSN() || ch.where != chunkOnPath {
		c.st.dropMalformed++
		return
	}
	if !e.lost {
		p.inflight -= int(e.size)
		c.s.inflight -= int(e.size)
		e.lost = true
		p.lost++
		c.flagPath(p)
	}
	m := c.msg(ch.msn)
	switch n.Reason() {
	case wire.NakRNR:
		c.st.rnrNaks++
		e.kind, e.size = sbProbe, 0
		// Every chunk of a message sent in one round comes back refused;
		// only the first refusal of a round starts a new back-off.
		if ch.round == m.rnrTries {
			m.rnrTries++
			if c.opts.RNRRetries >= 0 && int(m.rnrTries) > c.opts.RNRRetries {
				if c.cfg.Trace != nil {
					c.tracef("RNR msn %d: retries exceeded", ch.msn)
				}
				c.fail(transport.StatusRNRRetryExceeded, ch.msn, true)
				return
			}
			back := c.opts.RNRDelay << min(int(m.rnrTries)-1, 16)
			m.rnrUntil = c.now + min(back, c.opts.RTOMax)
			if c.cfg.Trace != nil {
				c.tracef("RNR msn %d stream %d: receiver has no buffer, retry %d in %v", ch.msn, m.wr.Stream, m.rnrTries, m.rnrUntil-c.now)
			}
		}
		ch.where = chunkRNR
		c.s.rnr = append(c.s.rnr, rnrWait{dsn: e.dsn, at: m.rnrUntil})
		if !c.rnrTimer.Armed() || c.rnrTimer.When() > m.rnrUntil {
			c.timers.Arm(&c.rnrTimer, m.rnrUntil)
		}
	default:
		status := transport.StatusRemoteAccess
		if n.Reason() == wire.NakInvalid {
			status = transport.StatusRemoteInvalidRequest
		}
		c.st.protectionNaks++
		if c.cfg.Trace != nil && !m.failed {
			c.tracef("NAK msn %d stream %d: %v, failing the request", ch.msn, m.wr.Stream, n.Reason())
		}
		c.failMsg(ch.msn, status)
		ch.abort, ch.status = true, status
		e.kind, e.size = sbAbort, 0
	}
	c.armPath(p)
}

// onRNRTimer moves chunks whose back-off has ended to the retransmit queue.
func (c *Conn) onRNRTimer() {
	next := sim.Never
	k := 0
	for _, w := range c.s.rnr {
		if w.at <= c.now {
			if ch := c.chunk(w.dsn); ch.where == chunkRNR {
				ch.where = chunkQueued
				c.s.rexmit = append(c.s.rexmit, w.dsn)
			}
			continue
		}
		next = min(next, w.at)
		c.s.rnr[k] = w
		k++
	}
	c.s.rnr = c.s.rnr[:k]
	if next != sim.Never {
		c.timers.Arm(&c.rnrTimer, next)
	}
}

// flushSender completes every open message: cause with status, the failed
// with their own status, the rest with StatusFlushed, in MSN order (which
// is post order, so stream order holds).
func (c *Conn) flushSender(status transport.Status, cause uint32, hasCause bool) {
	for msn := c.s.msnBase; msn != c.s.msnNext; msn++ {
		m := c.msg(msn)
		if !m.used || m.released {
			continue
		}
		m.released = true
		st := transport.StatusFlushed
		switch {
		case hasCause && msn == cause:
			st = status
		case m.failed:
			st = m.status
		}
		c.st.completions++
		c.cfg.Complete(transport.Completion{ID: m.wr.ID, Op: m.wr.Op, Status: st, Stream: m.wr.Stream})
	}
	c.s.msnBase, c.s.segNext = c.s.msnNext, c.s.msnNext
	c.s.tails = c.s.tails[:0]
	c.s.dsnBase = c.s.dsnNext
	clear(c.s.chunks)
	c.s.rexmit, c.s.rexHead, c.s.rnr = c.s.rexmit[:0], 0, c.s.rnr[:0]
	c.s.respQ, c.s.respHead = c.s.respQ[:0], 0
	c.s.inflight, c.s.unsent = 0, 0
	for i := range c.s.paths {
		p := &c.s.paths[i]
		p.una, p.inflight, p.lost, p.probeWant = p.nxt, 0, 0, false
	}
	c.s.lostSet, c.s.probeSet = [4]uint64{}, [4]uint64{}
}
