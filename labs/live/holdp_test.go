package live

import (
	"context"
	"runtime"
	"testing"

	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
)

// TestRunningPacerHoldsAP guards holdP: while a pacer runs, the runtime
// has one P more than before it started (so the loop's locked thread,
// back from epoll_wait, finds one idle instead of waiting up to a
// scheduler tick for a TUN reader or writer to give one up), two pacers
// two more, and each gives its P back when it stops. Not parallel: it
// reads the process-wide GOMAXPROCS.
func TestRunningPacerHoldsAP(t *testing.T) {
	base := runtime.GOMAXPROCS(0)
	start := func() (stop func()) {
		p, err := NewPacer(sim.NewLoop(), packet.NewPool(), PacerConfig{Policy: PolicyNormal})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		go p.Run(ctx)
		// Do returns once the loop runs: holdP is taken before that.
		if err := p.Do(context.Background(), func(sim.Time) {}); err != nil {
			t.Fatal(err)
		}
		return func() { cancel(); <-p.Done() }
	}
	stop1 := start()
	if got := runtime.GOMAXPROCS(0); got != base+1 {
		t.Errorf("one pacer running: GOMAXPROCS %d, want %d (the loop's own P)", got, base+1)
	}
	stop2 := start()
	if got := runtime.GOMAXPROCS(0); got != base+2 {
		t.Errorf("two pacers running: GOMAXPROCS %d, want %d", got, base+2)
	}
	stop2()
	stop1()
	if got := runtime.GOMAXPROCS(0); got != base {
		t.Errorf("pacers stopped: GOMAXPROCS %d, want %d back", got, base)
	}
}
