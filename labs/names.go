package labs

import (
	"fmt"
	"strings"

	"github.com/mrlab/mrlab/fabric"
)

// MaxNameLen is the longest lab name: a lab's name becomes part of its
// namespaces' and state files' names (mrl-LAB-HOST, LAB.json).
const MaxNameLen = 32

// ValidName checks a lab name: 1 to MaxNameLen letters, digits, '-', '_'
// or '.', not starting with '.'. Every lab file is held to it, so a lab that validates can also be
// brought up live.
func ValidName(name string) error {
	if name == "" || len(name) > MaxNameLen {
		return fmt.Errorf("lab name %q: want 1..%d characters (it becomes part of namespace and file names)", name, MaxNameLen)
	}
	if name[0] == '.' {
		return fmt.Errorf("lab name %q: starts with '.' (it becomes part of namespace and file names)", name)
	}
	for _, c := range name {
		if !(c == '-' || c == '_' || c == '.' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) {
			return fmt.Errorf("lab name %q: character %q (want letters, digits, '-', '_', '.': it becomes part of namespace and file names)", name, c)
		}
	}
	return nil
}

// BytesRateNote returns a warning for a rate written in tc's "bps" family
// (bps, kbps, mbps, gbps, tbps), which tc reads as bytes per second: what
// "100Gbps" means to tc (800 Gbit/s) is rarely what its writer meant.
// bits is the rate as parsed, in bits per second.
func BytesRateNote(text string, bits float64) (string, bool) {
	if !strings.HasSuffix(strings.ToLower(strings.TrimSpace(text)), "bps") {
		return "", false
	}
	num := strings.TrimRightFunc(text, func(r rune) bool { return (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') })
	return fmt.Sprintf("%q is %s: tc reads \"bps\" as bytes per second (write %sbit for bits per second)",
		text, fabric.FormatRate(bits), num+unitPrefix(text)), true
}

// unitPrefix returns the k, m, g or t of a "kbps"-style unit, lower case.
func unitPrefix(text string) string {
	t := strings.ToLower(strings.TrimSpace(text))
	t = strings.TrimSuffix(t, "bps")
	if t != "" {
		if c := t[len(t)-1]; c == 'k' || c == 'm' || c == 'g' || c == 't' {
			return string(c)
		}
	}
	return ""
}
