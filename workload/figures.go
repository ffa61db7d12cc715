package workload

import (
	"math"
	"sort"

	"github.com/mrlab/mrlab/internal/sim"
)

// peakGbps computes perftest's BW peak: the fastest any run of messages
// went, measured from the post of the i-th message to the j-th completion,
//
//	peak = size / min over i <= j of (completed[j] - posted[i]) / (j-i+1),
//
// with j restricted, as perftest restricts it, to every cqMod-th
// completion (the ones it sees under CQ moderation) and the last one, and
// the first message alone (perftest's starting value).
// posted and completed are the run's post and completion times in time
// order (all connections together), size the message size.
//
// The window opens at a post, not a completion, which keeps the figure
// honest: by completed[j] at least j-i+1 messages posted at or after
// posted[i] are complete, and all their bytes crossed the wire inside the
// window, so the peak never exceeds the line rate, however completions
// bunch (after a retransmission fills a hole, say).
//
// perftest scans every pair; this finds the same minimum by bisection on
// the per-message time t, in O(n log(1/precision)): some pair has
// completed[j] - posted[i] <= t(j-i+1) exactly when, for some j,
// completed[j] - t(j+1) <= max over i <= j of (posted[i] - t i).
func peakGbps(posted, completed []sim.Time, size, cqMod int) float64 {
	return PeakGbps(posted, completed, size, cqMod)
}

// PeakGbps is perftest's BW peak over posts and completions in time order
// (see peakGbps); live runs (package verbsperf) compute theirs with it from
// wall-clock offsets, so a live BW peak means what a simulated one does.
func PeakGbps(posted, completed []sim.Time, size, cqMod int) float64 {
	n := min(len(posted), len(completed))
	if n == 0 || size <= 0 {
		return 0
	}
	cqMod = max(cqMod, 1)
	ends := func(yield func(j int) bool) {
		for j := cqMod - 1; j < n; j += cqMod {
			if !yield(j) {
				return
			}
		}
		if n%cqMod != 0 {
			yield(n - 1)
		}
	}
	feasible := func(t float64) bool {
		best := math.Inf(-1) // max over i <= j of posted[i] - t*i
		i := 0
		for j := range ends {
			for ; i <= j; i++ {
				best = max(best, float64(posted[i])-t*float64(i))
			}
			if float64(completed[j])-t*float64(j+1) <= best {
				return true
			}
		}
		return false
	}
	lo, hi := 0.0, float64(completed[n-1]-posted[0])
	if hi <= 0 || completed[0] <= posted[0] {
		return 0
	}
	for range 100 {
		mid := (lo + hi) / 2
		if feasible(mid) {
			hi = mid
		} else {
			lo = mid
		}
		if hi-lo < hi*1e-12 {
			break
		}
	}
	// perftest also starts from the first message alone.
	hi = min(hi, float64(completed[0]-posted[0]))
	return float64(size) * 8 / hi // bytes per ns * 8 = Gbit/s
}

// gbps is a byte count over a duration in Gbit/s.
func gbps(bytes int64, d sim.Time) float64 {
	if d <= 0 {
		return 0
	}
	return float64(bytes) * 8 / d.Seconds() / 1e9
}

// latTail is how many of the slowest round trips perftest leaves out of
// its latency figures (LAT_MEASURE_TAIL).
const latTail = 2

// latencyDist computes the latency tests' figures as perftest does from
// the times between successive pings (each a round trip, as the next ping
// is posted when the previous one's answer arrives), divided by factor (2
// for one-way latency from a round trip, 1 for read_lat): sort, drop the
// two slowest, then t_typical is the median, t_avg and t_stdev are over
// what is left, t_min the fastest, t_max the first dropped value and the
// percentiles index the kept values at ceil(n*p). Unlike perftest, the
// standard deviation is not truncated to whole microseconds. N is the
// number of pings (one more than the deltas).
func latencyDist(deltas []sim.Time, factor int) Dist {
	n := len(deltas)
	if n == 0 || factor < 1 {
		return Dist{}
	}
	d := append([]sim.Time(nil), deltas...)
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	cnt := n - latTail
	if cnt < 1 {
		cnt = n
	}
	f := sim.Time(factor)
	at := func(k int) sim.Time { return d[min(k, n-1)] / f }
	var median sim.Time
	if (cnt-1)%2 != 0 {
		median = (d[cnt/2] + d[cnt/2-1]) / 2
	} else {
		median = d[cnt/2]
	}
	var sum float64
	for _, x := range d[:cnt] {
		sum += float64(x) / float64(factor)
	}
	mean := sum / float64(cnt)
	var sq float64
	for _, x := range d[:cnt] {
		v := float64(x)/float64(factor) - mean
		sq += v * v
	}
	return Dist{
		N: n + 1, Min: at(0), Max: at(cnt), P50: median / f,
		P99: at(int(math.Ceil(float64(cnt) * 0.99))), P999: at(int(math.Ceil(float64(cnt) * 0.999))),
		Mean: sim.Time(mean + 0.5), Stdev: sim.Time(math.Sqrt(sq/float64(cnt)) + 0.5),
	}
}
