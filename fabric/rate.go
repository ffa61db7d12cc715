package fabric

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// rateUnits are tc's rate suffixes (iproute2 tc_util.c), matched without
// regard to case as tc does. Note tc's meaning of "bps": BYTES per second,
// so "25gbps" is 200 Gbit/s; write "25gbit" for 25 Gbit/s.
var rateUnits = []struct {
	name  string
	scale float64
}{
	{"bit", 1},
	{"kibit", 1024},
	{"kbit", 1e3},
	{"mibit", 1024 * 1024},
	{"mbit", 1e6},
	{"gibit", 1024 * 1024 * 1024},
	{"gbit", 1e9},
	{"tibit", 1024 * 1024 * 1024 * 1024},
	{"tbit", 1e12},
	{"bps", 8},
	{"kibps", 8 * 1024},
	{"kbps", 8e3},
	{"mibps", 8 * 1024 * 1024},
	{"mbps", 8e6},
	{"gibps", 8 * 1024 * 1024 * 1024},
	{"gbps", 8e9},
	{"tibps", 8 * 1024 * 1024 * 1024 * 1024},
	{"tbps", 8e12},
}

// MaxRate is the highest link rate mrlab accepts (100 Tbit/s); it keeps
// serialization arithmetic in int64 picoseconds far from overflow.
const MaxRate = 100e12

// ParseRate parses a rate in tc's spelling and returns bits per second: a
// number with a unit ("100gbit", "400mbit", "1.5tbit"; a bare number is
// bit/s). Units ignore case. As in tc, the "bps" family means bytes per
// second: "25Gbps" = 25 GB/s = 200 Gbit/s.
func ParseRate(s string) (float64, error) {
	num := strings.TrimRightFunc(s, func(r rune) bool {
		return (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z')
	})
	unit := s[len(num):]
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || num == "" || strings.ContainsAny(num, "xXpP_") {
		return 0, fmt.Errorf("parsing rate %q: bad number %q", s, num)
	}
	scale := 1.0
	if unit != "" {
		found := false
		for _, u := range rateUnits {
			if strings.EqualFold(unit, u.name) {
				scale, found = u.scale, true
				break
			}
		}
		if !found {
			return 0, fmt.Errorf("parsing rate %q: unknown unit %q (want bit, kbit, mbit, gbit, tbit, or tc's bps family = bytes/s)", s, unit)
		}
	}
	r := v * scale
	if math.IsNaN(r) || r < 1 || r > MaxRate {
		return 0, fmt.Errorf("parsing rate %q: %g bit/s is out of range [1bit, 100tbit]", s, r)
	}
	return r, nil
}

// FormatRate writes a rate in bits per second in tc's spelling, choosing the
// largest decimal unit that keeps it exact: 100e9 -> "100gbit",
// 12.5e9 -> "12.5gbit". ParseRate(FormatRate(r)) == r.
func FormatRate(r float64) string {
	for _, u := range [...]struct {
		name  string
		scale float64
	}{{"tbit", 1e12}, {"gbit", 1e9}, {"mbit", 1e6}, {"kbit", 1e3}} {
		v := r / u.scale
		if v < 1 {
			continue
		}
		s := strconv.FormatFloat(v, 'f', -1, 64) + u.name
		if len(s) <= 12 {
			if back, err := ParseRate(s); err == nil && back == r {
				return s
			}
		}
	}
	return strconv.FormatFloat(r, 'f', -1, 64) + "bit"
}
