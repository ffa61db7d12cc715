package metaroce

import (
	"math"
	"testing"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/transporttest"
)

// TestWaterFill checks max-min water-filling: demands below the fair level
// are met, the rest split what is left equally, and capacity nobody asked
// for is offered to everyone.
func TestWaterFill(t *testing.T) {
	inf := math.Inf(1)
	tests := []struct {
		name    string
		demands []float64
		want    []float64
	}{
		{"equal, all greedy", []float64{inf, inf, inf, inf}, []float64{25, 25, 25, 25}},
		{"one small", []float64{10, inf, inf}, []float64{10, 45, 45}},
		{"two small", []float64{10, 5, inf, inf}, []float64{10, 5, 42.5, 42.5}},
		{"all satisfied: leftover offered", []float64{10, 20}, []float64{80, 90}},
		{"single sender", []float64{inf}, []float64{100}},
		{"just above fair", []float64{30, 30, 30, 30}, []float64{25, 25, 25, 25}},
	}
	for _, tc := range tests {
		a := newAllocator(100, 40*sim.Microsecond, 1.0/16)
		slots := make([]int32, len(tc.demands))
		for i, d := range tc.demands {
			slots[i] = a.register(0, false)
			a.observe(slots[i], 0, d, 10*sim.Microsecond, 0, false)
		}
		for i, s := range slots {
			if got := a.share(s, sim.Microsecond); math.Abs(got-tc.want[i]) > 1e-9 {
				t.Errorf("%s: sender %d share %v, want %v", tc.name, i, got, tc.want[i])
			}
		}
		if a.active != len(tc.demands) {
			t.Errorf("%s: %d active, want %d", tc.name, a.active, len(tc.demands))
		}
	}
}

// TestAllocatorActivity: a sender that stops sending drops out after the
// activity window and the others share its part; unregistering frees the
// slot; an unchanged demand does not recompute.
func TestAllocatorActivity(t *testing.T) {
	a := newAllocator(90, 40*sim.Microsecond, 1.0/16)
	x, y, z := a.register(0, false), a.register(0, false), a.register(0, false)
	for _, s := range []int32{x, y, z} {
		a.observe(s, 0, 1e12, 10*sim.Microsecond, 0, false)
	}
	if got := a.share(x, 0); got != 30 {
		t.Fatalf("share %v, want 30", got)
	}
	n := a.recomputes
	a.observe(x, 10, 1e12, 10*sim.Microsecond, 0, false)
	a.share(x, 10)
	if a.recomputes != n {
		t.Error("an unchanged demand forced a recomputation")
	}
	// z goes quiet; x and y keep sending.
	for now := sim.Time(0); now <= 100*sim.Microsecond; now += 5 * sim.Microsecond {
		a.observe(x, now, 1e12, 10*sim.Microsecond, 0, false)
		a.observe(y, now, 1e12, 10*sim.Microsecond, 0, false)
	}
	if got := a.share(x, 100*sim.Microsecond); got != 45 {
		t.Errorf("after z went quiet: share %v, want 45", got)
	}
	a.unregister(y)
	a.observe(x, 101*sim.Microsecond, 1e12, 10*sim.Microsecond, 0, false)
	if got := a.share(x, 101*sim.Microsecond); got != 90 {
		t.Errorf("alone: share %v, want 90", got)
	}
	if s := a.register(0, false); s != y {
		t.Errorf("slot %d not reused (got %d)", y, s)
	}
}

// TestIncastFairShare: N senders blast WRITEs at one receiver through its
// one downlink. The receiver's hint gives each C/N within two round trips
// of its first ACK, the queue drains, and goodput is shared fairly.
func TestIncastFairShare(t *testing.T) {
	for _, hints := range []bool{true, false} {
		r := runIncast(t, 8, 1<<20, !hints)
		if hints {
			t.Logf("hints on: fair share after %v (%.1f base RTTs, %.1f smoothed RTTs at the time)",
				r.settle, float64(r.settle)/float64(r.rtt), float64(r.settle)/float64(max(r.srtt, 1)))
		}
		t.Logf("hints %v: fairness min/max %.3f, goodput %.1f%% of link, queue peak %d B, after the first burst max %d B",
			hints, r.fairness, 100*r.util, r.peakQueue, r.steadyQueue)
		if !hints {
			continue
		}
		// Counted from the moment the senders start, so the first round
		// trip (which brings the first hint) is included; the RTT is the
		// one the senders experienced (their initial windows queue up).
		if r.settle > 2*r.srtt || r.settle > 5*r.rtt/2 {
			t.Errorf("hints reached fair share after %v: more than 2 RTTs (smoothed %v, base %v)", r.settle, r.srtt, r.rtt)
		}
		if r.fairness < 0.9 {
			t.Errorf("goodput min/max across senders %.3f, want >= 0.9", r.fairness)
		}
		if r.util < 0.85 {
			t.Errorf("aggregate goodput %.1f%% of the link, want >= 85%%", 100*r.util)
		}
		if r.steadyQueue > 64<<10 {
			t.Errorf("queue still %d bytes after the first burst drained", r.steadyQueue)
		}
	}
}

type incastResult struct {
	settle, rtt, srtt      sim.Time
	fairness, util         float64
	peakQueue, steadyQueue int
}

// incastStar adds a receiver "dst" and n senders "a", "b", ... with memory
// registered, each connected to dst.
func incastStar(t *testing.T, net *transporttest.Net, n int, opts Options) (*transporttest.Host, []*transporttest.Conn) {
	t.Helper()
	dst := net.AddHost("dst", NewProtocol(opts))
	registerMem(dst)
	var conns []*transporttest.Conn
	for i := range n {
		h := net.AddHost(string(rune('a'+i)), NewProtocol(opts))
		registerMem(h)
		c, err := net.Connect(h, dst, sim.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	return dst, conns
}

func runIncast(t *testing.T, n, size int, noHint bool) incastResult {
	const rate = 100e9
	cfg := transporttest.Config{Seed: 31, LinkRate: rate, ECNThreshold: 64 << 10, QueueBytes: 4 << 20}
	net := transporttest.New(sim.NewLoop(), cfg)
	opts := Options{DisableRateHint: noHint}
	dst, conns := incastStar(t, net, n, opts)
	t0 := net.Loop.Now()
	posted := make([]int, n)
	var res incastResult
	fair := rate / 8 * NewProtocol(opts).Options().HintUtilization / float64(n)
	var settled bool
	var peak, steady int
	start := func() {
		for i, c := range conns {
			for posted[i]-len(c.Completions) < 4 {
				if err := c.PostSend(write(uint64(posted[i]+1), 0, addrRW, addrRW, size)); err != nil {
					t.Fatal(err)
				}
				posted[i]++
			}
		}
	}
	end := t0 + 2*sim.Millisecond
	measureFrom := t0 + 300*sim.Microsecond
	placedAt := make([]uint64, n)
	for net.Loop.Now() < end {
		start()
		net.Loop.RunUntil(net.Loop.Now() + 500*sim.Nanosecond)
		now := net.Loop.Now()
		q := net.DownlinkBacklog(dst, 0)
		peak = max(peak, q)
		if testing.Verbose() && now-t0 < 200*sim.Microsecond && int(now-t0)%(25*int(sim.Microsecond)) < int(500*sim.Nanosecond) {
			st := metaConn(conns[0]).Stats()
			t.Logf("%v: queue %d B, sender 0 in flight %d cap %d hint %.2f Gb/s srtt %v", now-t0, q, st.InFlight, st.InFlightCap, st.RateHint*8/1e9, st.SRTT)
		}
		if now > t0+200*sim.Microsecond {
			steady = max(steady, q)
		}
		if !settled && !noHint {
			ok := true
			for _, c := range conns {
				h := metaConn(c).Stats().RateHint
				ok = ok && math.Abs(h-fair) < 0.05*fair
			}
			if ok {
				settled = true
				res.settle = now - t0
				res.srtt = metaConn(conns[0]).Stats().SRTT
			}
		}
		if now >= measureFrom && placedAt[0] == 0 {
			for i, c := range conns {
				placedAt[i] = metaConn(c.Remote).Stats().BytesPlaced + 1
			}
		}
	}
	lo, hi, sum := math.Inf(1), 0.0, 0.0
	for i, c := range conns {
		g := float64(metaConn(c.Remote).Stats().BytesPlaced - placedAt[i] + 1)
		lo, hi, sum = min(lo, g), max(hi, g), sum+g
	}
	res.fairness = lo / hi
	res.util = sum / (end - measureFrom).Seconds() / (rate / 8)
	res.peakQueue, res.steadyQueue = peak, steady
	res.rtt = metaConn(conns[0]).Stats().MinRTT
	if !settled && !noHint {
		res.settle = sim.Never
	}
	if f := metaConn(conns[0]).Stats(); f.Completions == 0 {
		t.Errorf("no completions: %+v", f)
	}
	for _, c := range conns {
		for _, wc := range c.Completions {
			if wc.Status != transport.StatusOK {
				t.Errorf("completion %+v", wc)
			}
		}
	}
	return res
}

// TestPresumedActive: connections a receiver accepts count as active
// senders from registration, so the first ACKs of an N-to-1 incast carry
// C/N and not C/1, C/2, ... for the first packets to arrive; one that never
// sends leaves the count after the activity window. Dialed connections are
// not presumed; an idle one is offered what it would get as one more
// sender.
func TestPresumedActive(t *testing.T) {
	w := 40 * sim.Microsecond
	a := newAllocator(100, w, 1.0/16)
	var slots []int32
	for range 4 {
		slots = append(slots, a.register(0, true))
	}
	dialed := a.register(0, false)
	a.observe(slots[0], sim.Microsecond, 1e12, 10*sim.Microsecond, 0, false)
	if got := a.share(slots[0], sim.Microsecond); got != 25 {
		t.Errorf("first packet of 4 accepted connections: share %v, want 25", got)
	}
	if a.active != 4 {
		t.Errorf("%d active senders, want the 4 accepted (the dialed one is idle)", a.active)
	}
	if got := a.share(dialed, sim.Microsecond); got != 20 {
		t.Errorf("dialed, idle connection: share %v, want 20 (a fifth)", got)
	}
	// Only slots[0] keeps sending; the others drop out after the window.
	for now := sim.Time(0); now <= 2*w; now += 5 * sim.Microsecond {
		a.observe(slots[0], now, 1e12, 10*sim.Microsecond, 0, false)
	}
	if got := a.share(slots[0], 2*w); got != 100 {
		t.Errorf("after the others stayed idle a window: share %v, want 100", got)
	}
}

// TestIncastFirstFlight: 32 senders start at once. Each connection's first
// flight is one packet, and the receiver's first ACKs already carry C/32, so
// the receiver's queue peaks at a few packets per sender, not at 32 initial
// windows (4 MB before this rule), and the goodput is shared fairly.
func TestIncastFirstFlight(t *testing.T) {
	r := runIncast(t, 32, 64<<10, false)
	t.Logf("peak queue %d B, settle %v (base RTT %v), fairness %.3f, util %.3f", r.peakQueue, r.settle, r.rtt, r.fairness, r.util)
	const pkt = 4096 + 100
	if r.peakQueue > 32*3*pkt {
		t.Errorf("queue peaked at %d B, want at most 3 packets per sender (%d B)", r.peakQueue, 32*3*pkt)
	}
	if r.settle == sim.Never {
		t.Errorf("hints never all within 5%% of the fair share")
	}
	if r.fairness < 0.9 || r.util < 0.85 {
		t.Errorf("fairness %.3f (want >= 0.9), utilization %.3f (want >= 0.85)", r.fairness, r.util)
	}
}

// TestLinkControl: a receiver whose senders ask for at least its capacity
// and whose packets arrive at the rate it hands out (busy) answers their
// marks itself by lowering every share alike (DCTCP on the aggregate,
// alpha the first period's marked fraction, at most one cut per two
// periods) and recovers halfway to the fraction before the cut per
// unmarked period; marks on packets of senders that ask for
// less, or that arrive slower than handed out (held back elsewhere), are
// left to the senders.
func TestLinkControl(t *testing.T) {
	const capacity = 1e9 // bytes/s
	const rtt = 40 * sim.Microsecond
	const pkt = 1000
	type step struct {
		demand float64 // the sender's, a fraction of capacity
		arrive float64 // the arrival rate, a fraction of capacity
		marked float64 // the fraction of the period's packets marked
		frac   float64 // want, after the period (-1: a cut from 1, to between 0.5 and 1)
		busy   bool
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"busy and marked: halve, hold, recover", []step{
			{1, 1, 1, 0.5, true}, {1, 1, 1, 0.5, true}, {1, 1, 1, 0.5, true},
			{1, 1, 0, 0.75, true}, {1, 1, 0, 0.875, true},
		}},
		{"recovery heads for the fraction before the last cut", []step{
			{1, 1, 1, 0.5, true}, {1, 1, 1, 0.5, true}, {1, 1, 1, 0.5, true},
			{1, 1, 1, 0.25, true}, {1, 1, 0, 0.375, true}, {1, 1, 0, 0.4375, true},
		}},
		{"cut, then arriving at the cut rate: still busy", []step{
			{1, 1, 1, 0.5, true}, {1, 0.5, 1, 0.5, true}, {1, 0.5, 1, 0.5, true},
			{1, 0.5, 1, 0.25, true},
		}},
		// The queue drained: arrivals no faster than handed out and
		// unmarked (over a block of fillBlock packets, which here first
		// closes in the second period after the cut). The cut was for
		// that queue; holding it idles the line (the old rule went on
		// halfway per period: 0.875 in the second).
		{"cut, then arriving at the cut rate unmarked: the queue drained, restore", []step{
			{1, 1, 1, 0.5, true}, {1, 0.5, 0, 0.75, true}, {1, 0.5, 0, 1, false},
		}},
		{"cut, arrivals unmarked but at the line rate: a queue still drains, recover halfway", []step{
			{1, 1, 1, 0.5, true}, {1, 1, 0, 0.75, true}, {1, 1, 0, 0.875, true},
		}},
		// Marks after a restore cut from the restored fraction (its first
		// period still sees the 0.5 arrivals of the one before: not busy).
		// Two cuts for one queue: the drain restores the whole capacity,
		// not the fraction before the second cut (old: 0.5 there; a block
		// of 16 packets at 0.25 first closes unmarked in the third period).
		{"two cuts, then drained: the whole capacity back", []step{
			{1, 1, 1, 0.5, true}, {1, 1, 1, 0.5, true}, {1, 1, 1, 0.5, true},
			{1, 1, 1, 0.25, true}, {1, 0.25, 0, 0.375, true}, {1, 0.25, 0, 0.4375, true}, {1, 0.25, 0, 1, false},
		}},
		{"restored, then marked again: cut from the restored fraction", []step{
			{1, 1, 1, 0.5, true}, {1, 0.5, 0, 0.75, true}, {1, 0.5, 0, 1, false}, {1, 1, 1, 1, true}, {1, 1, 1, -1, true},
		}},
		{"marks on senders asking for less are theirs", []step{
			{0.5, 0.5, 1, 1, false}, {0.5, 0.5, 1, 1, false},
		}},
		{"marks on senders held back elsewhere are theirs", []step{
			{1, 0.5, 1, 1, false}, {1, 0.5, 1, 1, false},
		}},
		{"marks thinning after a cut: the queue drains, no second cut", []step{
			{1, 1, 1, 0.5, true}, {1, 1, 1, 0.5, true}, {1, 1, 1, 0.5, true},
			{1, 1, 0.5, 0.5, true}, {1, 1, 0.25, 0.5, true}, {1, 1, 0, 0.75, true},
		}},
		{"marks not thinning after the hold: cut again", []step{
			{1, 1, 1, 0.5, true}, {1, 1, 1, 0.5, true}, {1, 1, 1, 0.5, true},
			// alpha: 1 after the first three periods, then two EWMA
			// steps (g = 1/16) toward 0.5.
			{1, 1, 0.5, 0.5, true}, {1, 1, 0.5, 0.5 * (1 - (15.0/16*(15.0/16+0.5/16)+0.5/16)/2), true},
		}},
		{"busy without marks: nothing to do", []step{
			{1, 1, 0, 1, true}, {1, 1, 0, 1, true},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newAllocator(capacity, rtt, 1.0/16)
			s := a.register(0, false)
			now := sim.Time(0)
			for i, st := range tc.steps {
				gap := sim.Time(pkt / (st.arrive * capacity) * float64(sim.Second))
				// The period's packets, the last one closing it: a period
				// is the sender's RTT plus its packet interval at its share.
				per := rtt + sim.Time(pkt/a.share(s, now)*float64(sim.Second))
				for start, k := now, sim.Time(1); now < start+per; k++ {
					now = start + k*gap
					// Every packet k with a whole number more of marked
					// packets by its end than before it.
					mark := math.Floor(float64(k)*st.marked) > math.Floor(float64(k-1)*st.marked)
					a.observe(s, now, st.demand*capacity, rtt, pkt, mark)
					a.share(s, now)
				}
				if st.frac < 0 && a.frac > 0.5 && a.frac < 1 && a.busy == st.busy {
					continue
				}
				if math.Abs(a.frac-st.frac) > 1e-9 || a.busy != st.busy {
					t.Errorf("period %d: fraction %v busy %v, want %v %v", i, a.frac, a.busy, st.frac, st.busy)
				}
			}
		})
	}
}

// TestFirstGrantOutlivesPresumption: with HoldFirstGrant a SYN_ACK's
// grant holds against the capacity until the sender's first data packet
// arrives, however late (a connection set up long before its first
// message, as collectives' are, still has its first flight), while the
// presumption that counted it as an active sender ends after its window
// as before: the grants outstanding add up to at most the capacity at any
// time, and an idle grant takes no share from the senders that do send.
// Without it (the default) the grant ends with the presumption.
func TestFirstGrantOutlivesPresumption(t *testing.T) {
	const capacity = 100.0
	w := 40 * sim.Microsecond
	rtt := 10 * sim.Microsecond
	for _, tc := range []struct {
		name string
		hold bool
		// firstData: when the first dialer's first packet arrives (0: never);
		// second: when a second dialer registers.
		firstData, second sim.Time
		want              float64 // the second dialer's grant
	}{
		{"second dials while the first is presumed: what is left", true, 0, w / 2, 0},
		{"second dials after the first's presumption, first silent: still held", true, 0, 3 * w, 0},
		{"first sent, then the second dials: the first's grant is over", true, w / 4, w / 2, capacity / 2},
		{"first sent after its presumption: grant over when it arrives", true, 2 * w, 3 * w, capacity / 2},
		{"default: second dials while the first is presumed", false, 0, w / 2, 0},
		{"default: the grant ends with the presumption", false, 0, 3 * w, capacity},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newAllocator(capacity, w, 1.0/16)
			a.holdGrants = tc.hold
			first := a.register(0, true)
			if g := a.firstGrant(first, 0); g != capacity {
				t.Fatalf("first dialer alone: grant %v, want the capacity", g)
			}
			if tc.firstData > 0 {
				a.observe(first, tc.firstData, capacity, rtt, 4096, false)
			}
			second := a.register(tc.second, true)
			if g := a.firstGrant(second, tc.second); g != tc.want {
				t.Errorf("second dialer's grant %v, want %v", g, tc.want)
			}
			if tc.firstData == 0 && tc.second > w {
				// The silent first is no longer an active sender: the
				// second's share (its hint once it sends) is everything.
				a.observe(second, tc.second+rtt, capacity, rtt, 4096, false)
				if got := a.share(second, tc.second+rtt); got != capacity {
					t.Errorf("share beside an idle grant %v, want %v", got, capacity)
				}
			}
		})
	}
}

// TestFirstFlightStart: the first flight's start is judged when its first
// data packet went. A dialer whose first packet went in time keeps its
// flight after two handshake RTTs have passed (a flight that starts late
// in them outlasts them; it used to stop there, and a ring all-reduce
// whose first step went 6 ns before the lapse sent one packet per plane
// and waited a round trip); one whose first packet goes later has one
// packet, unless the grant is held (HoldFirstGrant).
func TestFirstFlightStart(t *testing.T) {
	for _, tc := range []struct {
		name   string
		hold   bool
		flight uint8    // the first packet: not yet, in time, late
		at     sim.Time // now, in handshake RTTs after the SYN_ACK
		whole  bool     // want the whole flight (else one packet)
	}{
		{"first packet now, in time", false, flightNone, 1, true},
		{"first packet went in time, now past two RTTs", false, flightInTime, 3, true},
		{"first packet now, late", false, flightNone, 3, false},
		{"first packet went late", false, flightLate, 3, false},
		{"held grant: first packet now, late", true, flightNone, 3, true},
		{"held grant: first packet went late", true, flightLate, 5, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLab(t, transporttest.Config{Seed: 1, LinkRate: 100e9}, Options{HoldFirstGrant: tc.hold})
			c := metaConn(l.ca)
			if !c.dialer || c.s.srtt <= 0 {
				t.Fatalf("dialer %v, handshake RTT %v", c.dialer, c.s.srtt)
			}
			const hint = 1e9 // bytes/s
			c.s.heard, c.s.hint, c.ctl.flight = false, hint, tc.flight
			c.now = c.ctl.echoAt + tc.at*c.s.srtt
			want := c.mss
			if tc.whole {
				want = max(c.mss, int(hint*c.firstFlightRTT().Seconds()))
			}
			if got := c.window(); got != want {
				t.Errorf("window %d before the first ACK, want %d", got, want)
			}
		})
	}
}
