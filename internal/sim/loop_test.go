package sim

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

func TestLoopOrder(t *testing.T) {
	l := NewLoop()
	var got []int
	rec := func(now Time, arg any) { got = append(got, arg.(int)) }
	timers := make([]Timer, 6)
	times := []Time{50, 10, 50, 30, 10, 70}
	for i := range timers {
		timers[i].Init(rec, i)
		l.Arm(&timers[i], times[i])
	}
	l.Disarm(&timers[5])
	l.Run()
	want := []int{1, 4, 3, 0, 2} // equal times fire in arming order
	if len(got) != len(want) {
		t.Fatalf("fired %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("fired %v, want %v", got, want)
		}
	}
	if l.Now() != 50 {
		t.Errorf("now = %v, want 50ns", l.Now())
	}
}

func TestLoopRearmAndRunUntil(t *testing.T) {
	l := NewLoop()
	var at []Time
	var tm Timer
	tm.Init(func(now Time, _ any) { at = append(at, now) }, nil)
	l.Arm(&tm, 100)
	l.Arm(&tm, 20) // re-arming moves it
	l.RunUntil(10)
	if len(at) != 0 || l.Now() != 10 {
		t.Fatalf("fired early: %v at now=%v", at, l.Now())
	}
	l.RunUntil(1000)
	if len(at) != 1 || at[0] != 20 {
		t.Fatalf("fired at %v, want [20ns]", at)
	}
	if l.Now() != 1000 || tm.Armed() {
		t.Fatalf("now=%v armed=%v", l.Now(), tm.Armed())
	}
}

// TestLoopRandomized checks the heap against a sorted model under random
// arm/disarm/re-arm.
func TestLoopRandomized(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	l := NewLoop()
	const n = 500
	timers := make([]Timer, n)
	keys := make([]uint64, n) // each timer's key: its arming number
	var last Time
	var lastSeq uint64
	fired := 0
	for i := range timers {
		timers[i].Init(func(now Time, arg any) {
			k := keys[arg.(int)]
			if now < last || (now == last && k < lastSeq) {
				t.Fatalf("out of order: %v after %v", now, last)
			}
			last, lastSeq = now, k
			fired++
		}, i)
	}
	armed := 0
	for k := 0; k < 5000; k++ {
		i := r.IntN(n)
		switch r.IntN(3) {
		case 0, 1:
			if !timers[i].Armed() {
				armed++
			}
			l.Arm(&timers[i], Time(r.IntN(1000)))
			keys[i] = l.seq
		case 2:
			if timers[i].Armed() {
				armed--
			}
			l.Disarm(&timers[i])
		}
	}
	l.Run()
	if fired != armed {
		t.Fatalf("fired %d, armed %d", fired, armed)
	}
}

func TestTimeStringParse(t *testing.T) {
	cases := []struct {
		in   string
		want Time
		str  string
	}{
		{"327.68ns", 328, "328ns"},
		{"12.301us", 12301, "12.301us"},
		{"2ms", 2 * Millisecond, "2ms"},
		{"1.5s", 1500 * Millisecond, "1.5s"},
		{"0", 0, "0ns"},
	}
	for _, c := range cases {
		got, err := ParseTime(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseTime(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
		if got.String() != c.str {
			t.Errorf("%v.String() = %q, want %q", c.want, got.String(), c.str)
		}
	}
	for _, bad := range []string{"", "5", "x ms", "-1ms", "3h"} {
		if _, err := ParseTime(bad); err == nil {
			t.Errorf("ParseTime(%q) accepted", bad)
		}
	}
}

func TestRandStreamsIndependent(t *testing.T) {
	a1 := NewRand(7, "link a").Uint64()
	a2 := NewRand(7, "link a").Uint64()
	b := NewRand(7, "link b").Uint64()
	c := NewRand(8, "link a").Uint64()
	if a1 != a2 || a1 == b || a1 == c {
		t.Fatalf("streams: %x %x %x %x", a1, a2, b, c)
	}
}

// selfArming arms n timers on l at random times under 1000, each of which
// arms itself again 1 to 1000 later when it fires, as links and
// connections do, and returns them.
func selfArming(l *Loop, n int, r *rand.Rand) []Timer {
	timers := make([]Timer, n)
	for i := range timers {
		timers[i].Init(func(now Time, arg any) {
			l.Arm(arg.(*Timer), now+Time(1+r.IntN(1000)))
		}, &timers[i])
		l.Arm(&timers[i], Time(r.IntN(1000)))
	}
	return timers
}

// BenchmarkLoop measures events per second with 1024 timers pending, each
// re-arming itself, as links and connections do.
func BenchmarkLoop(b *testing.B) {
	l := NewLoop()
	r := rand.New(rand.NewPCG(1, 1))
	selfArming(l, 1024, r)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		l.Step()
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkLoopScattered is BenchmarkLoop at the size of a 128-host
// simulation: 16384 pending timers, each embedded in its own 4 KiB object
// (as a timer sits in a packet buffer), so the heap's comparisons and
// index updates meet cold memory the way they do in a real run.
func BenchmarkLoopScattered(b *testing.B) {
	type owner struct {
		t Timer
		_ [4096]byte // what else an owner holds
	}
	l := NewLoop()
	owners := make([]*owner, 16384)
	r := rand.New(rand.NewPCG(1, 1))
	for i := range owners {
		o := &owner{}
		owners[i] = o
		o.t.Init(func(now Time, arg any) {
			l.Arm(arg.(*Timer), now+Time(1+r.IntN(10000)))
		}, &o.t)
		l.Arm(&o.t, Time(r.IntN(10000)))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		l.Step()
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// TestLoopOriginOrder: events at the same time fire by (origin, seq), not
// by arming order across origins, and the order is the same when the
// origins' timers are armed on two loops in any interleaving.
func TestLoopOriginOrder(t *testing.T) {
	var alloc Origins
	a, b := alloc.New(), alloc.New()
	run := func(bFirst bool) []string {
		l := NewLoopShared(&alloc)
		var got []string
		rec := func(now Time, arg any) { got = append(got, arg.(string)) }
		ta := []Timer{{}, {}}
		tb := []Timer{{}, {}}
		for i := range ta {
			ta[i].Init(rec, "a"+string(rune('0'+i)))
			ta[i].Own(a)
			tb[i].Init(rec, "b"+string(rune('0'+i)))
			tb[i].Own(b)
		}
		var free Timer
		free.Init(rec, "free")
		armA := func() { l.Arm(&ta[0], 10); l.Arm(&ta[1], 10) }
		armB := func() { l.Arm(&tb[0], 10); l.Arm(&tb[1], 5); l.Arm(&tb[1], 10) }
		if bFirst {
			armB()
			armA()
		} else {
			armA()
			armB()
		}
		l.Arm(&free, 10)
		l.Run()
		return got
	}
	a.seq, b.seq = 0, 0
	x := run(false)
	a.seq, b.seq = 0, 0
	y := run(true)
	want := "[free a0 a1 b0 b1]"
	if fmt.Sprint(x) != want || fmt.Sprint(y) != want {
		t.Fatalf("fired %v and %v, want %v in both", x, y, want)
	}
	if a.ID() != 1 || b.ID() != 2 || alloc.Count() != 2 {
		t.Errorf("origin numbers %d, %d (count %d), want 1, 2 (2)", a.ID(), b.ID(), alloc.Count())
	}
}

// TestLoopArmInCallback: events that arm, re-arm and disarm timers (their
// own among them) and read Pending and Next while they run fire in
// exactly the (time, key) order a plain model of the armed set gives.
// Step leaves the fired event's root slot for the next timer it arms
// (holeBit); this is what checks that the slot never shows.
func TestLoopArmInCallback(t *testing.T) {
	type arming struct {
		at  Time
		key uint64
	}
	for seed := range uint64(10) {
		r := rand.New(rand.NewPCG(seed, 3))
		l := NewLoop()
		const n = 64
		timers := make([]Timer, n)
		model := map[int]arming{} // the armed timers
		arm := func(i int, at Time) {
			l.Arm(&timers[i], at)
			model[i] = arming{max(at, l.Now()), l.seq & seqMask}
		}
		next := func() (int, bool) {
			best, ok := -1, false
			for i, a := range model {
				if !ok || a.at < model[best].at || (a.at == model[best].at && a.key < model[best].key) {
					best, ok = i, true
				}
			}
			return best, ok
		}
		fired, last := 0, -1
		for i := range timers {
			timers[i].Init(func(now Time, arg any) {
				i := arg.(int)
				if timers[i].Armed() {
					t.Fatalf("seed %d: timer %d armed in its own event", seed, i)
				}
				fired, last = fired+1, i
				for range r.IntN(4) {
					j := r.IntN(n)
					switch r.IntN(6) {
					case 0, 1, 5:
						arm(j, now+Time(r.IntN(50)))
					case 2:
						l.Disarm(&timers[j])
						delete(model, j)
					case 3:
						if l.Pending() != len(model) {
							t.Fatalf("seed %d: %d pending, want %d", seed, l.Pending(), len(model))
						}
					case 4:
						want := Never
						if k, ok := next(); ok {
							want = model[k].at
						}
						if l.Next() != want {
							t.Fatalf("seed %d: next %v, want %v", seed, l.Next(), want)
						}
					}
				}
				arm(r.IntN(n), now+Time(r.IntN(50))) // keeps timers armed
			}, i)
		}
		for i := range 16 {
			arm(i, Time(r.IntN(50)))
		}
		for fired < 5000 {
			want, ok := next()
			if !ok {
				break
			}
			at := model[want].at
			delete(model, want)
			if !l.Step() {
				t.Fatalf("seed %d: nothing to step, want timer %d", seed, want)
			}
			if last != want || l.Now() != at {
				t.Fatalf("seed %d: timer %d fired at %v, want timer %d at %v", seed, last, l.Now(), want, at)
			}
		}
		if l.Pending() != len(model) {
			t.Fatalf("seed %d: %d pending at the end, want %d", seed, l.Pending(), len(model))
		}
		if fired < 5000 {
			t.Fatalf("seed %d: %d events fired, want 5000", seed, fired)
		}
	}
}
