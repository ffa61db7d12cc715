package live

import (
	"context"
	"testing"
	"time"

	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
)

// pacerPair runs two pacers (partitions a and b) with a crossing a->b
// served on b; arrive hears b's arrivals.
func pacerPair(t *testing.T, arrive func(now sim.Time, b *packet.Buffer)) (a, b *Pacer, c *crossing) {
	t.Helper()
	var err error
	if a, err = NewPacer(sim.NewLoop(), packet.NewPool(), PacerConfig{Policy: PolicyNormal}); err != nil {
		t.Fatal(err)
	}
	if b, err = NewPacer(sim.NewLoop(), packet.NewPool(), PacerConfig{Policy: PolicyNormal}); err != nil {
		t.Fatal(err)
	}
	if c, err = newCrossing("a->b", 16); err != nil {
		t.Fatal(err)
	}
	if err := newCrossPoller(b).add(c, a, arrive); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go a.Run(ctx)
	time.Sleep(20 * time.Millisecond) // the two clocks start apart: stamps are moved
	go b.Run(ctx)
	t.Cleanup(func() { cancel(); <-a.Done(); <-b.Done() })
	return a, b, c
}

// TestCrossPollerArrives: a packet pushed on partition a, stamped 2 ms
// ahead in a's time, arrives on partition b (asleep: it has nothing
// else to run) at that instant in b's time, or later and counted late;
// one stamped 5 ms in the past arrives at once and is counted late by the
// crossing and as a late event by the receiving pacer. Waits are hang
// guards, not timing assertions.
func TestCrossPollerArrives(t *testing.T) {
	type arrival struct {
		now, wall sim.Time
		id        uint64
	}
	got := make(chan arrival, 4)
	var b *Pacer
	a, b, c := pacerPair(t, func(now sim.Time, p *packet.Buffer) {
		got <- arrival{now, b.elapsed(), p.ID}
	})
	<-b.started
	<-a.started
	off := sim.Time(a.start.Sub(b.start)) // b's time minus a's
	var stamp sim.Time
	if err := a.Do(context.Background(), func(now sim.Time) {
		stamp = a.elapsed() + 2*sim.Millisecond
		c.Push(stamp, 0, a.pool.Get(64))
	}); err != nil {
		t.Fatal(err)
	}
	var r arrival
	select {
	case r = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("no arrival within 10s")
	}
	// On time, or counted late: never early, never silently late.
	if r.now < stamp+off || (r.now > stamp+off && c.Stats().LateAny == 0) {
		t.Errorf("arrived at %v in b's time, the stamp %v moved by the clocks' offset %v being %v; late unreported: %+v", r.now, stamp, off, stamp+off, c.Stats())
	}
	if r.wall < r.now {
		t.Errorf("ran at wall %v, before its time %v", r.wall, r.now)
	}
	if s := c.Stats(); s.Sent != 1 || s.Received != 1 || s.Dropped != 0 {
		t.Errorf("stats %+v; want one sent and received", s)
	}
	// Stamped 5 ms in the past: at once, late.
	if err := a.Do(context.Background(), func(now sim.Time) {
		c.Push(a.elapsed()-5*sim.Millisecond, 0, a.pool.Get(64))
	}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("no late arrival within 10s")
	}
	s := c.Stats()
	if s.Received != 2 || s.Late < 1 || s.MaxLate < 5*time.Millisecond {
		t.Errorf("late packet: stats %+v; want it received and counted late by at least 5ms", s)
	}
	var lag LagStats
	b.Do(context.Background(), func(sim.Time) { lag = b.lag })
	if lag.MaxLag < 5*time.Millisecond || lag.EventsLate < 1 {
		t.Errorf("b's lag %+v: the late arrival is not counted", lag)
	}
}
