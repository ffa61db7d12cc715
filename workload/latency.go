package workload

import (
	"fmt"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/softnic"
	"github.com/mrlab/mrlab/transport"
)

// latSlots is how many destination slots each side of a latency test
// rotates through.
const latSlots = 16

// latEngine runs perftest's latency tests, one message in flight:
//
//   - write_lat: the client WRITEs a message to the server; when it has
//     landed (the server sees a WRITE_IMM completion — perftest polls the
//     last byte instead) the server WRITEs one back.
//   - send_lat: the same ping-pong with SENDs into posted receives.
//   - read_lat: the client READs a message from the server; the next READ
//     goes out when the previous one completed.
//
// The next ping is posted when the previous answer arrived, so the times
// between successive pings are round trips; the figures come from them as
// perftest computes them (latencyDist).
type latEngine struct {
	r       *runner
	spec    Spec
	op      transport.Op
	sides   [2]*latSide // client, server
	iter    int64
	posted  sim.Time
	pings   []sim.Time // post time of every ping
	req     *connReq
	stopped bool // a duration run's time is up
}

// latSide is one end of the ping-pong.
type latSide struct {
	e    *latEngine
	host int
	peer *latSide
	conn func() *softnic.Conn
	// src holds latSlots messages to send (read_lat: the server's slots
	// the client reads, filled once); dst latSlots destination slots with
	// guards.
	src, dst *softnic.MR
	free     []int   // source slots whose send completed
	last     []int64 // by destination slot: the message it holds, or -1
	watch    *slots  // the data oracle's view of dst
	recvs    int64   // receives posted (send_lat: they fill dst in turn)
	side     int
	stalled  bool // a reply is due but no slot is free yet
	pend     int64
}

func newLat(spec Spec) *latEngine {
	e := &latEngine{spec: spec, op: transport.OpWriteImm}
	switch spec.Name {
	case SendLat:
		e.op = transport.OpSendImm
	case ReadLat:
		e.op = transport.OpRead
	}
	return e
}

func (e *latEngine) setup(r *runner) error {
	e.r = r
	from, to := 0, len(r.cl.Hosts)-1
	if len(e.spec.From) > 0 {
		from = r.cl.index(e.spec.From[0])
	}
	if len(e.spec.To) > 0 {
		to = r.cl.index(e.spec.To[0])
	}
	if len(e.spec.From) > 1 || len(e.spec.To) > 1 || from == to {
		return fmt.Errorf("%w: %s runs between two distinct hosts", ErrBadSpec, e.spec.Name)
	}
	size := e.spec.Size
	stride := size + guard
	for i, h := range []int{from, to} {
		s := &latSide{e: e, host: h, side: i}
		var err error
		srcAccess := transport.AccessLocalWrite
		if e.op == transport.OpRead {
			srcAccess |= transport.AccessRemoteRead
		}
		if s.src, err = r.register(h, latSlots*size, srcAccess); err != nil {
			return err
		}
		if s.dst, err = r.register(h, latSlots*stride, transport.AccessLocalWrite|transport.AccessRemoteWrite); err != nil {
			return err
		}
		for j := latSlots - 1; j >= 0; j-- {
			s.free = append(s.free, j)
		}
		s.last = make([]int64, latSlots)
		for j := range s.last {
			s.last[j] = -1
		}
		r.source[h] = e.op != transport.OpRead || i == 1
		s.watch = r.oracle.watch(s.dst, latSlots, size, stride, func(j int) string {
			return fmt.Sprintf("%s slot %d (last message completed there: %d)", r.cl.Hosts[h], j, s.last[j])
		})
		e.sides[i] = s
	}
	e.sides[0].peer, e.sides[1].peer = e.sides[1], e.sides[0]
	if e.op == transport.OpRead {
		srv := e.sides[1]
		for j := 0; j < latSlots; j++ {
			srv.src.Fill(j*size, size, srv.seed(int64(j)))
		}
	}
	e.req = r.connect(from, to, e.sides[0], e.sides[1])
	e.sides[0].conn = func() *softnic.Conn { return e.req.dial }
	e.sides[1].conn = func() *softnic.Conn { return e.req.acc }
	return nil
}

func (e *latEngine) start(now sim.Time) {
	var lmr, rmr *softnic.MR
	switch e.op {
	case transport.OpWriteImm:
		lmr, rmr = e.sides[0].dst, e.sides[1].dst
	case transport.OpRead:
		lmr, rmr = e.sides[0].dst, e.sides[1].src
	}
	e.r.res.QPs = []QPInfo{qpInfo(e.req, lmr, rmr)}
	if e.spec.Duration > 0 {
		e.r.cl.Loop.At(now+e.spec.Duration, func(sim.Time) { e.stopped = true })
	}
	if e.op != transport.OpRead {
		for _, s := range e.sides {
			if !s.postRecv() {
				return
			}
		}
	}
	e.ping(now)
}

// ping starts the next round trip.
func (e *latEngine) ping(now sim.Time) {
	e.posted = now
	e.pings = append(e.pings, now)
	e.r.recordPost(now)
	if e.op == transport.OpRead {
		e.sides[0].read(e.iter)
		return
	}
	e.sides[0].write(now, e.iter)
}

// read READs the server's slot msg%latSlots into the client's slot of the
// same number.
func (s *latSide) read(msg int64) {
	size := s.e.spec.Size
	slot := int(msg % latSlots)
	s.watch.expect(slot)
	wr := transport.WorkRequest{ID: uint64(slot), Op: transport.OpRead, NumSGE: 1,
		RemoteAddr: s.peer.src.Addr() + uint64(slot*size), RKey: s.peer.src.RKey()}
	wr.SGL[0] = s.dst.SGE(slot*(size+guard), size)
	if err := s.conn().PostSend(&wr); err != nil {
		s.e.r.fail(fmt.Errorf("%s: posting READ: %w", s.e.spec.Name, err))
	}
}

// write sends message msg to the peer (WRITE_IMM or SEND_IMM), if a
// source slot is free. The immediate carries the message number and, for
// WRITE_IMM, the destination slot.
func (s *latSide) write(now sim.Time, msg int64) {
	if len(s.free) == 0 {
		s.stalled, s.pend = true, msg
		return
	}
	slot := s.free[len(s.free)-1]
	s.free = s.free[:len(s.free)-1]
	size := s.e.spec.Size
	s.src.Fill(slot*size, size, s.seed(msg))
	wr := transport.WorkRequest{ID: uint64(slot), Op: s.e.op, NumSGE: 1, Imm: uint32(msg)<<8 | uint32(slot)}
	if s.e.op == transport.OpWriteImm {
		s.peer.watch.expect(slot)
		wr.RemoteAddr = s.peer.dst.Addr() + uint64(slot*(size+guard))
		wr.RKey = s.peer.dst.RKey()
	}
	wr.SGL[0] = s.src.SGE(slot*size, size)
	if err := s.conn().PostSend(&wr); err != nil {
		s.e.r.fail(fmt.Errorf("%s: posting %s: %w", s.e.spec.Name, s.e.op, err))
	}
}

// seed names the contents of message msg sent by this side (read_lat:
// of the server's slot msg).
func (s *latSide) seed(msg int64) uint64 { return msgSeed(s.e.spec.Seed, s.side, msg) }

// postRecv posts the next receive: for send_lat into the next destination
// slot in turn (the k-th receive holds the k-th message, as one message is
// in flight at a time), for write_lat without buffers (it only takes the
// immediate).
func (s *latSide) postRecv() bool {
	wr := transport.WorkRequest{ID: 1 << 32, Op: transport.OpRecv}
	if s.e.op == transport.OpSendImm {
		size := s.e.spec.Size
		slot := int(s.recvs % latSlots)
		s.watch.expect(slot)
		wr.ID = uint64(slot)
		wr.NumSGE = 1
		wr.SGL[0] = s.dst.SGE(slot*(size+guard), size)
	}
	if err := s.conn().PostRecv(&wr); err != nil {
		s.e.r.fail(fmt.Errorf("%s: posting RECV: %w", s.e.spec.Name, err))
		return false
	}
	s.recvs++
	return true
}

func (s *latSide) complete(now sim.Time, wc *softnic.Completion) {
	e := s.e
	if wc.Status != transport.StatusOK {
		e.r.bad(wc, "failed")
		e.r.finish(now)
		return
	}
	switch wc.Op {
	case transport.OpRead:
		slot := int(wc.ID)
		s.watch.complete(slot, e.spec.Size, s.peer.seed(int64(slot)))
		s.last[slot] = int64(slot)
		e.pong(now)
	case transport.OpWriteImm, transport.OpWrite, transport.OpSendImm, transport.OpSend:
		s.free = append(s.free, int(wc.ID))
		if s.stalled {
			s.stalled = false
			s.write(now, s.pend)
		}
	case transport.OpRecvImm, transport.OpRecv:
		if !wc.HasImm {
			e.r.bad(wc, "receive without immediate")
			return
		}
		msg, slot := int64(wc.Imm>>8), int(wc.Imm&0xff)
		if e.op == transport.OpSendImm {
			slot = int(wc.ID)
			if int(wc.Bytes) != e.spec.Size {
				e.r.bad(wc, fmt.Sprintf("short (%d of %d bytes)", wc.Bytes, e.spec.Size))
			}
		}
		if slot < latSlots {
			n := e.spec.Size
			if e.op == transport.OpSendImm {
				n = min(n, int(wc.Bytes))
			}
			s.watch.complete(slot, n, s.peer.seed(msg))
			s.last[slot] = msg
		}
		if !s.postRecv() {
			return
		}
		if s.side == 1 {
			s.write(now, msg) // pong
			return
		}
		e.pong(now)
	}
}

// pong ends a round trip at the client and starts the next, or finishes.
func (e *latEngine) pong(now sim.Time) {
	e.r.message(now, e.posted, e.spec.Size)
	e.iter++
	if (e.spec.Duration > 0 && !e.stopped) || (e.spec.Duration == 0 && e.iter < int64(e.spec.Iterations)) {
		e.ping(now)
		return
	}
	e.r.flowDone(now - e.r.t0)
	factor := 2
	if e.op == transport.OpRead {
		factor = 1
	}
	res := &e.r.res
	res.Latency = new(Dist)
	if e.spec.Duration > 0 {
		// perftest's duration line: the measured window over the round
		// trips completed in it.
		win := e.spec.Duration - 2*e.spec.Margin
		if n := e.r.winMsgs; n > 0 {
			*res.Latency = Dist{N: int(n), Mean: win / sim.Time(n) / sim.Time(factor)}
			res.TPS = float64(n) / win.Seconds()
		}
	} else {
		deltas := make([]sim.Time, 0, len(e.pings)-1)
		for i := 1; i < len(e.pings); i++ {
			deltas = append(deltas, e.pings[i]-e.pings[i-1])
		}
		*res.Latency = latencyDist(deltas, factor)
	}
	e.r.finish(now)
}

func (e *latEngine) verify() DataCheck {
	dc := DataCheck{OK: true}
	size := e.spec.Size
	for _, s := range e.sides {
		mem := s.dst
		for j := 0; j < latSlots; j++ {
			m := s.last[j]
			dc.checkSlot(mem, j*(size+guard), size, size+guard, m >= 0, s.peer.seed(m), func() string {
				return fmt.Sprintf("%s slot %d holding message %d", e.r.cl.Hosts[s.host], j, m)
			})
		}
	}
	return dc
}

func (e *latEngine) outstanding() string {
	if e.spec.Duration > 0 {
		return fmt.Sprintf("%d round trips done", e.iter)
	}
	return fmt.Sprintf("%d of %d round trips done", e.iter, e.spec.Iterations)
}
