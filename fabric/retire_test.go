package fabric_test

import (
	"math/rand/v2"
	"testing"

	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/sim"
)

// TestNewestDepartureEndsAtBusy drives a port through random sends, rate
// changes (which re-time waiting departures) and link failures and
// repairs, checking after every event that its newest departure ends
// when the line frees up (busyPs): retire pops a lone, ended departure
// without reading the ring on that ground.
func TestNewestDepartureEndsAtBusy(t *testing.T) {
	l, port, s1 := b2b(t, fabric.LinkParams{Rate: 100e9, Delay: sim.Microsecond}, fabric.BuildOptions{})
	rng := rand.New(rand.NewPCG(5, 6))
	now := sim.Time(0)
	sent := 0
	for step := range 4000 {
		now += sim.Time(rng.IntN(400))
		l.loop.RunUntil(now)
		switch r := rng.IntN(100); {
		case r < 70:
			for range 1 + rng.IntN(3) {
				port.Send(now, udp(l.pool, addr0, addr1, 1, 2, 64+rng.IntN(4000), 0))
				sent++
			}
		case r < 85:
			rate := []float64{0, 10e9, 25e9, 40e9}[rng.IntN(4)]
			if err := l.net.SetImpairment("p0-h0-h1", fabric.AtoB, fabric.Impairment{Rate: rate}); err != nil {
				t.Fatal(err)
			}
		case r < 92:
			if err := l.net.SetLinkUp(now, "p0-h0-h1", rng.IntN(2) == 0); err != nil {
				t.Fatal(err)
			}
		}
		if !port.NewestEndsAtBusy() {
			t.Fatalf("step %d: the newest departure does not end at busyPs", step)
		}
	}
	if err := l.net.SetLinkUp(now, "p0-h0-h1", true); err != nil {
		t.Fatal(err)
	}
	l.loop.Run()
	// Most are dropped (a full queue at the lower rates, the link down):
	// enough must arrive that the line was busy and idle in turn.
	if len(s1.got) < 500 {
		t.Fatalf("%d of %d packets arrived: the test did not exercise the line", len(s1.got), sent)
	}
}
