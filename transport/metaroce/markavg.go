package metaroce

import "math"

// markAvg is a path's ECN mark average: the EWMA of the CE-marked
// fraction of the packets its ACKs report received, each packet one sample
// of gain g (an ACK record of n packets weighs 1-(1-g)^n, so the average
// does not depend on how the receiver coalesces its ACKs). It is 0 on a
// new route (path.go): a new route's marks are its own. The path's weight
// in the window follows it (cc.go).
type markAvg float64

// add folds in an ACK record that reports rx newly received packets, ce
// of them CE-marked (more marks than arrivals count as all marked); a
// record with no arrivals changes nothing.
func (a *markAvg) add(g float64, rx, ce int) {
	if rx <= 0 {
		return
	}
	keep := math.Pow(1-g, float64(rx))
	*a = markAvg(float64(*a)*keep + (1-keep)*float64(min(ce, rx))/float64(rx))
}

// weight is the path's weight in sixteenths, the grain at which the
// window's shares are recomputed: 1 - the average, at least minWeight (a
// heavily marked path keeps a share that keeps measuring it).
func (a markAvg) weight() uint8 { return uint8(max(1-float64(a), minWeight)*16 + 0.5) }
