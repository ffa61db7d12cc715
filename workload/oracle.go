package workload

import (
	"fmt"

	"github.com/mrlab/mrlab/softnic"
)

// The data oracle checks every message at the instant its completion is
// reported, on top of the end-of-run check of destination memory (which
// only sees each slot's final image). Destination memory is cut into
// slots (message plus guard); a slot is open from the post of the message
// headed into it (the receive, for a SEND) to that message's completion.
//
//   - At a completion the whole message is compared with the content
//     stream it was sent from (for a WRITE, the responder's memory when
//     the requester's completion is reported; for a READ, the requester's
//     own): a completion reported before every byte was placed, or with
//     bytes from another message or offset, fails there, with the offset
//     of the first wrong byte.
//   - Every placement the NIC makes into watched memory is reported
//     (softnic.MR.OnPlace): one into a closed slot (its message already
//     completed, or none is headed there) or into a guard fails, with the
//     offset of the first byte placed there.
//
// Content streams are keyed by (run seed, connection, message) and do not
// repeat at any stride (softnic/pattern.go), so a chunk from the wrong
// offset or message never passes. Synthetic regions are checked exactly
// too: each range's stream and position are compared.

// oracleOff turns the per-message checks and the placement watch off:
// BenchmarkOracleCost's baseline only (the end-of-run check still runs).
// Set it before a run, never during one.
var oracleOff bool

// oracle counts the checks and failures of a run.
type oracle struct {
	checks, bytes, failures int64
	first                   string
}

func (o *oracle) fail(what func() string) {
	o.failures++
	if o.first == "" {
		o.first = what()
	}
}

// report adds the oracle's counts to a data check.
func (o *oracle) report(dc *DataCheck) {
	dc.Messages, dc.MessageBytes, dc.Failures = o.checks, o.bytes, o.failures
	if o.failures > 0 {
		dc.OK = false
		dc.FirstFailure = o.first
		if dc.FirstBad == "" {
			dc.FirstBad = o.first
		}
	}
}

// slots is one watched destination region: n slots of stride bytes, the
// first size of each for a message, the rest a guard.
type slots struct {
	o            *oracle
	mr           *softnic.MR
	size, stride int
	open         []bool
	// name describes slot i for a failure ("flow 2 (h0->h3) slot 5
	// holding message 17"); it runs only for the first failure.
	name func(i int) string
}

// watch starts watching a destination region of n slots.
func (o *oracle) watch(mr *softnic.MR, n, size, stride int, name func(i int) string) *slots {
	s := &slots{o: o, mr: mr, size: size, stride: stride, open: make([]bool, n), name: name}
	if !oracleOff {
		mr.OnPlace(s.placed)
	}
	return s
}

// expect opens slot i: a message is headed into it.
func (s *slots) expect(i int) { s.open[i] = true }

// placed checks a placement of n bytes at off.
func (s *slots) placed(off, n int) {
	i := off / s.stride
	in := off - i*s.stride
	switch {
	case i >= len(s.open) || !s.open[i]:
		s.o.fail(func() string {
			if i >= len(s.open) {
				return fmt.Sprintf("%d bytes placed at offset %d, past the last slot", n, off)
			}
			return fmt.Sprintf("%s: byte %d placed while no message was due (after its completion)", s.name(i), in)
		})
	case in+n > s.size:
		s.o.fail(func() string {
			return fmt.Sprintf("%s: byte %d placed, in the guard after the %d-byte message", s.name(i), max(in, s.size), s.size)
		})
	}
}

// complete checks slot i at its message's completion: its first bytes
// bytes must hold the stream named by seed. It closes the slot.
func (s *slots) complete(i, bytes int, seed uint64) {
	s.open[i] = false
	if oracleOff {
		return
	}
	s.o.checks++
	s.o.bytes += int64(bytes)
	if d := s.mr.FirstDiff(i*s.stride, bytes, seed); d >= 0 {
		s.o.fail(func() string {
			return fmt.Sprintf("%s: completed with byte %d of %d wrong", s.name(i), d, bytes)
		})
	}
}
