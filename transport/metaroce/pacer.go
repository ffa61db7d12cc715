package metaroce

import (
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport/metaroce/wire"
)

// pacer spaces a connection's data packets at its rate R when R is below
// the line rate, with no burst allowance: 63 senders each allowed two
// packets back to back put 530 KB at once into a 512 KiB queue. A packet
// without payload (a probe, a hole filler, an ABORT) is not paced and does
// not delay the next one: it adds nothing to the receiver's load. The
// connection computes R (cc.go); the pacer only keeps time.
type pacer struct {
	next sim.Time // earliest time the next data packet may go
}

// wait reports whether a data packet must wait at now, and until when.
func (p *pacer) wait(now sim.Time) (until sim.Time, ok bool) { return p.next, now < p.next }

// sent accounts a packet of n MetaRoCE bytes (headers, payload, trailer)
// sent at now at rate bytes/s on a line of line bytes/s: the next data
// packet waits the packet's time on the wire at rate.
func (p *pacer) sent(now sim.Time, n int, rate, line float64) {
	if n <= wire.DataSize+wire.TrailerSize || rate >= line {
		return
	}
	gap := sim.Time(float64(n+ipUDPOverhead) / rate * float64(sim.Second))
	p.next = max(p.next, now) + gap
}

// release lets the next data packet go at once (the rate it was paced at
// is gone).
func (p *pacer) release(now sim.Time) { p.next = min(p.next, now) }

// speedUp shortens the rest of a gap computed at rate from in proportion
// when the rate rises to to: it must not keep waiting out a gap computed at
// the old, lower rate. (Ending the gap at once let 63 senders, whose hints
// move up and down a few percent as the receiver's water-filling follows
// their demands, each send early on every small rise.)
func (p *pacer) speedUp(now sim.Time, from, to float64) {
	if to > from && p.next > now {
		p.next = now + sim.Time(float64(p.next-now)*from/to)
	}
}
