package metaroce

import (
	"math/rand/v2"
	"slices"
	"sort"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/mrlab/mrlab/transport/transporttest"
)

// apportion runs the apportionment of t packets over paths of weights w
// (sixteenths; 0: the path takes none), in index order, as shares does.
func apportion(t int, w []uint8, floorOnly bool) []int {
	var count [17]int
	sum := 0
	for _, x := range w {
		count[x]++
		sum += int(x)
	}
	count[0] = 0
	a := newApportionment(t, &count, sum, floorOnly)
	out := make([]int, len(w))
	for i, x := range w {
		out[i] = a.part(x)
	}
	return out
}

// hamilton is the textbook largest-remainder method, one remainder per
// path sorted (ties to the lower index): the reference apportion is
// checked against.
func hamilton(t int, w []uint8) []int {
	sum := 0
	for _, x := range w {
		sum += int(x)
	}
	out := make([]int, len(w))
	if sum == 0 {
		return out
	}
	left := t
	idx := make([]int, 0, len(w))
	for i, x := range w {
		out[i] = t * int(x) / sum
		left -= out[i]
		if x > 0 {
			idx = append(idx, i)
		}
	}
	sort.SliceStable(idx, func(a, b int) bool { return t*int(w[idx[a]])%sum > t*int(w[idx[b]])%sum })
	for _, i := range idx[:left] {
		out[i]++
	}
	return out
}

// TestApportion: the window's whole packets go to the paths in
// proportion to their weights by largest remainders, and the parts sum
// to the window.
func TestApportion(t *testing.T) {
	even16 := slices.Repeat([]uint8{16}, 16)
	marked := slices.Clone(even16)
	marked[3] = 8 // half its peers' weight
	for _, c := range []struct {
		name  string
		t     int
		w     []uint8
		floor bool
		want  []int
	}{
		// The regimes cell of #27: a first flight of 90 packets over 16
		// paths; shares rounded down sent 80.
		{"sums to the window", 90, even16, false, []int{6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 5, 5, 5, 5, 5, 5}},
		{"rounded down (planted fault)", 90, even16, true, slices.Repeat([]int{5}, 16)},
		// Exact quotas 5.81 and 2.90: the marked path's remainder is the
		// largest, so it has 3, and 12 of the other 15 have 6.
		{"marked path keeps a smaller share", 90, marked, false, []int{6, 6, 6, 3, 6, 6, 6, 6, 6, 6, 6, 6, 6, 5, 5, 5}},
		{"ties to the lower index", 5, []uint8{16, 16, 16, 16}, false, []int{2, 1, 1, 1}},
		// Exact quotas 1.5, 2, 0.5, 1: paths 0 and 2 tie for one packet.
		{"a tie across weights to the lower index", 5, []uint8{12, 16, 4, 8}, false, []int{2, 2, 0, 1}},
		{"the same, reversed", 5, []uint8{4, 16, 12, 8}, false, []int{1, 2, 1, 1}},
		{"no paths", 10, nil, false, []int{}},
		{"one path", 7, []uint8{16}, false, []int{7}},
		{"one marked path", 7, []uint8{3}, false, []int{7}},
		{"window smaller than the paths", 3, slices.Repeat([]uint8{16}, 8), false, []int{1, 1, 1, 0, 0, 0, 0, 0}},
		{"no window", 0, []uint8{16, 16}, false, []int{0, 0}},
		{"a path that takes none", 5, []uint8{16, 0, 16}, false, []int{3, 0, 2}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := apportion(c.t, c.w, c.floor)
			if d := cmp.Diff(c.want, got); d != "" {
				t.Errorf("parts (-want +got):\n%s", d)
			}
		})
	}
}

// TestApportionProperties: over random weights and windows, the parts
// are the textbook method's (one remainder per path, sorted), sum to the
// window, are each the exact quota rounded down or up, and never give a
// lighter path more than a heavier one.
func TestApportionProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		n := r.IntN(40)
		w := make([]uint8, n)
		sum := 0
		for i := range w {
			w[i] = uint8(1 + r.IntN(16))
			sum += int(w[i])
		}
		tt := r.IntN(300)
		got := apportion(tt, w, false)
		if want := hamilton(tt, w); !slices.Equal(got, want) {
			t.Fatalf("t=%d w=%v: %v, the textbook method %v", tt, w, got, want)
		}
		total := 0
		for i, q := range got {
			total += q
			lo := tt * int(w[i]) / sum
			if q < lo || q > lo+1 {
				t.Fatalf("t=%d w=%v: path %d has %d, quota %d/%d", tt, w, i, q, tt*int(w[i]), sum)
			}
			for j := range got {
				if w[j] < w[i] && got[j] > got[i] {
					t.Fatalf("t=%d w=%v: path %d (weight %d) has %d, path %d (weight %d) %d", tt, w, j, w[j], got[j], i, w[i], got[i])
				}
			}
		}
		if n > 0 && total != tt {
			t.Fatalf("t=%d w=%v: parts %v sum to %d", tt, w, got, total)
		}
	}
}

// TestConnShares: in a dialer's first flight its usable paths' parts sum
// to the flight in whole packets, a marked path's below its peers', and
// they follow the flight when it changes by a packet; after the first
// ACK each part is its quota rounded down.
func TestConnShares(t *testing.T) {
	l := newLab(t, transporttest.Config{}, Options{Paths: 16})
	c := metaConn(l.ca)
	c.ensurePaths()
	c.use(&c.s.paths[5])
	c.s.paths[5].alpha = 0.5 // weight 8 of 16
	for _, heard := range []bool{false, true} {
		c.s.heard = heard
		c.s.pathsChanged()
		for _, pkts := range []int{1, 7, 16, 90, 91} {
			w := pkts*c.mss + c.mss/2
			c.shares(w)
			sum, usable := 0, 0
			for i := range c.s.paths {
				p := &c.s.paths[i]
				if !p.usable() {
					continue
				}
				sum += int(p.part)
				usable++
				if x := int(quantWeight(p)); heard && int(p.part) != pkts*x/int(c.s.weightSum) {
					t.Errorf("after the first ACK, window of %d packets: path %d (weight %d of %d) has %d, want its quota rounded down",
						pkts, i, x, c.s.weightSum, p.part)
				}
			}
			if usable == 0 || !heard && sum != pkts {
				t.Errorf("first flight of %d packets: %d usable paths' parts sum to %d", pkts, usable, sum)
			}
			// At 16 packets its exact quota (0.52) rounds up to its
			// neighbours' (1.03 rounded down); from 90 it is half theirs.
			if q, p := c.s.paths[5].part, c.s.paths[4].part; q > p || pkts >= 90 && 2*q > p+1 {
				t.Errorf("window of %d packets: the marked path has %d, its unmarked neighbour %d", pkts, q, p)
			}
		}
	}
}
