package metaroce

import (
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport/metaroce/wire"
)

// sbKind is what a scoreboard entry carries.
type sbKind uint8

const (
	sbData  sbKind = iota // a chunk (by DSN)
	sbProbe               // a probe or a hole filler: no payload, no DSN
	sbAbort               // a chunk whose message failed: sent as ABORT
)

// sbEntry is one PSN on a path's scoreboard.
type sbEntry struct {
	dsn      uint32
	txSeq    uint32   // path-local transmission order of the latest send
	order    uint32   // connection-wide transmission order of the latest send (lossdetect.go)
	sentAt   sim.Time // when the latest send went
	size     uint16   // payload bytes counted in flight
	kind     sbKind
	acked    bool
	lost     bool // declared lost, waiting to be sent again
	resent   bool // sent more than once: an ACK of it is ambiguous
	presumed bool // out of flight: its path's ACKs stopped (a tail-loss probe went)
	moved    bool // a filler whose chunk was sent again elsewhere: its loss is the chunk's
	refused  bool // a moved filler the receiver NAKed: its arrival placed nothing
}

// maxPathWindow is the most PSNs a path has outstanding: the SACK window.
const maxPathWindow = wire.SACKBits

// scoreboard is what one path generation has outstanding: the PSNs
// [una, nxt), each a chunk, a probe or an ABORT, with whether it was
// acknowledged or declared lost. It knows nothing of chunks, messages or
// congestion: the connection asks it questions and settles entries.
//
// Loss rule. Paths are FIFO, so an entry whose latest transmission went
// out before the latest transmission known to have arrived (maxAckedTx)
// and that is still unacknowledged was lost, not reordered. Only ACKs of
// PSNs sent once move maxAckedTx (Karn): an ACK of a PSN sent twice does
// not say which copy arrived.
//
// Bytes in flight are the payload of entries neither acknowledged nor
// declared lost nor presumed gone (presume). The zero value is an empty
// scoreboard starting at PSN 0.
type scoreboard struct {
	una, nxt   uint32
	ring       []sbEntry // indexed by PSN; len a power of two (or 0)
	txSeq      uint32    // transmissions so far, in order
	maxAckedTx uint32    // latest transmission known to have arrived
	lost       int       // entries declared lost and not yet resent or acked
	inflight   int       // payload bytes in flight (above)
}

// counts reports whether e's bytes are in flight.
func (e *sbEntry) counts() bool { return !e.acked && !e.lost && !e.presumed }

// entry returns the entry of an outstanding PSN.
func (s *scoreboard) entry(psn uint32) *sbEntry { return &s.ring[psn&uint32(len(s.ring)-1)] }

// outstanding reports whether psn is in [una, nxt).
func (s *scoreboard) outstanding(psn uint32) bool {
	return wire.Seq(psn).In(wire.Seq(s.una), wire.Seq(s.nxt))
}

// empty reports whether nothing is outstanding.
func (s *scoreboard) empty() bool { return s.una == s.nxt }

// room reports whether one more PSN fits the SACK window.
func (s *scoreboard) room() bool { return wire.Seq(s.una).Span(wire.Seq(s.nxt)) < maxPathWindow }

// push sends a new PSN carrying e and returns it; e's size counts in
// flight.
func (s *scoreboard) push(e sbEntry) uint32 {
	span := int(wire.Seq(s.una).Span(wire.Seq(s.nxt)))
	if span+1 > len(s.ring) {
		s.grow(span + 1)
	}
	s.txSeq++
	e.txSeq = s.txSeq
	psn := s.nxt
	s.nxt++
	*s.entry(psn) = e
	s.inflight += int(e.size)
	return psn
}

func (s *scoreboard) grow(n int) {
	size := max(len(s.ring), 4)
	for size < n {
		size *= 2
	}
	s.ring = regrow(s.ring, size, s.una, s.nxt)
}

// strip makes an outstanding entry payload-free (a hole filler or an
// ABORT) of the given kind and returns the bytes that left flight.
func (s *scoreboard) strip(psn uint32, kind sbKind) int {
	e := s.entry(psn)
	n := 0
	if e.counts() {
		n = int(e.size)
		s.inflight -= n
	}
	e.kind, e.size = kind, 0
	return n
}

// move makes an outstanding chunk's entry a filler because the chunk is
// sent again under another PSN (a tail-loss probe, a move to another
// path); if the filler turns out lost, so did that transmission of the
// chunk. It returns the bytes that left flight.
func (s *scoreboard) move(psn uint32) int {
	n := s.strip(psn, sbProbe)
	s.entry(psn).moved = true
	return n
}

// ack settles psn (which must be outstanding). It returns the entry,
// whether it was newly acknowledged, and the bytes that left flight (0
// for an entry already declared lost: its bytes left then).
func (s *scoreboard) ack(psn uint32) (e *sbEntry, newly bool, left int) {
	e = s.entry(psn)
	if e.acked {
		return e, false, 0
	}
	if e.counts() {
		left = int(e.size)
		s.inflight -= left
	}
	e.acked = true
	if e.lost {
		e.lost = false
		s.lost-- // it arrived after all
	}
	if !e.resent && wire.Seq(e.txSeq).After(wire.Seq(s.maxAckedTx)) {
		s.maxAckedTx = e.txSeq
	}
	return e, true, left
}

// advance moves una past the acknowledged prefix.
func (s *scoreboard) advance() {
	for s.una != s.nxt && s.entry(s.una).acked {
		s.una++
	}
}

// markLost declares an outstanding entry lost and returns the bytes that
// left flight.
func (s *scoreboard) markLost(psn uint32) int {
	e := s.entry(psn)
	if e.lost || e.acked {
		return 0
	}
	n := 0
	if e.counts() {
		n = int(e.size)
		s.inflight -= n
	}
	e.lost = true
	s.lost++
	return n
}

// presume takes every outstanding entry out of flight without declaring
// it lost (the path's ACKs have stopped: a tail-loss probe is going out)
// and returns the bytes that left. What is presumed is resent only once
// it is declared lost.
func (s *scoreboard) presume() int {
	n := 0
	for psn := s.una; psn != s.nxt; psn++ {
		if e := s.entry(psn); e.counts() {
			n += int(e.size)
			e.presumed = true
		}
	}
	s.inflight -= n
	return n
}

// detectLoss declares lost every outstanding entry whose latest
// transmission went out before the latest one known to have arrived. It
// calls found (if not nil) with each PSN and returns how many it declared
// and the bytes that left flight.
func (s *scoreboard) detectLoss(found func(psn uint32)) (n, left int) {
	for psn := s.una; psn != s.nxt; psn++ {
		e := s.entry(psn)
		if e.acked || e.lost || !wire.Seq(e.txSeq).Before(wire.Seq(s.maxAckedTx)) {
			continue
		}
		left += s.markLost(psn)
		n++
		if found != nil {
			found(psn)
		}
	}
	return n, left
}

// nextLost returns the first entry declared lost and not yet resent.
func (s *scoreboard) nextLost() (psn uint32, ok bool) {
	if s.lost == 0 {
		return 0, false
	}
	for psn := s.una; psn != s.nxt; psn++ {
		if e := s.entry(psn); e.lost && !e.acked {
			return psn, true
		}
	}
	s.lost = 0 // nothing was actually lost: resynchronize
	return 0, false
}

// resend records that a lost entry is sent again under the same PSN at
// now, the connection's transmission order: it is back in flight with a
// new transmission order, and its ACK will be ambiguous.
func (s *scoreboard) resend(psn uint32, now sim.Time, order uint32) {
	e := s.entry(psn)
	e.sentAt, e.order = now, order
	if e.lost {
		e.lost = false
		s.lost--
	}
	e.resent, e.presumed = true, false
	s.txSeq++
	e.txSeq = s.txSeq
	s.inflight += int(e.size)
}

// restart empties the scoreboard for a new path generation (PSNs restart
// at 0). Transmissions before it never count as arrived on the new one.
func (s *scoreboard) restart() {
	s.una, s.nxt, s.lost, s.inflight = 0, 0, 0, 0
	s.maxAckedTx = s.txSeq
}

// flush forgets everything outstanding (the connection is closing).
func (s *scoreboard) flush() {
	s.una, s.inflight, s.lost = s.nxt, 0, 0
}
