package rocev2

import (
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/rocev2/ib"
)

// recvWQE is a posted receive.
type recvWQE struct {
	wr     transport.WorkRequest
	length int
}

// readResp is an RDMA READ the responder is answering.
type readResp struct {
	psn    ib.PSN
	va     uint64
	rkey   uint32
	length int
	npkts  int
	sent   int
}

// responder is the receiving half of a QP. It accepts only the packet it
// expects (ePSN) and places it at once: SEND data at the running offset of
// the current receive, WRITE data at the RETH's address plus the running
// offset. That is why it cannot take packets out of order, and why one
// loss costs everything sent after it — unless selective repeat keeps the
// packets past a gap (ooo) and places them once the gap fills.
type responder struct {
	o          *Options
	minRNR     uint8 // the RNR timer code of its RNR NAKs: Options.MinRNRTimer unless SetMinRNRTimer
	q          []recvWQE
	head, tail uint64

	epsn ib.PSN
	msn  uint32 // messages completed, for the AETH
	// nakSent marks a NAK episode: after a sequence-error or RNR NAK, later
	// packets are dropped silently until ePSN arrives.
	nakSent bool

	inMsg   bool     // a multi-packet message is in progress
	msg     ib.Class // its class (send or write)
	sendOff int      // bytes placed into the current receive
	wva     uint64   // WRITE in progress: RETH address, key, length, bytes placed
	wrkey   uint32
	wlen    int
	wdone   int

	unacked    int
	ackPending bool
	nakPending bool
	nakSyn     ib.Syndrome
	nakPSN     ib.PSN

	reads  []readResp // ring of READs being answered
	rh, rt uint64

	cnpPending bool
	cnpEver    bool
	cnpAt      sim.Time

	dead bool // a fatal NAK was queued: drop everything

	// Selective repeat (Options.SelectiveRepeat): packets kept past a gap;
	// srNaked marks that the NAK for the current ePSN went out; hiSeen is
	// one past the highest PSN seen past a gap (valid if hiSet), so a hole
	// behind packets the window could not keep is still NAKed.
	ooo     reorderWindow
	srNaked bool
	srSince int // packets past the gap since that NAK
	hiSeen  ib.PSN
	hiSet   bool
}

func (r *responder) init(o *Options, window int) {
	r.o, r.minRNR = o, o.MinRNRTimer
	if o.SelectiveRepeat {
		if o.SRWindow > 0 {
			window = o.SRWindow
		}
		r.ooo.init(window)
	}
	r.q = make([]recvWQE, 16)
	n := 1
	for n < o.MaxReads {
		n <<= 1
	}
	r.reads = make([]readResp, n)
}

func (r *responder) at(pos uint64) *recvWQE { return &r.q[pos&uint64(len(r.q)-1)] }

func (r *responder) read(pos uint64) *readResp { return &r.reads[pos&uint64(len(r.reads)-1)] }

func (r *responder) readsPending() bool { return r.rh != r.rt }

// post queues a receive. Its SGEs are checked when data is placed.
func (r *responder) post(c *Conn, wr *transport.WorkRequest) error {
	if wr.NumSGE < 0 || wr.NumSGE > transport.MaxSGE {
		return transport.ErrBadRequest
	}
	if int(r.tail-r.head) >= r.o.RecvQueue {
		return transport.ErrQueueFull
	}
	if int(r.tail-r.head) == len(r.q) {
		nq := make([]recvWQE, 2*len(r.q))
		for p := r.head; p < r.tail; p++ {
			nq[p&uint64(len(nq)-1)] = *r.at(p)
		}
		r.q = nq
	}
	*r.at(r.tail) = recvWQE{wr: *wr, length: wr.Len()}
	r.tail++
	return nil
}

// noteCE is DCQCN's notification point: a CE-marked packet makes a CNP,
// at most one per CNPInterval.
func (r *responder) noteCE(c *Conn, now sim.Time) {
	c.stats.CEReceived++
	if c.peerQPN == 0 || (r.cnpEver && now-r.cnpAt < r.o.DCQCN.CNPInterval) {
		return
	}
	r.cnpPending, r.cnpEver, r.cnpAt = true, true, now
	if c.tr != nil {
		c.tr.Tracef(now, c.localID, "qp %#x: CE received, sending CNP to qp %#x", c.qpn, c.peerQPN)
	}
}

// receive handles a request packet (SEND, WRITE, READ request); raw is
// the packet's bytes, kept if selective repeat holds it past a gap.
func (r *responder) receive(c *Conn, now sim.Time, pk *ib.Packet, raw []byte) {
	if r.dead {
		c.stats.Dropped++
		return
	}
	op := pk.BTH.Opcode()
	p := pk.BTH.PSN()
	switch d := p.Diff(r.epsn); {
	case d < 0:
		c.stats.Duplicates++
		if op.Class() == ib.ClassReadRequest {
			r.readRequest(c, now, pk, true)
		} else {
			r.ackPending = true // re-ACK: our ACK may have been lost
		}
		return
	case d > 0 && r.o.SelectiveRepeat:
		r.keep(c, now, pk, raw)
		return
	case d > 0:
		c.stats.OutOfSequence++
		if !r.nakSent {
			r.nakSent = true
			r.queueNAK(ib.SyndromeNAKSequence, r.epsn)
			if c.tr != nil {
				c.tr.Tracef(now, c.localID, "qp %#x: psn %d out of sequence (expected %d), sending NAK", c.qpn, p, r.epsn)
			}
		}
		return
	}
	r.accept(c, now, pk)
	if r.o.SelectiveRepeat {
		r.drain(c, now)
	}
}

// accept places the request packet at ePSN.
func (r *responder) accept(c *Conn, now sim.Time, pk *ib.Packet) {
	op := pk.BTH.Opcode()
	p := pk.BTH.PSN()
	var ok bool
	var comp transport.Completion
	switch op.Class() {
	case ib.ClassSend:
		ok, comp = r.send(c, now, pk)
	case ib.ClassWrite:
		ok, comp = r.write(c, now, pk)
	case ib.ClassReadRequest:
		r.readRequest(c, now, pk, false)
		return
	default:
		r.fatal(c, now, ib.SyndromeNAKInvalid, p, "unsupported opcode "+op.String())
		return
	}
	if !ok {
		return
	}
	r.nakSent, r.srNaked = false, false
	r.epsn = r.epsn.Add(1)
	r.unacked++
	if pk.BTH.AckReq() || r.unacked >= r.o.AckEvery {
		r.ackPending = true
	}
	if comp.Op != 0 {
		c.done(comp)
	}
}

// send places a SEND packet into the current receive; it returns false if
// the packet was not accepted (RNR or a fatal error), and the receive's
// completion when the message ends.
func (r *responder) send(c *Conn, now sim.Time, pk *ib.Packet) (bool, transport.Completion) {
	op := pk.BTH.Opcode()
	pos := op.Position()
	p := pk.BTH.PSN()
	n := len(pk.Payload)
	first := pos == ib.PosFirst || pos == ib.PosOnly
	if first == r.inMsg || (!first && r.msg != ib.ClassSend) || !r.lengthOK(c, pos, n) {
		r.fatal(c, now, ib.SyndromeNAKInvalid, p, "SEND "+op.String()+" out of place or of bad length")
		return false, transport.Completion{}
	}
	if first {
		if r.head == r.tail {
			r.rnr(c, now, p)
			return false, transport.Completion{}
		}
		r.sendOff = 0
	}
	w := r.at(r.head)
	if r.sendOff+n > w.length {
		comp := transport.Completion{ID: w.wr.ID, Op: transport.OpRecv, Status: transport.StatusLocalLength}
		r.head++
		c.done(comp)
		r.fatal(c, now, ib.SyndromeNAKInvalid, p, "SEND longer than the posted receive")
		return false, transport.Completion{}
	}
	if st := copySGL(c.cfg.Memory, w.wr.SGL[:w.wr.NumSGE], r.sendOff, pk.Payload, true); st != transport.StatusOK {
		comp := transport.Completion{ID: w.wr.ID, Op: transport.OpRecv, Status: st}
		r.head++
		c.done(comp)
		r.fatal(c, now, ib.SyndromeNAKRemoteOp, p, "receive buffer refused by local memory")
		return false, transport.Completion{}
	}
	r.sendOff += n
	if pos == ib.PosFirst || pos == ib.PosMiddle {
		r.inMsg, r.msg = true, ib.ClassSend
		return true, transport.Completion{}
	}
	r.inMsg = false
	r.msn++
	comp := transport.Completion{ID: w.wr.ID, Op: transport.OpRecv, Bytes: uint32(r.sendOff)}
	if op.HasImm() {
		comp.Op, comp.Imm, comp.HasImm = transport.OpRecvImm, pk.ImmDt.Imm(), true
	}
	r.head++
	return true, comp
}

// lengthOK checks a packet's payload length against its position: FIRST
// and MIDDLE carry exactly one MTU, LAST 1..MTU, ONLY 0..MTU.
func (r *responder) lengthOK(c *Conn, pos ib.Position, n int) bool {
	switch pos {
	case ib.PosFirst, ib.PosMiddle:
		return n == c.mtu
	case ib.PosLast:
		return n >= 1 && n <= c.mtu
	}
	return n <= c.mtu
}

// write places an RDMA WRITE packet.
func (r *responder) write(c *Conn, now sim.Time, pk *ib.Packet) (bool, transport.Completion) {
	op := pk.BTH.Opcode()
	pos := op.Position()
	p := pk.BTH.PSN()
	n := len(pk.Payload)
	first := pos == ib.PosFirst || pos == ib.PosOnly
	last := pos == ib.PosLast || pos == ib.PosOnly
	if first == r.inMsg || (!first && r.msg != ib.ClassWrite) || !r.lengthOK(c, pos, n) {
		r.fatal(c, now, ib.SyndromeNAKInvalid, p, "WRITE "+op.String()+" out of place or of bad length")
		return false, transport.Completion{}
	}
	if first {
		va, key, dlen := pk.RETH.VA(), pk.RETH.RKey(), int(pk.RETH.DMALen())
		if (pos == ib.PosOnly && n != dlen) || (pos == ib.PosFirst && dlen <= c.mtu) {
			r.fatal(c, now, ib.SyndromeNAKInvalid, p, "WRITE length disagrees with its RETH")
			return false, transport.Completion{}
		}
		if dlen > 0 {
			if st := c.cfg.Memory.Check(key, va, dlen, transport.AccessRemoteWrite); st != transport.StatusOK {
				r.fatal(c, now, ib.SyndromeNAKAccess, p, "WRITE refused: bad rkey, range or permission")
				return false, transport.Completion{}
			}
		}
		r.wva, r.wrkey, r.wlen, r.wdone = va, key, dlen, 0
	}
	if r.wdone+n > r.wlen || (last && r.wdone+n != r.wlen) {
		r.fatal(c, now, ib.SyndromeNAKInvalid, p, "WRITE longer or shorter than its RETH")
		return false, transport.Completion{}
	}
	imm := op.HasImm()
	if imm && r.head == r.tail {
		r.rnr(c, now, p)
		return false, transport.Completion{}
	}
	if n > 0 {
		if st := c.cfg.Memory.Write(r.wrkey, r.wva+uint64(r.wdone), pk.Payload[:n], transport.AccessRemoteWrite); st != transport.StatusOK {
			r.fatal(c, now, ib.SyndromeNAKAccess, p, "WRITE refused: bad rkey, range or permission")
			return false, transport.Completion{}
		}
	}
	r.wdone += n
	if !last {
		r.inMsg, r.msg = true, ib.ClassWrite
		return true, transport.Completion{}
	}
	r.inMsg = false
	r.msn++
	if !imm {
		return true, transport.Completion{}
	}
	w := r.at(r.head)
	r.head++
	return true, transport.Completion{ID: w.wr.ID, Op: transport.OpRecvImm, Bytes: uint32(r.wlen),
		Imm: pk.ImmDt.Imm(), HasImm: true}
}

// readRequest queues the responses to an RDMA READ. A duplicate (the
// requester went back) is answered again from its PSN: responses queued
// for that PSN or later are dropped first, since they are asked for anew.
func (r *responder) readRequest(c *Conn, now sim.Time, pk *ib.Packet, dup bool) {
	p := pk.BTH.PSN()
	if !dup && r.inMsg {
		r.fatal(c, now, ib.SyndromeNAKInvalid, p, "READ request inside a message")
		return
	}
	va, key, dlen := pk.RETH.VA(), pk.RETH.RKey(), int(pk.RETH.DMALen())
	if dlen > 1<<31 {
		if !dup {
			r.fatal(c, now, ib.SyndromeNAKInvalid, p, "READ longer than 2^31")
		}
		return
	}
	if dlen > 0 {
		if st := c.cfg.Memory.Check(key, va, dlen, transport.AccessRemoteRead); st != transport.StatusOK {
			if !dup {
				r.fatal(c, now, ib.SyndromeNAKAccess, p, "READ refused: bad rkey, range or permission")
			}
			return
		}
	}
	if dup {
		for r.rt > r.rh && !r.read(r.rt-1).psn.Before(p) {
			r.rt--
		}
		if r.rt > r.rh {
			e := r.read(r.rt - 1)
			if k := p.Diff(e.psn); k < e.npkts {
				e.npkts = max(k, e.sent)
				if e.sent >= e.npkts {
					r.rt--
				}
			}
		}
	}
	if int(r.rt-r.rh) == len(r.reads) {
		if !dup {
			r.fatal(c, now, ib.SyndromeNAKInvalid, p, "more READs outstanding than offered")
		}
		return
	}
	np := npkts(dlen, c.mtu)
	*r.read(r.rt) = readResp{psn: p, va: va, rkey: key, length: dlen, npkts: np}
	r.rt++
	if !dup {
		r.nakSent, r.srNaked = false, false
		r.epsn = r.epsn.Add(np)
		r.msn++
	}
}

// rnr queues an RNR NAK: a SEND (or WRITE with immediate) found no posted
// receive. ePSN stays; the requester comes back after the RNR timer.
func (r *responder) rnr(c *Conn, now sim.Time, p ib.PSN) {
	r.nakSent = true
	r.queueNAK(ib.RNRSyndrome(r.minRNR), p)
	if c.tr != nil {
		c.tr.Tracef(now, c.localID, "qp %#x: no receive posted for psn %d, sending RNR NAK", c.qpn, p)
	}
}

func (r *responder) queueNAK(s ib.Syndrome, p ib.PSN) {
	r.nakPending, r.nakSyn, r.nakPSN = true, s, p
}

// fatal queues a NAK that ends the connection and moves the QP to Error,
// as an IB responder does on invalid requests and access errors.
func (r *responder) fatal(c *Conn, now sim.Time, s ib.Syndrome, p ib.PSN, why string) {
	r.queueNAK(s, p)
	r.dead = true
	r.ooo.reset()
	r.rh, r.rt = 0, 0
	c.fail(now, transport.StatusFlushed, "responder: "+why+", sending "+s.String())
}

// buildControl writes the pending NAK or ACK into b. A NAK acknowledges
// everything before its PSN, so it replaces a pending ACK; a
// sequence-error NAK made stale by the expected packet arriving is
// replaced by an ACK.
func (r *responder) buildControl(c *Conn, b []byte) int {
	const n = ib.BTHSize + ib.AETHSize + ib.ICRCSize
	if !r.nakPending && !r.ackPending || len(b) < n {
		return 0
	}
	syn, psn := ib.SyndromeACK, r.epsn.Add(-1)
	if r.nakPending && !(r.nakSyn == ib.SyndromeNAKSequence && r.nakPSN != r.epsn) {
		syn, psn = r.nakSyn, r.nakPSN
		if syn.Kind() == ib.KindRNR {
			c.stats.RNRNAKsSent++
		} else {
			c.stats.NAKsSent++
		}
	} else {
		c.stats.AcksSent++
	}
	r.nakPending, r.ackPending, r.unacked = false, false, 0
	ib.BTH(b).Encode(&ib.BTHFields{Opcode: ib.OpAcknowledge, PKey: ib.DefaultPKey, DestQP: c.peerQPN, PSN: psn})
	ib.AETH(b[ib.BTHSize:]).Encode(syn, r.msn)
	clear(b[ib.BTHSize+ib.AETHSize : n])
	return n
}

// buildReadResponse writes the next READ response packet into b.
func (r *responder) buildReadResponse(c *Conn, now sim.Time, b []byte) int {
	if r.rh == r.rt {
		return 0
	}
	e := r.read(r.rh)
	idx := e.sent
	pos := ib.PositionOf(idx, e.npkts)
	off := idx * c.mtu
	plen := min(c.mtu, e.length-off)
	op := ib.ReadResponse(pos)
	hl := op.HeaderLen()
	pad := ib.PadFor(plen)
	total := hl + plen + pad + ib.ICRCSize
	if len(b) < total {
		return 0
	}
	psn := e.psn.Add(idx)
	ib.BTH(b).Encode(&ib.BTHFields{Opcode: op, PadCount: pad, PKey: ib.DefaultPKey, DestQP: c.peerQPN, PSN: psn})
	if op.HasAETH() {
		ib.AETH(b[ib.BTHSize:]).Encode(ib.SyndromeACK, r.msn)
	}
	if plen > 0 {
		if st := c.cfg.Memory.Read(b[hl:hl+plen], e.rkey, e.va+uint64(off), transport.AccessRemoteRead); st != transport.StatusOK {
			r.fatal(c, now, ib.SyndromeNAKAccess, psn, "READ source refused by memory")
			return 0
		}
	}
	clear(b[hl+plen : total])
	e.sent++
	if e.sent >= e.npkts {
		r.rh++
	}
	c.stats.ReadResponsesSent++
	return total
}

// flush completes every posted receive with StatusFlushed and forgets
// pending READs. A pending NAK is kept so an errored QP still sends it.
func (r *responder) flush(c *Conn) {
	r.rh, r.rt = 0, 0
	r.ooo.reset()
	r.inMsg = false
	r.ackPending = false
	r.cnpPending = false
	for r.head < r.tail {
		w := r.at(r.head)
		r.head++
		c.done(transport.Completion{ID: w.wr.ID, Op: transport.OpRecv, Status: transport.StatusFlushed})
	}
}

// keep handles a request packet past ePSN under selective repeat: a WRITE
// or SEND within the window is kept for later placement (a READ request,
// or a packet beyond the window, is dropped, to be asked for again), and
// the first packet past a gap NAKs ePSN, the first missing PSN, as the
// requester resends just that PSN; every AckEvery packets past it the NAK
// is repeated, in case it or the resend was lost.
func (r *responder) keep(c *Conn, now sim.Time, pk *ib.Packet, raw []byte) {
	p := pk.BTH.PSN()
	c.stats.OutOfSequence++
	if !r.hiSet || p.Add(1).After(r.hiSeen) {
		r.hiSeen, r.hiSet = p.Add(1), true
	}
	if cl := pk.BTH.Opcode().Class(); (cl == ib.ClassSend || cl == ib.ClassWrite) && r.ooo.put(r.epsn, p, raw) {
		c.stats.OutOfOrderKept++
	}
	if r.srNaked {
		// The NAK or the resend it asked for may be lost: say it again
		// every AckEvery packets past the gap (IRN NAKs every one).
		if r.srSince++; r.srSince >= r.o.AckEvery && !(r.nakPending && r.nakSyn.Kind() == ib.KindRNR) {
			r.srSince = 0
			r.queueNAK(ib.SyndromeNAKSequence, r.epsn)
		}
		return
	}
	r.nakHole(c, now, p)
}

// nakHole queues the sequence-error NAK for ePSN unless it went out.
func (r *responder) nakHole(c *Conn, now sim.Time, p ib.PSN) {
	if r.srNaked || (r.nakPending && r.nakSyn.Kind() == ib.KindRNR) {
		return
	}
	r.srNaked, r.srSince = true, 0
	r.queueNAK(ib.SyndromeNAKSequence, r.epsn)
	if c.tr != nil {
		c.tr.Tracef(now, c.localID, "qp %#x: psn %d past a gap (expected %d), selective repeat: NAK %d", c.qpn, p, r.epsn, r.epsn)
	}
}

// drain places the kept packets that are now in sequence, then NAKs the
// next hole if anything was seen past it.
func (r *responder) drain(c *Conn, now sim.Time) {
	for !r.dead {
		raw, ok := r.ooo.take(r.epsn)
		if !ok {
			break
		}
		var pk ib.Packet
		if pk.Decode(raw) != nil {
			c.stats.Malformed++ // cannot happen: it decoded when kept
			break
		}
		before := r.epsn
		r.accept(c, now, &pk)
		if r.epsn == before {
			break // refused (RNR or a fatal error): the requester goes back
		}
	}
	if r.dead || r.nakPending && r.nakSyn.Kind() == ib.KindRNR {
		return
	}
	if r.ooo.n > 0 || (r.hiSet && r.hiSeen.After(r.epsn)) {
		r.nakHole(c, now, r.epsn)
	} else {
		r.hiSet = false
	}
}
