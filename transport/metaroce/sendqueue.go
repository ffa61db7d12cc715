package metaroce

import (
	"math"

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
	// paths are the sending paths, allocated on first use (ensurePaths):
	// until then an end (a WRITE's target, which never sends data) holds
	// only the entropies drawn for them when it was built, in
	// Protocol.entropy0.
	paths []sndPath

	msgs             []sndMsg // ring by MSN; len is a power of two
	msnNext, msnBase uint32   // [msnBase, msnNext) are posted, not completed
	segNext          uint32   // first MSN that may have chunks left to cut
	tokens           uint32   // next receive match token
	tails            []streamTail

	chunks           []chunk // ring by DSN
	dsnNext, dsnBase uint32  // [dsnBase, dsnNext) are unresolved

	rexmit   []uint32  // DSNs of chunks moved off a path, FIFO from rexHead
	rnr      []rnrWait // chunks refused for want of a receive, backing off
	resp     []respJob // READ responses we serve
	respFree []int32
	respQ    []int32 // response jobs with chunks left to cut, FIFO
	// rexHead and respHead are the FIFOs' heads; int32 keeps Conn in its
	// size class (TestConnSize).
	rexHead, respHead int32

	// Paths that need attention, so Transmit does not scan them all:
	// lostSet has the paths with lost PSNs to resend, probeSet those with
	// a probe due.
	lostSet, probeSet [4]uint64
	// Path choice per port (transmit.go) and the paths the per-ACK loops
	// visit (pathsel.go); room only changes when a packet arrives or a
	// timer runs, which bump roomEpoch. A pointer keeps Conn in its size
	// class (TestConnSize).
	sel       *pathSel
	roomEpoch uint64

	// lossSent and lossLost are the connection's data packets and SACK
	// losses, halved every lossHalfLife packets: its recent loss rate.
	lossSent, lossLost float64

	inflight int     // payload bytes outstanding on all paths, not lost
	unsent   int64   // payload bytes not yet cut into chunks
	hint     float64 // receiver's fair share for us, bytes/s; 0 = none
	// lastProgress is the latest ACK that acknowledged something new,
	// on any path.
	lastProgress sim.Time
	pacer        pacer // spaces data packets at R (pacer.go)

	// The controller (cc.go): DCTCP's window as a fraction of the
	// reference rate (m) and its alpha over all paths, the current round's
	// counts, and the earliest next cut.
	dctcp
	// Path shares (shares.go): the usable paths' total weight (in
	// sixteenths) and the window in whole packets they were apportioned,
	// recomputed when sharesDirty or the window's packets change; the
	// largest weight.
	weightSum, sharePkts int32
	weightTop            float64

	// RTT (rtt.go): smoothed and variation over all paths, the latest
	// sample, the minimum (the base RTT).
	rttEstimator

	// lossBase is the typical path's loss rate, computed at baseAt when
	// the connection's loss rate was baseQ (path.go; float32s keep Conn
	// in its size class, TestConnSize).
	lossBase, baseQ float32
	baseAt          sim.Time

	// rack is the latest-sent packet known to have arrived (lossdetect.go).
	rack rackState
	// usable is how many paths take new data (with the path shares).
	usable int32

	// bad holds recently bad entropies, a ring (path.go).
	bad     [badEntropies]uint16
	badNext uint8

	fromResp    bool     // alternate new chunks between messages and responses
	heard       bool     // an ACK (and its hint, or its lack of one) has arrived
	peerBusy    bool     // the latest ACK said the receiver answers marks itself
	sharesDirty bool     // the path shares need recomputing
	reo         reoAdapt // the reordering window's scale (lossdetect.go)
	// perPlane is how many paths of each plane take new data, as last
	// computed (activePerPlane, path.go); 0 before the first.
	perPlane uint16
}

// portPick is path choice on one port: a round-robin cursor, the packets
// the cursor's path has taken in its current run, a memo that nothing
// of blockedSize bytes fitted at blockedEpoch, and cand, the plane's
// paths that may take new data (pathsel.go).
type portPick struct {
	blockedEpoch uint64
	cursor, run  int32
	blockedSize  int32
	cand         pathSet
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
	tx     uint8 // transmissions (saturating)
	losses uint8 // times declared lost by a SACK (saturating); maxRetries bounds it
	round  uint8 // the message's RNR round when the chunk was last sent
	where  chunkWhere
	abort  bool // send as ABORT (its message failed)
	copied bool // a proactive copy went (redundancy.go): counted in copyFlight until settled
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
func (c *Conn) msgOpen(msn uint32) bool {
	return wire.Seq(msn).In(wire.Seq(c.s.msnBase), wire.Seq(c.s.msnNext))
}

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
	if int(wire.Seq(c.s.msnBase).Span(wire.Seq(c.s.msnNext))) >= c.opts.SendQueue {
		return transport.ErrQueueFull
	}
	msn := c.s.msnNext
	if int(wire.Seq(c.s.msnBase).Span(wire.Seq(msn))) >= len(c.s.msgs) {
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
		c.noteBacklog(false)
	}
	c.st.posted++
	return nil
}

func (c *Conn) growMsgs() {
	c.s.msgs = regrow(c.s.msgs, max(2*len(c.s.msgs), 4), c.s.msnBase, c.s.msnNext)
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
			c.noteBacklog(false)
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
	if int(wire.Seq(c.s.dsnBase).Span(wire.Seq(c.s.dsnNext))) >= int(c.dsnWindow) {
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
	haveMsg := c.s.segNext != c.s.msnNext && int(wire.Seq(c.s.msnBase).Span(wire.Seq(c.s.segNext))) < int(c.msgWindow)
	haveResp := int(c.s.respHead) < len(c.s.respQ)
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
	if int(wire.Seq(c.s.dsnBase).Span(wire.Seq(dsn))) >= len(c.s.chunks) {
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
			if c.s.unsent == 0 {
				c.noteBacklog(false) // the last new data: its part goes
			}
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
	if c.s.unsent == 0 {
		c.noteBacklog(false)
	}
	if r.nextOff >= r.length {
		c.s.respHead++
		if int(c.s.respHead) == len(c.s.respQ) {
			c.s.respQ, c.s.respHead = c.s.respQ[:0], 0
		}
	}
	c.s.fromResp = false
	return dsn
}

func (c *Conn) growChunks() {
	c.s.chunks = regrow(c.s.chunks, max(2*len(c.s.chunks), 16), c.s.dsnBase, c.s.dsnNext)
}

// chunkResolved is called when a chunk's PSN is acknowledged (as data or
// as ABORT): the chunk is done with.
func (c *Conn) chunkResolved(dsn uint32) {
	ch := c.chunk(dsn)

	job, msn := ch.job, ch.msn
	ch.where = chunkFree
	if ch.copied {
		ch.copied = false
		c.copyFlight -= int32(ch.size)
	}
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
	c.ensurePaths()
	c.s.unsent += int64(r.length)
	c.noteBacklog(false)
	c.s.respQ = append(c.s.respQ, j)
}

// oldestOutstanding returns the oldest posted message not yet completed.
func (c *Conn) oldestOutstanding() (uint32, bool) {
	for msn := c.s.msnBase; msn != c.s.msnNext; msn++ {
		if m := c.msg(msn); m.used && !m.released {
			return msn, true
		}
	}
	return 0, false
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
	c.noteBacklog(false)
	c.copyFlight = 0
	for i := range c.s.paths {
		p := &c.s.paths[i]
		if p.used() { // a path not used has nothing outstanding
			p.sb.flush()
		}
		p.probeWant = false
	}
	c.s.lostSet, c.s.probeSet = [4]uint64{}, [4]uint64{}
}
