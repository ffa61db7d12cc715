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
