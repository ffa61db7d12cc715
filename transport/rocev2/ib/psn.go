package ib

// PSN is a 24-bit packet sequence number. Arithmetic wraps modulo 2^24 and
// comparisons are made within half the space (2^23), as IB requires of
// requesters and responders.
type PSN uint32

// PSNMask keeps the 24 bits of a PSN.
const PSNMask = 1<<24 - 1

// psnHalf is half the sequence space: the farthest two PSNs may be apart
// and still compare meaningfully.
const psnHalf = 1 << 23

// Add returns p+n modulo 2^24 (n may be negative).
func (p PSN) Add(n int) PSN { return PSN(uint32(int64(p)+int64(n)) & PSNMask) }

// Diff returns the signed distance p-q in [-2^23, 2^23).
func (p PSN) Diff(q PSN) int {
	d := (uint32(p) - uint32(q)) & PSNMask
	if d >= psnHalf {
		return int(d) - 1<<24
	}
	return int(d)
}

// Before reports whether p comes before q (within half the space).
func (p PSN) Before(q PSN) bool { return p.Diff(q) < 0 }

// After reports whether p comes after q (within half the space).
func (p PSN) After(q PSN) bool { return p.Diff(q) > 0 }

// InRange reports whether lo <= p < hi in sequence order.
func (p PSN) InRange(lo, hi PSN) bool {
	return p.Diff(lo) >= 0 && p.Diff(hi) < 0
}
