// Package natural orders names the way people number things: runs of
// digits compare as numbers, so h2 sorts before h10.
package natural

import "cmp"

// Compare returns -1, 0 or +1 as a sorts before, with or after b. Runs of
// decimal digits compare by value (leading zeros ignored, so "h01" and
// "h1" are equal); everything else compares byte by byte.
func Compare(a, b string) int {
	for a != "" && b != "" {
		if isDigit(a[0]) && isDigit(b[0]) {
			i, j := digits(a), digits(b)
			x, y := trimZeros(a[:i]), trimZeros(b[:j])
			if c := cmp.Or(cmp.Compare(len(x), len(y)), cmp.Compare(x, y)); c != 0 {
				return c
			}
			a, b = a[i:], b[j:]
			continue
		}
		if c := cmp.Compare(a[0], b[0]); c != 0 {
			return c
		}
		a, b = a[1:], b[1:]
	}
	return cmp.Compare(len(a), len(b))
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// digits returns the length of s's leading run of digits.
func digits(s string) int {
	i := 0
	for i < len(s) && isDigit(s[i]) {
		i++
	}
	return i
}

// trimZeros drops a digit run's leading zeros, keeping one digit.
func trimZeros(s string) string {
	for len(s) > 1 && s[0] == '0' {
		s = s[1:]
	}
	return s
}
