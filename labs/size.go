package labs

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// maxSize bounds sizes in lab files (1 TiB): anything larger is a typo,
// and it keeps byte counts far from int overflow.
const maxSize = 1 << 40

// sizeUnits are the suffixes ParseSize accepts, longest first so "KiB" is
// tried before "B". Matching is case-insensitive. Sizes read as tc reads
// them (tc(8): "kb or k: kilobytes", 1024 bytes): k, kb and KiB all mean
// 1024, m, mb and MiB 1024², g, gb and GiB 1024³ — one reading in lab
// files, every CLI flag and the examples, so "64K", "64KB" and "64KiB"
// never mean different things in different places. Rates are not sizes:
// they keep tc's decimal kbit/mbit/gbit (fabric.ParseRate).
var sizeUnits = []struct {
	suffix string
	mult   float64
}{
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30},
	{"kb", 1 << 10}, {"mb", 1 << 20}, {"gb", 1 << 30},
	{"k", 1 << 10}, {"m", 1 << 20}, {"g", 1 << 30},
	{"b", 1},
}

// ParseSize parses a byte count: "512KiB", "1MB", "1.5MiB", "64kb", "64K",
// "9000" (plain bytes) or "9000B". Every unit is a power of 1024, as in tc
// (see sizeUnits). The result is rounded to a whole byte.
func ParseSize(s string) (int, error) {
	t := strings.TrimSpace(s)
	lower := strings.ToLower(t)
	mult := 1.0
	for _, u := range sizeUnits {
		if num, ok := strings.CutSuffix(lower, u.suffix); ok {
			t, mult = strings.TrimSpace(num), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("parsing size %q: want a number with an optional unit (B, K/KB/KiB, M/MB/MiB, G/GB/GiB: powers of 1024, as tc reads them)", s)
	}
	b := math.Round(v * mult)
	if b < 0 || b > maxSize {
		return 0, fmt.Errorf("parsing size %q: out of range (0 to 1TiB)", s)
	}
	return int(b), nil
}

// FormatSize prints a byte count the way lab files write it: "512KiB",
// "1MiB", "1500B".
func FormatSize(n int) string {
	for _, u := range []struct {
		name string
		mult int
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.mult && n%u.mult == 0 {
			return strconv.Itoa(n/u.mult) + u.name
		}
	}
	return strconv.Itoa(n) + "B"
}
