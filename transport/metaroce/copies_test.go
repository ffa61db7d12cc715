package metaroce_test

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"testing"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/metaroce"
)

// shallowCase is one bed of TestTargetShallowLoss.
type shallowCase struct {
	name    string
	b       bed
	size    int
	streams int
	loss    float64
}

func shallowCases() []shallowCase {
	leafspine := bed{topo: "leafspine", rate: 100e9, hpl: 2, spines: 2}
	long := leafspine
	long.delay = 10 * sim.Microsecond
	return []shallowCase{
		{"leafspine 4KiB", leafspine, 4 << 10, 1, 0.01},
		{"leafspine 4KiB", leafspine, 4 << 10, 16, 0.1},
		{"leafspine 10us 64KiB", long, 64 << 10, 1, 0.01},
		{"leafspine 4KiB", leafspine, 4 << 10, 16, 0.01},
		{"leafspine 10us 64KiB", long, 64 << 10, 16, 0.01},
	}
}

func (c shallowCase) run(t *testing.T, loss float64, seed uint64, faults metaroce.Faults) outcome {
	b := c.b
	b.loss = lossModel(loss, false)
	spec := b.bulk(transport.MetaRoCE, 200)
	spec.Size, spec.QueueDepth, spec.Streams = c.size, 16, c.streams
	spec.Duration = max(spec.Duration, sim.Millisecond)
	return b.run(t, job{spec: spec, seed: seed, faults: faults})
}

func copiesSent(o outcome) (copies, data uint64) {
	for _, nic := range o.cl.NICs {
		for _, c := range nic.Conns() {
			if mc, ok := c.Transport().(*metaroce.Conn); ok {
				st := mc.Stats()
				copies += st.Copies
				data += st.DataPacketsSent
			}
		}
	}
	return copies, data
}

// TestCopiesSeeds measures the shallow-loss beds with and without
// proactive copies over MRLAB_COPY_SEEDS seeds, at MRLAB_COPY_RATE bits/s
// per link if set (a measurement, not run by default).
func TestCopiesSeeds(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("MRLAB_COPY_SEEDS"))
	if n == 0 {
		t.Skip("set MRLAB_COPY_SEEDS")
	}
	rate, _ := strconv.ParseFloat(os.Getenv("MRLAB_COPY_RATE"), 64) // bits/s; 0: the beds' 100 Gbit/s
	for _, c := range shallowCases() {
		if rate > 0 {
			c.b.rate = rate
		}
		t.Run(fmt.Sprintf("%s %d streams %g%%", c.name, c.streams, 100*c.loss), func(t *testing.T) {
			var before, after []float64
			for seed := uint64(1); seed <= uint64(n); seed++ {
				free := c.run(t, 0, seed, nil)
				freeOff := c.run(t, 0, seed, metaroce.MutNoCopies)
				off := c.run(t, c.loss, seed, metaroce.MutNoCopies)
				on := c.run(t, c.loss, seed, nil)
				cp, data := copiesSent(on)
				fcp, _ := copiesSent(free)
				before = append(before, off.goodput/free.goodput)
				after = append(after, on.goodput/free.goodput)
				t.Logf("seed %d: loss-free %.2f Gb/s (without the rule %.2f, %d copies), %.3f -> %.3f (%d copies of %d data packets)",
					seed, free.goodput/1e9, freeOff.goodput/1e9, fcp, off.goodput/free.goodput, on.goodput/free.goodput, cp, data)
			}
			t.Logf("median (worst) %.3f (%.3f) -> %.3f (%.3f)", median(before), minOf(before), median(after), minOf(after))
		})
	}
}

func median(x []float64) float64 {
	y := append([]float64(nil), x...)
	sort.Float64s(y)
	return y[len(y)/2]
}

func minOf(x []float64) float64 {
	m := x[0]
	for _, v := range x {
		m = min(m, v)
	}
	return m
}

// TestCopiesUnusedShare: one stream, 16 outstanding 4 KiB messages on a
// 100 Gbit/s leaf-spine (loss-free it uses 56% of its line: window
// limited), 1% random loss per link. Proactive copies (redundancy.go)
// raise its goodput from 0.688 to 0.801 of loss-free (seed 1); loss-free
// the rule sends nothing; and the receiver's loss estimate stays the
// per-packet loss with copies (0.030, 0.043 without; 0.001 when it counted
// data packets only, so one ACK carried each arrival at 4% ACK loss), so
// the ACK redundancy rule keeps its count (2, 3 without).
func TestCopiesUnusedShare(t *testing.T) {
	if testing.Short() {
		t.Skip("long")
	}
	c := shallowCases()[0]
	free, freeOff := c.run(t, 0, 1, nil), c.run(t, 0, 1, metaroce.MutNoCopies)
	on, off := c.run(t, c.loss, 1, nil), c.run(t, c.loss, 1, metaroce.MutNoCopies)
	if cp, _ := copiesSent(free); cp != 0 || free.goodput != freeOff.goodput {
		t.Errorf("loss-free: %d copies, %.3f Gb/s against %.3f without the rule; want none and the same", cp, free.goodput/1e9, freeOff.goodput/1e9)
	}
	rxShare := func(o outcome) (q float64, k int) {
		for _, nic := range o.cl.NICs {
			for _, cc := range nic.Conns() {
				if mc, ok := cc.Transport().(*metaroce.Conn); ok && mc.Stats().DataReceived > 0 {
					q, k = mc.Stats().RetxShare, mc.Stats().AckCopies
				}
			}
		}
		return q, k
	}
	ratioOn, ratioOff := on.goodput/free.goodput, off.goodput/free.goodput
	qOn, kOn := rxShare(on)
	qOff, kOff := rxShare(off)
	cp, data := copiesSent(on)
	t.Logf("%.3f of loss-free with copies (%d of %d data packets), %.3f without; receiver's loss estimate %.4f (k %d), %.4f (k %d) without",
		ratioOn, cp, data, ratioOff, qOn, kOn, qOff, kOff)
	if ratioOn < ratioOff+0.08 {
		t.Errorf("copies moved goodput %.3f -> %.3f of loss-free, want a gain of at least 0.08", ratioOff, ratioOn)
	}
	if qOn < qOff/2 || kOn < 2 {
		t.Errorf("receiver's loss estimate %.4f (k %d) with copies, %.4f without: copies must not hide the loss", qOn, kOn, qOff)
	}
}
