package workload

import (
	"fmt"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/softnic"
	"github.com/mrlab/mrlab/transport"
)

// latSlots is how many destination slots each side of write_lat rotates
// through.
const latSlots = 16

// latEngine is write_lat: ib_write_lat's ping-pong. The client WRITEs a
// message to the server; when it has landed (the server sees a WRITE_IMM
// completion — perftest polls the last byte instead) the server WRITEs one
// back; the round trip over two is the one-way latency.
type latEngine struct {
	r      *runner
	spec   Spec
	sides  [2]*latSide // client, server
	iter   int64
	posted sim.Time
	lat    []sim.Time
	req    *connReq
}

// latSide is one end of the ping-pong.
type latSide struct {
	e       *latEngine
	host    int
	peer    *latSide
	conn    func() *softnic.Conn
	src     *softnic.MR // latSlots source slots
	dst     *softnic.MR // latSlots destination slots + guards
	free    []int       // source/destination slots whose WRITE completed
	last    []int64     // by destination slot
	side    int
	stalled bool // a reply is due but no slot is free yet
	pend    int64
}

func newLat(spec Spec) *latEngine { return &latEngine{spec: spec} }

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
		return fmt.Errorf("%w: write_lat runs between two distinct hosts", ErrBadSpec)
	}
	stride := e.spec.Size + guard
	for i, h := range []int{from, to} {
		s := &latSide{e: e, host: h, side: i}
		var err error
		if s.src, err = r.register(h, latSlots*e.spec.Size, transport.AccessLocalWrite); err != nil {
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
		r.source[h] = true
		e.sides[i] = s
	}
	e.sides[0].peer, e.sides[1].peer = e.sides[1], e.sides[0]
	e.req = r.connect(from, to, e.sides[0], e.sides[1])
	e.sides[0].conn = func() *softnic.Conn { return e.req.dial }
	e.sides[1].conn = func() *softnic.Conn { return e.req.acc }
	return nil
}

func (e *latEngine) start(now sim.Time) {
	for _, s := range e.sides {
		if !s.postRecv() {
			return
		}
	}
	e.ping(now)
}

// ping starts the next round trip.
func (e *latEngine) ping(now sim.Time) {
	e.posted = now
	e.sides[0].write(now, e.iter)
}

// write sends message msg to the peer, if a slot is free.
func (s *latSide) write(now sim.Time, msg int64) {
	if len(s.free) == 0 {
		s.stalled, s.pend = true, msg
		return
	}
	slot := s.free[len(s.free)-1]
	s.free = s.free[:len(s.free)-1]
	size := s.e.spec.Size
	fill(s.src.Bytes()[slot*size:(slot+1)*size], s.seed(msg))
	wr := transport.WorkRequest{ID: uint64(slot), Op: transport.OpWriteImm, NumSGE: 1,
		RemoteAddr: s.peer.dst.Addr() + uint64(slot*(size+guard)), RKey: s.peer.dst.RKey(),
		Imm: uint32(msg)<<8 | uint32(slot)}
	wr.SGL[0] = s.src.SGE(slot*size, size)
	if err := s.conn().PostSend(&wr); err != nil {
		s.e.r.fail(fmt.Errorf("write_lat: posting WRITE_IMM: %w", err))
	}
}

// seed names the contents of message msg sent by this side.
func (s *latSide) seed(msg int64) uint64 { return msgSeed(s.e.spec.Seed, s.side, msg) }

func (s *latSide) postRecv() bool {
	wr := transport.WorkRequest{ID: 1 << 32, Op: transport.OpRecv}
	if err := s.conn().PostRecv(&wr); err != nil {
		s.e.r.fail(fmt.Errorf("write_lat: posting RECV: %w", err))
		return false
	}
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
	case transport.OpWriteImm, transport.OpWrite:
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
		if slot < latSlots {
			s.last[slot] = msg
		}
		if !s.postRecv() {
			return
		}
		if s.side == 1 {
			s.write(now, msg) // pong
			return
		}
		rtt := now - e.posted
		e.lat = append(e.lat, rtt/2)
		e.r.message(now, e.posted, e.spec.Size)
		e.iter++
		if e.iter < int64(e.spec.Iterations) {
			e.ping(now)
			return
		}
		e.r.flowDone(now - e.r.t0)
		e.r.res.Latency = new(Dist)
		*e.r.res.Latency = summarize(e.lat)
		e.r.finish(now)
	}
}

func (e *latEngine) verify() DataCheck {
	dc := DataCheck{OK: true}
	size := e.spec.Size
	for _, s := range e.sides {
		mem := s.dst.Bytes()
		for j := 0; j < latSlots; j++ {
			m := s.last[j]
			dc.checkSlot(mem[j*(size+guard):(j+1)*(size+guard)], size, m >= 0, s.peer.seed(m), func() string {
				return fmt.Sprintf("%s slot %d holding message %d", e.r.cl.Hosts[s.host], j, m)
			})
		}
	}
	return dc
}

func (e *latEngine) outstanding() string {
	return fmt.Sprintf("%d of %d round trips done", e.iter, e.spec.Iterations)
}
