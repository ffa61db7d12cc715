// Package sim is mrlab's discrete-event engine: a virtual clock, a timer heap
// ordered by (time, origin, sequence) so that equal times fire in a deterministic
// order, and seeded random streams per component.
//
// Nothing in this package reads the wall clock or starts goroutines. The live
// runtime (package labs) paces a Loop to real time from the outside.
package sim

import (
	"fmt"
	"strconv"
)

// Time is a point in a lab's time, or a duration, in nanoseconds since the
// start of the run. It is int64 so that differences are plain subtraction.
type Time int64

// Units of Time.
const (
	Nanosecond  Time = 1
	Microsecond      = 1000 * Nanosecond
	Millisecond      = 1000 * Microsecond
	Second           = 1000 * Millisecond
)

// Never is a time no event is ever scheduled at; NextDeadline-style methods
// return it when they have nothing to do.
const Never Time = 1<<63 - 1

// Seconds returns t in seconds.
func (t Time) Seconds() float64 { return float64(t) / float64(Second) }

// Micros returns t in microseconds.
func (t Time) Micros() float64 { return float64(t) / float64(Microsecond) }

// String formats t with the largest unit that keeps it readable:
// "327ns", "12.301us", "4.5ms", "1.25s".
func (t Time) String() string {
	if t == Never {
		return "never"
	}
	neg := t < 0
	a := t
	if neg {
		a = -t
	}
	var s string
	switch {
	case a < Microsecond:
		s = strconv.FormatInt(int64(a), 10) + "ns"
	case a < Millisecond:
		s = trim(float64(a)/float64(Microsecond)) + "us"
	case a < Second:
		s = trim(float64(a)/float64(Millisecond)) + "ms"
	default:
		s = trim(float64(a)/float64(Second)) + "s"
	}
	if neg {
		return "-" + s
	}
	return s
}

func trim(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// ParseTime parses a duration such as "2ms", "150us", "327.68ns", "1.5s" or
// "0". A bare number other than 0 is an error: units are never guessed.
func ParseTime(s string) (Time, error) {
	if s == "0" {
		return 0, nil
	}
	units := []struct {
		suffix string
		unit   Time
	}{{"ns", Nanosecond}, {"us", Microsecond}, {"µs", Microsecond}, {"ms", Millisecond}, {"s", Second}}
	for _, u := range units {
		if len(s) > len(u.suffix) && s[len(s)-len(u.suffix):] == u.suffix {
			num := s[:len(s)-len(u.suffix)]
			f, err := strconv.ParseFloat(num, 64)
			if err != nil {
				return 0, fmt.Errorf("parsing duration %q: bad number %q", s, num)
			}
			if f < 0 {
				return 0, fmt.Errorf("parsing duration %q: negative", s)
			}
			return Time(f*float64(u.unit) + 0.5), nil
		}
	}
	return 0, fmt.Errorf("parsing duration %q: want a number with a unit (ns, us, ms, s)", s)
}
