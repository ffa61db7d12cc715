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

// elidable reports whether b's packet has a synthetic payload worth
// sending header-only (packet.Buffer.Elide): its content runs cover one
// contiguous range, at..at+n of Data(), and what is left fits the pool's
// small class. The bytes under runs are zeros (memView.Read clears them),
// so eliding them changes no byte of the packet.
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
