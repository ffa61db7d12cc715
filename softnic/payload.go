package softnic

import "fmt"

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
