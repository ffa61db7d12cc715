package softnic

import (
	"fmt"

	"github.com/mrlab/mrlab/internal/packet"
)

// PayloadMode is how a run holds payload: as real bytes in memory regions
// and packets, or as synthetic content streams that are checked as exactly
// but neither stored nor copied (see MR). It is the workload's choice of
// which kind of region to register; the NIC's DMA engine handles both, and
// transports do not know which runs.
type PayloadMode uint8

// Payload modes. The zero value is PayloadBytes.
const (
	// PayloadBytes: every byte is real and copied (integrity tests, live
	// labs, captures whose payload matters).
	PayloadBytes PayloadMode = iota
	// PayloadSynthetic: regions hold content streams, packets carry which
	// stream each range holds and zeros on the wire.
	PayloadSynthetic
)

func (m PayloadMode) String() string {
	switch m {
	case PayloadBytes:
		return "bytes"
	case PayloadSynthetic:
		return "synthetic"
	}
	return fmt.Sprintf("PayloadMode(%d)", uint8(m))
}

// moveRuns gives dst, a copy of src's packet bytes from its start, src's
// content runs: without them a small packet copied out of the buffer it
// was built in (sendOne) would reach the peer as zeros.
func moveRuns(dst, src *packet.Buffer) {
	if len(src.Synthetic) == 0 {
		return
	}
	d, _ := dst.Offset(dst.Data())
	s, _ := src.Offset(src.Data())
	for _, r := range src.Synthetic {
		r.Off += int32(d - s)
		dst.Synthetic = append(dst.Synthetic, r)
	}
}

// finishTx returns the buffer that carries the k-byte transport packet
// built in b (dmaTx while it was built): a small packet copied out of it,
// a synthetic payload elided (header-only, when elide: no sealer reads
// the whole packet), or b itself. The zeros ReadLazy left unwritten are
// written where the packet carries its bytes.
func (n *NIC) finishTx(b *packet.Buffer, k int, elide bool) *packet.Buffer {
	if k <= smallPacket-IPv4UDPSize {
		if n.txLazy {
			n.txZeros(b, k)
		}
		s := n.pool.Get(IPv4UDPSize + k)
		s.SetLen(k)
		copy(s.Data(), b.Data()[:k])
		moveRuns(s, b)
		b.Free()
		return s
	}
	b.SetLen(k)
	if at, m, ok := elidable(b); ok && elide && (!n.txLazy || n.txSpanIs(b, m)) {
		// Synthetic payload: send the headers and the trailer in a
		// small buffer, the payload as a length.
		return b.Elide(at, m)
	}
	if n.txLazy {
		n.txZeros(b, k)
	}
	return b
}

// settleTx is ZeroSpan's part after ReadLazy in p, the packet being
// built: the zeros of p's content runs that lie in b but outside the
// span [at, at+z) of b it reports are written (its caller reads them),
// and the span is noted for finishTx.
func (n *NIC) settleTx(p *packet.Buffer, b []byte, at, z int) {
	base, ok := p.Offset(b)
	if !ok {
		n.txAsked, n.txZeroN = true, 0 // not the packet: no span
		return
	}
	if z == 0 {
		at = len(b)
	}
	for _, r := range p.Synthetic {
		s, e := max(int(r.Off)-base, 0), min(int(r.Off+r.Len)-base, len(b))
		if lo, hi := s, min(e, at); lo < hi {
			clear(b[lo:hi])
		}
		if lo, hi := max(s, at+z), e; lo < hi {
			clear(b[lo:hi])
		}
	}
	n.txAsked, n.txZero, n.txZeroN = true, base+at, z
}

// txSpanIs reports whether the range of b's runs, m bytes from the first
// run on (elidable), is the span ZeroSpan last reported: with ReadLazy,
// only those bytes are known to stand for zeros (the transport may have
// written over other runs' bytes since, as a trailer over an aborted
// packet's).
func (n *NIC) txSpanIs(b *packet.Buffer, m int) bool {
	return n.txAsked && n.txZeroN == m && n.txZero == int(b.Synthetic[0].Off)
}

// txZeros writes into b's k-byte packet the zeros ReadLazy left unwritten:
// those of ZeroSpan's span, or, if the transport never asked (breaking
// ZeroSpanner's contract), those of every content run.
func (n *NIC) txZeros(b *packet.Buffer, k int) {
	base, _ := b.Offset(b.Data())
	d := b.Data()[:k]
	if n.txAsked {
		if s, e := max(n.txZero-base, 0), min(n.txZero+n.txZeroN-base, k); s < e {
			clear(d[s:e])
		}
		return
	}
	for _, r := range b.Synthetic {
		if s, e := max(int(r.Off)-base, 0), min(int(r.Off+r.Len)-base, k); s < e {
			clear(d[s:e])
		}
	}
}

// elidable reports whether b's packet has a synthetic payload worth
// sending header-only (packet.Buffer.Elide): its content runs cover one
// contiguous range, at..at+n of Data(), and what is left fits the pool's
// small class. The bytes under runs stand for zeros (Read clears them;
// after ReadLazy, finishTx checks they are ZeroSpan's span), so eliding
// them changes no byte of the packet.
func elidable(b *packet.Buffer) (at, n int, ok bool) {
	runs := b.Synthetic
	if len(runs) == 0 {
		return 0, 0, false
	}
	base, _ := b.Offset(b.Data())
	at = int(runs[0].Off) - base
	end := int(runs[0].Off)
	for _, r := range runs {
		if int(r.Off) != end || r.Len <= 0 {
			return 0, 0, false
		}
		end += int(r.Len)
	}
	n = end - int(runs[0].Off)
	if at < 0 || at+n > b.Len() || b.Len()-n > smallPacket-IPv4UDPSize {
		return 0, 0, false
	}
	return at, n, true
}

// ParsePayloadMode parses "bytes" or "synthetic".
func ParsePayloadMode(s string) (PayloadMode, error) {
	switch s {
	case "bytes":
		return PayloadBytes, nil
	case "synthetic":
		return PayloadSynthetic, nil
	}
	return 0, fmt.Errorf("unknown payload mode %q (want synthetic or bytes)", s)
}
