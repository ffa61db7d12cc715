package metaroce

import (
	"testing"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/transporttest"
)

// goodput runs a saturating stream of 256 KiB WRITEs for d and returns the
// bytes per second completed.
func goodput(t *testing.T, cfg transporttest.Config, opts Options, d sim.Time) (float64, ConnStats) {
	t.Helper()
	l := newLab(t, cfg, opts)
	const size = 256 << 10
	posted := 0
	var bytes uint64
	l.ca.OnComplete = func(c *transporttest.Conn, wc transport.Completion) {
		if wc.Status != transport.StatusOK {
			t.Errorf("completion %+v", wc)
		}
		bytes += uint64(wc.Bytes)
	}
	warm := l.net.Loop.Now() + 200*sim.Microsecond
	end := warm + d
	var base uint64
	for l.net.Loop.Now() < end {
		for posted-len(l.ca.Completions) < 8 {
			if err := l.ca.PostSend(write(uint64(posted+1), uint16(posted%4), addrRW, addrRW+0x80000, size)); err != nil {
				t.Fatal(err)
			}
			posted++
		}
		l.run(5 * sim.Microsecond)
		if base == 0 && l.net.Loop.Now() >= warm {
			base = bytes + 1
		}
	}
	return float64(bytes-base+1) / d.Seconds(), metaConn(l.ca).Stats()
}

// TestGoodputUnderLoss: random loss costs throughput roughly in proportion
// to the loss, not a collapse: no go-back-N, no window cut for loss.
func TestGoodputUnderLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("long")
	}
	cfg := transporttest.Config{Seed: 41, Ports: 2, LinkRate: 100e9, PathSkew: sim.Microsecond}
	base, _ := goodput(t, cfg, Options{}, 2*sim.Millisecond)
	for _, tc := range []struct {
		loss, min float64
	}{{0.01, 0.85}, {0.1, 0.5}} {
		c := cfg
		c.Loss = tc.loss
		g, st := goodput(t, c, Options{}, 2*sim.Millisecond)
		ratio := g / base
		t.Logf("loss %.0f%%: %.1f Gb/s = %.1f%% of lossless (%.1f Gb/s); retransmits %d, timeouts %d, entropy changes %d",
			100*tc.loss, g*8/1e9, 100*ratio, base*8/1e9, st.Retransmits, st.Timeouts, st.EntropyChanges)
		if ratio < tc.min {
			t.Errorf("loss %.0f%%: %.1f%% of lossless goodput, want at least %.0f%%", 100*tc.loss, 100*ratio, 100*tc.min)
		}
	}
}
