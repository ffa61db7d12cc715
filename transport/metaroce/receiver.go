package metaroce

import (
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/metaroce/wire"
)

// rcvState is the receiving side of a connection.
//
// Every data packet carries its own placement, so packets are placed the
// moment they arrive, in any order. Three small windows make that safe:
// the per-path SACK window (loss detection for the sender), the DSN window
// (a chunk is placed and counted once, whatever path or retransmission
// brought it), and the message window (a record per message in flight,
// which orders completions). Completions are released per stream in MSN
// order: a message completes once all its bytes are placed and the
// previous message of its stream (named by the packet's stream_prev) has
// completed. There is no per-stream table: a stream exists here only as
// the chain of its messages in flight.
type rcvState struct {
	// paths holds the peer's paths that have sent here, each allocated on
	// its first packet (rcvPaths): nil for one not heard from.
	paths []*rcvPath
	// ACK generation (ackgen.go): paths the next ACKs owe, the latest
	// path to receive data on each port, whether an ACK is due now, and
	// the data packets since the last one.
	dirty  []uint64
	lastOn []int16
	ackDue bool
	// msgPlaced says the packet being consumed completed a message's
	// placement: the ACK goes at once.
	msgPlaced bool
	// lossQ is the loss rate the receiver measures, in 1/65536
	// (noteArrival); it sets how many ACKs carry each path's state
	// (ackRedundancy). (It fills ackDue's padding: TestConnSize.)
	lossQ uint16
	// lastHint is the share (kB/s) the last ACK carried: when the share
	// moves by more than a tenth, the next ACK goes at once. (These two
	// sit beside ackDue to fill its padding: TestConnSize.)
	lastHint uint32
	pending  int

	msgs     []rcvMsg // ring by MSN
	msnBase  uint32   // oldest message not forgotten
	peerBase uint32   // the sender's oldest open message (from msn_base)
	dsn      seqWindow

	rq     []postedRecv // ring by receive sequence number (the match token)
	rqNext uint32       // next receive to post
	rqBase uint32       // oldest receive not consumed

	naks []nakItem
}

// rcvMsg is a message in flight toward us. A record may exist before any
// of its packets (a placeholder that a later message of its stream waits
// on).
type rcvMsg struct {
	used      bool
	seen      bool // header fields below are known
	placed    bool // all bytes placed (or failed)
	released  bool // completed in stream order
	failed    bool
	bound     bool // holds a posted receive
	hasWaiter bool
	imm       bool
	typ       wire.Type
	nak       wire.NakReason
	status    transport.Status
	stream    uint16
	prev      uint16
	length    uint32
	got       uint32
	token     uint32
	immData   uint32
	waiter    uint32
	resp      int32 // READ: the response job
}

type postedRecv struct {
	wr       transport.WorkRequest
	bound    bool
	consumed bool
	msn      uint32
}

// consumesRecv reports whether the message takes a posted receive.
func (r *rcvMsg) consumesRecv() bool {
	return r.typ == wire.TypeSend || r.typ == wire.TypeWrite && r.imm
}

func (c *Conn) rmsg(msn uint32) *rcvMsg { return &c.r.msgs[msn&uint32(len(c.r.msgs)-1)] }

func (c *Conn) postRecv(wr *transport.WorkRequest) error {
	if wr.NumSGE < 0 || wr.NumSGE > transport.MaxSGE {
		return transport.ErrBadRequest
	}
	if int(wire.Seq(c.r.rqBase).Span(wire.Seq(c.r.rqNext))) >= c.opts.RecvQueue {
		return transport.ErrQueueFull
	}
	if int(wire.Seq(c.r.rqBase).Span(wire.Seq(c.r.rqNext))) >= len(c.r.rq) {
		c.r.rq = regrow(c.r.rq, max(2*len(c.r.rq), 4), c.r.rqBase, c.r.rqNext)
	}
	c.r.rq[c.r.rqNext&uint32(len(c.r.rq)-1)] = postedRecv{wr: *wr}
	c.r.rqNext++
	return nil
}

func (c *Conn) recv(token uint32) *postedRecv { return &c.r.rq[token&uint32(len(c.r.rq)-1)] }

// pathGen brings a receive path to generation g; it reports whether g is
// the path's current generation (packets of older generations are still
// placed, but do not touch the path's window).
func (c *Conn) pathGen(rp *rcvPath, g uint8) bool {
	if !rp.seen || int8(g-rp.gen) > 0 && !c.mutated(MutIgnoreGen) {
		rp.reset(g)
		return true
	}
	return g == rp.gen
}

// onProbe acknowledges a path probe at once.
func (c *Conn) onProbe(h wire.Header, rx transport.RxMeta) {
	pid := int(h.Path())
	if !c.rcvPaths(pid) {
		c.st.dropMalformed++
		return
	}
	rp := c.r.paths[pid]
	if !c.pathGen(rp, h.Gen()) {
		c.st.dropStale++
		return
	}
	out := rp.sack.add(h.PSN())
	if out == sackTooFar {
		c.st.dropWindow++
		return
	}
	if h.Flags()&wire.FlagRetx != 0 && out != sackDup && !c.mutated(MutNoRetxProbeLoss) {
		// A filler sent again: the PSN's data transmission was lost (a
		// proactive copy's twin, or a chunk a probe or move sent again),
		// a retransmission in the loss estimate like a data one (§4), so
		// that copies do not hide the losses the ACKs also suffer.
		c.noteArrival(true)
	}
	rp.port, rp.sport = rx.Port, rx.SrcPort // a probe's answer echoes the latest data packet
	c.owe(pid)
	c.ackNow()
}

// rcvPaths reports whether pid is one of the peer's paths, allocating
// the table of receiving paths on the first packet of any (an end that
// only sends never needs it) and path pid's state on its first packet (a
// connection's peer may use a few of its paths: at 128 hosts x 128 paths,
// 2,004 of 16,384 carried a packet). A path's state before its first
// packet is the zero rcvPath, so allocating it then changes nothing.
func (c *Conn) rcvPaths(pid int) bool {
	if pid >= int(c.peerPaths) {
		return false
	}
	if c.r.paths == nil {
		c.r.paths = make([]*rcvPath, c.peerPaths)
	}
	if c.r.paths[pid] == nil {
		c.r.paths[pid] = new(rcvPath)
	}
	return true
}

// consumeResult is what became of a data packet.
type consumeResult uint8

const (
	consumed     consumeResult = iota // placed (or otherwise settled): ACK it
	consumedDup                       // its chunk was already settled: ACK it
	consumedNak                       // refused with a NAK: leave its PSN open
	consumedDrop                      // malformed: ignore it
)

// onData handles a data packet: path bookkeeping, then placement.
func (c *Conn) onData(d wire.Data, rx transport.RxMeta) {
	pid := int(d.Path())
	if !c.rcvPaths(pid) {
		c.st.dropMalformed++
		return
	}
	rp := c.r.paths[pid]
	current := c.pathGen(rp, d.Gen())
	psn := d.PSN()
	if current {
		if rp.sack.seen(psn) {
			c.st.dupPackets++
			c.owe(pid)
			c.ackNow()
			return
		}
		if wire.Seq(rp.sack.cum).Dist(wire.Seq(psn)) > wire.SACKBits {
			c.st.dropWindow++
			return
		}
	}
	if c.slot >= 0 && !c.opts.DisableRateHint {
		c.proto.alloc.observe(c.slot, c.now, float64(d.Demand())*1000, c.rcvRTT(), len(d)+ipUDPOverhead, rx.CE)
	}
	c.r.msgPlaced = false
	res := c.consume(d, pid, rx)
	if c.r.msgPlaced {
		// The message is complete here, and completes at the sender once
		// every chunk is ACKed: the ACK goes now. Only the chunk that
		// arrives last says when that is (chunks cross planes and arrive
		// in any order).
		c.ackNow()
	}
	if res == consumedNak || res == consumedDrop || !current {
		return
	}
	c.st.dataReceived++
	c.noteArrival(d.Flags()&wire.FlagRetx != 0)
	out := rp.sack.add(psn)
	rp.rx++
	rp.port, rp.sport, rp.echoTS, rp.arrived = rx.Port, rx.SrcPort, d.TS(), c.now
	if rx.CE && !c.mutated(MutNoCECount) {
		rp.ce++
		rp.ece = true
		c.st.ceReceived++
	}
	c.owe(pid)
	urgent := out == sackHole || out == sackFill || d.Flags()&wire.FlagAckReq != 0 && !c.mutated(MutNoAckReq) || res == consumedDup || c.r.msgPlaced
	if !urgent && c.slot >= 0 && !c.opts.DisableRateHint {
		h := c.hintKBs()
		urgent = h > c.r.lastHint+c.r.lastHint/10 || h < c.r.lastHint-c.r.lastHint/10
	}
	if urgent {
		c.ackNow()
	} else {
		c.ackCount()
	}
}

// consume settles one data packet: deduplicate by DSN, find the message,
// check access, place the bytes, and release completions.
func (c *Conn) consume(d wire.Data, pid int, rx transport.RxMeta) consumeResult {
	dsn := d.DSN()
	if c.r.dsn.has(dsn) && !c.mutated(MutPlaceDuplicate) {
		c.st.dupData++
		return consumedDup
	}
	if !c.r.dsn.inRange(dsn) {
		c.st.dropWindow++
		return consumedDrop
	}
	if d.Type() == wire.TypeReadResp {
		return c.consumeReadResp(d)
	}
	c.notePeerBase(d.MSNBase())
	msn := d.MSN()
	if wire.Seq(msn).Before(wire.Seq(c.r.msnBase)) {
		// A message we have completed and forgotten: settle the chunk so
		// the sender stops resending it.
		c.st.dropStale++
		c.r.dsn.add(dsn)
		return consumedDup
	}
	if int(wire.Seq(c.r.msnBase).Span(wire.Seq(msn))) >= c.opts.SendQueue {
		c.st.dropWindow++
		return consumedDrop
	}
	r := c.openRcvMsg(msn)
	flags := d.Flags()
	if !r.seen {
		r.seen = true
		r.typ, r.stream, r.prev, r.length = d.Type(), d.Stream(), d.StreamPrev(), d.MsgLen()
		r.token, r.imm, r.immData = d.Token(), flags&wire.FlagImm != 0, d.Imm()
		r.resp = -1
	} else if r.typ != d.Type() || r.stream != d.Stream() || r.length != d.MsgLen() || r.prev != d.StreamPrev() {
		c.st.dropMalformed++
		return consumedDrop
	}
	// A message that takes a posted receive binds it before anything else,
	// so that even its failure is reported on (and consumes) that receive.
	if r.consumesRecv() && !r.bound {
		if res := c.bindRecv(d, pid, msn, r, rx); res != consumed {
			return res
		}
	}
	if flags&wire.FlagAbort != 0 {
		// The sender gave this chunk up: after our NAK, or for a reason of
		// its own (its buffer became invalid).
		c.r.dsn.add(dsn)
		if !r.failed {
			c.rcvFail(msn, r, wire.NakInvalid, transport.StatusRemoteInvalidRequest)
		}
		return consumed
	}
	if r.failed {
		c.queueNak(d, pid, r.nak, rx)
		return consumedNak
	}
	payload := d.Payload()
	n := len(payload)
	switch r.typ {
	case wire.TypeWrite:
		// Check the whole message's range on every packet, so that no byte
		// of a message that overruns its region is ever written.
		base := d.Addr() - uint64(d.Offset())
		if st := c.cfg.Memory.Check(d.Key(), base, int(r.length), transport.AccessRemoteWrite); st != transport.StatusOK && !c.mutated(MutAcceptBadKey) {
			c.rcvFail(msn, r, wire.NakAccess, transport.StatusRemoteAccess)
			c.queueNak(d, pid, wire.NakAccess, rx)
			return consumedNak
		}
		dst := region(d.Addr(), uint32(n), d.Key())
		c.place(dst[:], 0, payload, transport.AccessRemoteWrite) // the range was checked

	case wire.TypeSend:
		if wr := &c.recv(r.token).wr; !c.place(wr.SGL[:wr.NumSGE], d.Offset(), payload, transport.AccessLocalWrite) {
			c.rcvFail(msn, r, wire.NakInvalid, transport.StatusLocalProtection)
			c.queueNak(d, pid, wire.NakInvalid, rx)
			return consumedNak
		}
	case wire.TypeReadReq:
		if st := c.cfg.Memory.Check(d.Key(), d.Addr(), int(r.length), transport.AccessRemoteRead); st != transport.StatusOK {
			c.rcvFail(msn, r, wire.NakAccess, transport.StatusRemoteAccess)
			c.queueNak(d, pid, wire.NakAccess, rx)
			return consumedNak
		}
		sinks, _ := wire.DecodeSinks(payload, r.length) // DecodeData checked it
		r.resp = c.newRespJob(d, sinks)
		n = int(r.length)
	}
	c.r.dsn.add(dsn)
	r.got += uint32(n)
	c.st.bytesPlaced += uint64(len(payload))
	if r.got >= r.length {
		r.placed = true
		c.r.msgPlaced = true
		c.releaseRcv(msn)
	}
	return consumed
}

// openRcvMsg returns msn's record, creating it (and growing the ring) if
// needed. msn is inside the message window.
func (c *Conn) openRcvMsg(msn uint32) *rcvMsg {
	if int(wire.Seq(c.r.msnBase).Span(wire.Seq(msn))) >= len(c.r.msgs) {
		old := c.r.msgs
		size := max(len(old), 4)
		for size <= int(wire.Seq(c.r.msnBase).Span(wire.Seq(msn))) {
			size *= 2
		}
		c.r.msgs = regrow(old, size, c.r.msnBase, c.r.msnBase+uint32(len(old)))
	}
	r := c.rmsg(msn)
	if !r.used {
		*r = rcvMsg{used: true, resp: -1}
	}
	return r
}

// bindRecv gives a SEND (or WRITE with immediate) the posted receive its
// token names, checking the receive's length and buffers once. With no
// receive posted yet the packet is refused with an RNR NAK.
func (c *Conn) bindRecv(d wire.Data, pid int, msn uint32, r *rcvMsg, rx transport.RxMeta) consumeResult {
	t := r.token
	if wire.Seq(c.r.rqBase).Span(wire.Seq(t)) >= uint32(c.opts.RecvQueue) {
		c.st.dropMalformed++ // consumed long ago, or beyond any receive queue
		return consumedDrop
	}
	if !wire.Seq(t).In(wire.Seq(c.r.rqBase), wire.Seq(c.r.rqNext)) {
		c.st.rnrNaksSent++
		if c.cfg.Trace != nil {
			c.tracef("RNR: msn %d wants receive %d, %d posted", msn, t, c.r.rqNext)
		}
		reason := wire.NakRNR
		if c.mutated(MutRNRAsAccess) {
			reason = wire.NakAccess
		}
		c.queueNak(d, pid, reason, rx)
		return consumedNak
	}
	pr := c.recv(t)
	if pr.bound && pr.msn != msn {
		c.st.dropMalformed++
		return consumedDrop
	}
	pr.bound, pr.msn, r.bound = true, msn, true
	if r.typ == wire.TypeSend {
		if int64(r.length) > int64(pr.wr.Len()) {
			c.rcvFail(msn, r, wire.NakInvalid, transport.StatusLocalLength)
			c.queueNak(d, pid, wire.NakInvalid, rx)
			return consumedNak
		}
		for i := 0; i < pr.wr.NumSGE; i++ {
			s := &pr.wr.SGL[i]
			if st := c.cfg.Memory.Check(s.LKey, s.Addr, int(s.Len), transport.AccessLocalWrite); st != transport.StatusOK {
				c.rcvFail(msn, r, wire.NakInvalid, transport.StatusLocalProtection)
				c.queueNak(d, pid, wire.NakInvalid, rx)
				return consumedNak
			}
		}
	}
	return consumed
}

// consumeReadResp places READ response bytes into our own READ's sinks,
// after checking that the placement the response carries is exactly where
// our READ asked for those bytes.
func (c *Conn) consumeReadResp(d wire.Data) consumeResult {
	dsn := d.DSN()
	msn := d.MSN()
	if !c.msgOpen(msn) {
		c.st.dropStale++
		c.r.dsn.add(dsn)
		return consumedDup
	}
	m := c.msg(msn)
	if !m.used || m.released || m.typ != wire.TypeReadReq {
		c.st.dropStale++
		c.r.dsn.add(dsn)
		return consumedDup
	}
	c.r.dsn.add(dsn)
	switch {
	case d.Flags()&wire.FlagAbort != 0:
		c.failMsg(msn, transport.StatusRemoteAccess)
	case m.failed:
	case len(d.Payload()) == 0 && d.MsgLen() == m.length:
		// An empty READ's one response packet: nothing to place.
	default:
		payload := d.Payload()
		off, n := d.Offset(), uint32(len(payload))
		addr, key, room, ok := sglAt(&m.wr, off)
		if !ok || d.MsgLen() != m.length || d.Addr() != addr || d.Key() != key || n > room {
			c.st.dropMalformed++
			c.failMsg(msn, transport.StatusRemoteInvalidRequest)
			break
		}
		if dst := region(addr, n, key); !c.place(dst[:], 0, payload, transport.AccessLocalWrite) {
			c.failMsg(msn, transport.StatusLocalProtection)
			break
		}
		m.respGot += n
		c.st.bytesPlaced += uint64(n)
	}
	c.releaseSnd(msn)
	return consumed
}

// rcvFail marks a message failed at the receiver. Its error completion is
// released in stream order like any other.
func (c *Conn) rcvFail(msn uint32, r *rcvMsg, reason wire.NakReason, status transport.Status) {
	r.failed, r.nak, r.status, r.placed = true, reason, status, true
	c.st.protectionNaksSent++
	if c.cfg.Trace != nil {
		c.tracef("msn %d stream %d: %v (%v), NAK", msn, r.stream, reason, status)
	}
	c.releaseRcv(msn)
}

// releaseRcv completes msn, and the messages of its stream waiting behind
// it, when each is placed and its predecessor is complete.
func (c *Conn) releaseRcv(msn uint32) {
	for {
		r := c.rmsg(msn)
		if !r.placed || r.released {
			break
		}
		if r.prev != 0 {
			p := msn - uint32(r.prev)
			if !wire.Seq(p).Before(wire.Seq(c.r.msnBase)) {
				pr := c.openRcvMsg(p)
				if !pr.released {
					pr.waiter, pr.hasWaiter = msn, true
					break
				}
			}
		}
		r.released = true
		next, more := r.waiter, r.hasWaiter
		c.rcvComplete(r)
		if !more || c.state != transport.StateEstablished {
			break
		}
		msn = next
	}
	c.forgetRcv()
}

// rcvComplete delivers what a released message owes the application.
func (c *Conn) rcvComplete(r *rcvMsg) {
	wc := transport.Completion{Stream: r.stream}
	switch {
	case r.failed && r.bound:
		pr := c.recv(r.token)
		wc.ID, wc.Op, wc.Status = pr.wr.ID, transport.OpRecv, r.status
		c.consumeRecv(r.token)
	case r.failed && r.nak == wire.NakAccess:
		// An access error with no receive to report it on: a completion
		// with ID 0, so the responder's application sees it too.
		wc.Op, wc.Status = transport.OpWrite, r.status
		if r.typ == wire.TypeReadReq {
			wc.Op = transport.OpRead
		}
	case r.failed:
		return // the sender reports it; nothing of ours was involved
	case r.typ == wire.TypeSend || r.typ == wire.TypeWrite && r.imm:
		pr := c.recv(r.token)
		wc.ID, wc.Op, wc.Bytes = pr.wr.ID, transport.OpRecv, r.length
		if r.imm {
			wc.Op, wc.Imm, wc.HasImm = transport.OpRecvImm, r.immData, true
		}
		c.consumeRecv(r.token)
	case r.typ == wire.TypeReadReq:
		c.startResp(r.resp)
		return
	default:
		return // a plain WRITE: nothing to report at the target
	}
	c.st.completions++
	c.cfg.Complete(wc)
}

func (c *Conn) consumeRecv(t uint32) {
	c.recv(t).consumed = true
	for c.r.rqBase != c.r.rqNext && c.recv(c.r.rqBase).consumed {
		c.r.rqBase++
	}
}

// notePeerBase records the sender's oldest open message.
func (c *Conn) notePeerBase(b uint32) {
	if wire.Seq(b).After(wire.Seq(c.r.peerBase)) && int(wire.Seq(c.r.msnBase).Span(wire.Seq(b))) <= c.opts.SendQueue {
		c.r.peerBase = b
		c.forgetRcv()
	}
}

// forgetRcv drops records of completed messages that the sender has also
// completed: nothing of theirs can arrive any more except duplicates,
// which the DSN window catches.
func (c *Conn) forgetRcv() {
	for c.r.msnBase != c.r.peerBase && len(c.r.msgs) > 0 {
		r := c.rmsg(c.r.msnBase)
		if !r.released {
			return
		}
		*r = rcvMsg{}
		c.r.msnBase++
	}
}

// flushReceiver reports failed messages not yet released, then completes
// every posted receive with StatusFlushed.
func (c *Conn) flushReceiver() {
	for m := c.r.msnBase; int(wire.Seq(c.r.msnBase).Span(wire.Seq(m))) < len(c.r.msgs); m++ {
		r := c.rmsg(m)
		if r.used && r.placed && r.failed && !r.released {
			r.released = true
			c.rcvComplete(r)
		}
	}
	for t := c.r.rqBase; t != c.r.rqNext; t++ {
		pr := c.recv(t)
		if pr.consumed {
			continue
		}
		pr.consumed = true
		c.st.completions++
		c.cfg.Complete(transport.Completion{ID: pr.wr.ID, Op: transport.OpRecv, Status: transport.StatusFlushed, Stream: pr.wr.Stream})
	}
	c.r.rqBase = c.r.rqNext
	clear(c.r.msgs)
	c.r.naks = c.r.naks[:0]
	clear(c.r.dirty)
	c.r.ackDue, c.r.pending = false, 0
}
