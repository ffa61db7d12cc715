package rocev2

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport/rocev2/ib"
)

// TestReorderWindow: what the responder keeps past a gap, from sequences
// of arrivals (PSNs relative to a start near the 24-bit wrap).
func TestReorderWindow(t *testing.T) {
	const base = ib.PSN(ib.PSNMask - 5)
	cases := []struct {
		name   string
		size   int
		epsn   int
		arrive []int
		kept   []bool
		take   []int // taken in this order after the arrivals
		got    []bool
	}{
		{name: "past the gap", size: 8, epsn: 0, arrive: []int{1, 2, 3}, kept: []bool{true, true, true}, take: []int{1, 2, 3, 4}, got: []bool{true, true, true, false}},
		{name: "expected and earlier are not kept", size: 8, epsn: 4, arrive: []int{4, 3, 0}, kept: []bool{false, false, false}},
		{name: "window edge", size: 4, epsn: 0, arrive: []int{4, 5, 8}, kept: []bool{true, false, false}, take: []int{4, 5}, got: []bool{true, false}},
		{name: "duplicate kept once", size: 8, epsn: 0, arrive: []int{2, 2}, kept: []bool{true, false}, take: []int{2, 2}, got: []bool{true, false}},
		{name: "across the wrap", size: 16, epsn: 3, arrive: []int{9, 4, 12}, kept: []bool{true, true, true}, take: []int{4, 9, 12}, got: []bool{true, true, true}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var w reorderWindow
			w.init(c.size)
			epsn := base.Add(c.epsn)
			var kept, got []bool
			for _, a := range c.arrive {
				kept = append(kept, w.put(epsn, base.Add(a), []byte{byte(a)}))
			}
			for _, p := range c.take {
				b, ok := w.take(base.Add(p))
				if ok && (len(b) != 1 || b[0] != byte(p)) {
					t.Errorf("take %d: bytes %v", p, b)
				}
				got = append(got, ok)
			}
			if diff := cmp.Diff(c.kept, kept); diff != "" {
				t.Errorf("kept (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(c.got, got); diff != "" {
				t.Errorf("taken (-want +got):\n%s", diff)
			}
		})
	}
}

// TestResendQueue: each PSN once, oldest first, bounded.
func TestResendQueue(t *testing.T) {
	var q resendQueue
	for _, p := range []ib.PSN{5, 7, 5, 9} {
		q.push(p)
	}
	var got []ib.PSN
	for p, ok := q.pop(); ok; p, ok = q.pop() {
		got = append(got, p)
	}
	if diff := cmp.Diff([]ib.PSN{5, 7, 9}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	for i := 0; i < 100; i++ {
		q.push(ib.PSN(i))
	}
	if q.n != len(q.q) {
		t.Errorf("queue holds %d, want its bound %d", q.n, len(q.q))
	}
}

// TestSelectiveRepeat drops chosen packets of a 64-packet WRITE whose
// whole message is in flight before any NAK can return, and checks the
// NAKs the responder sends (the first missing PSN of each hole, once),
// the set the requester resends (exactly the lost packets), that nothing
// goes back N, and the data. The NAK for a hole is repeated every
// AckEvery packets that arrive past it (the first could be lost); the
// requester ignores repeats within a round trip of its resend.
func TestSelectiveRepeat(t *testing.T) {
	cases := []struct {
		drop     []int
		naks     []int
		timeouts uint64
		resent   []int // nil: exactly drop
		dups     uint64
	}{
		{drop: []int{0}, naks: []int{0}},
		{drop: []int{20}, naks: []int{20}},
		{drop: []int{20, 21}, naks: []int{20, 21}},
		{drop: []int{5, 40}, naks: []int{5, 40}},
		{drop: []int{3, 4, 5, 50}, naks: []int{3, 4, 5, 50}},
		// The last packet: nothing follows it to reveal the hole, so the
		// ACK timer fires and resends the oldest unacknowledged PSN, 48
		// (received, but ACKs come every 16 packets); its ACK stops short
		// of 63, sent before the timeout, so 63 goes at once (a partial
		// ACK), with no second timeout and no go-back-N.
		{drop: []int{63}, naks: nil, timeouts: 1, resent: []int{48, 63}, dups: 1},
	}
	for _, c := range cases {
		g := newGBN(t, Options{SelectiveRepeat: true, AckTimeout: 2 * sim.Millisecond})
		var naks []int
		prev := g.h.onSend
		g.h.onSend = func(from *endpoint, pk *ib.Packet) {
			prev(from, pk)
			if from == g.h.b && pk.BTH.Opcode() == ib.OpAcknowledge && pk.AETH.Syndrome() == ib.SyndromeNAKSequence {
				naks = append(naks, pk.BTH.PSN().Diff(g.firstPSN))
			}
		}
		dropped := map[int]bool{}
		g.h.filter = func(from *endpoint, pk *ib.Packet) verdict {
			if from == g.h.a && pk.BTH.Opcode().Class() == ib.ClassWrite {
				k := pk.BTH.PSN().Diff(g.firstPSN)
				if slices.Contains(c.drop, k) && !dropped[k] {
					dropped[k] = true
					return drop
				}
			}
			return pass
		}
		g.run(t, sim.Second)
		var resent []int
		for psn := 0; psn < gbnPackets; psn++ {
			if g.sentPSN[psn] > 1 {
				resent = append(resent, psn)
			}
		}
		want := c.resent
		if want == nil {
			want = c.drop
		}
		if diff := cmp.Diff(want, resent); diff != "" {
			t.Errorf("drop %v: resend set (-want +got):\n%s", c.drop, diff)
		}
		distinct := slices.Compact(slices.Clone(naks))
		if diff := cmp.Diff(c.naks, distinct); diff != "" {
			t.Errorf("drop %v: NAKs (-want +got):\n%s", c.drop, diff)
		}
		if max := len(c.naks) + gbnPackets/16; len(naks) > max {
			t.Errorf("drop %v: %d NAKs %v, want at most %d (one per hole, repeated per 16 packets past it)", c.drop, len(naks), naks, max)
		}
		s, r := g.h.a.conn.Stats(), g.h.b.conn.Stats()
		if s.Rewinds != 0 || s.Timeouts != c.timeouts || s.SelectiveResends != uint64(len(want)) {
			t.Errorf("drop %v: rewinds %d timeouts %d selective resends %d", c.drop, s.Rewinds, s.Timeouts, s.SelectiveResends)
		}
		// Every packet past a hole was kept, none dropped.
		if r.OutOfOrderKept != r.OutOfSequence || r.Duplicates != c.dups {
			t.Errorf("drop %v: responder kept %d of %d out-of-sequence packets, %d duplicates", c.drop, r.OutOfOrderKept, r.OutOfSequence, r.Duplicates)
		}
	}
}

// TestSelectiveRepeatOffIsGoBackN: the same loss without the option
// resends everything after it (the baseline stays as it was).
func TestSelectiveRepeatOffIsGoBackN(t *testing.T) {
	g := newGBN(t, Options{})
	g.dropOnce(40)
	g.run(t, sim.Second)
	if s := g.h.a.conn.Stats(); s.Retransmitted != gbnPackets-40 || s.SelectiveResends != 0 || s.Rewinds != 1 {
		t.Fatalf("go-back-N: %+v", s)
	}
}

// TestAdaptiveTimer: the adaptive timer follows the measured round trip
// (RFC 6298), never below its floor or above the ACK timeout, and doubles
// per timeout without progress.
func TestAdaptiveTimer(t *testing.T) {
	us := sim.Microsecond
	o, err := Options{AdaptiveRetrans: true, AckTimeout: 1000 * us}.resolved()
	if err != nil {
		t.Fatal(err)
	}
	r := requester{o: &o}
	if got := r.rto(); got != 1000*us {
		t.Errorf("before a sample: %v, want the ACK timeout", got)
	}
	// Samples of 10 us: srtt 10, rttvar 5 then shrinking.
	for i := 0; i < 3; i++ {
		r.rtt.sent(ib.PSN(i), sim.Time(i)*100*us)
		r.rtt.acked(ib.PSN(i+1), sim.Time(i)*100*us+10*us)
	}
	if r.rtt.srtt != 10*us || r.rtt.min != 10*us {
		t.Errorf("srtt %v min %v, want 10us", r.rtt.srtt, r.rtt.min)
	}
	base := r.rto()
	if want := r.rtt.srtt + 4*r.rtt.rttvar; base != want || base < 10*us || base > 30*us {
		t.Errorf("rto %v, want srtt+4 rttvar = %v", base, want)
	}
	for i, want := range []sim.Time{2 * base, 4 * base, 8 * base} {
		r.backoff = i + 1
		if got := r.rto(); got != want {
			t.Errorf("backoff %d: %v, want %v", i+1, got, want)
		}
	}
	r.backoff = 20
	if got := r.rto(); got != 1000*us {
		t.Errorf("backoff 20: %v, want the 1 ms cap", got)
	}
	// A retransmission cancels the running sample (Karn).
	r.rtt.sent(100, 0)
	r.rtt.retransmitted()
	r.rtt.acked(200, 50*us)
	if r.rtt.srtt > 10*us {
		t.Errorf("a retransmitted sample was taken: srtt %v", r.rtt.srtt)
	}
	// The floor: a 1 us round trip still waits 4 us.
	var e rttEstimator
	e.sent(0, 0)
	e.acked(1, us)
	if got := e.rto(o.AdaptiveMinTimeout, o.AckTimeout); got != 4*us {
		t.Errorf("floor: %v, want 4us", got)
	}
}

// TestSlowRestartAndTxWindow: after a timeout the window is one packet
// and grows by what each ACK covers; the transmit window is the BDP of
// the smallest round trip.
func TestSlowRestartAndTxWindow(t *testing.T) {
	o, _ := Options{SlowRestart: true, TxWindow: true}.resolved()
	c := &Conn{o: &o, mtu: 4096}
	c.cfg.LineRate = 100e9
	r := &c.req
	r.init(&o, 0, 600)
	r.conn = c
	if got := r.effWindow(); got != 600 {
		t.Errorf("before any sample: window %d, want Window 600", got)
	}
	r.rtt.sent(0, 0)
	r.rtt.acked(1, 10*sim.Microsecond) // 10 us at 100 Gbit/s: 30.5 packets
	if got := r.effWindow(); got != 31 {
		t.Errorf("transmit window %d, want the 10 us BDP, 31 packets", got)
	}
	r.cwnd = 1
	var got []int
	for _, acked := range []int{1, 2, 4, 8, 16} {
		got = append(got, r.effWindow())
		r.progress(c, 0, acked)
	}
	got = append(got, r.effWindow(), r.cwnd)
	if diff := cmp.Diff([]int{1, 2, 4, 8, 16, 31, 32}, got); diff != "" {
		t.Errorf("slow restart windows (-want +got):\n%s", diff)
	}
	for r.cwnd != 0 {
		r.progress(c, 0, 64)
	}
	if r.effWindow() != 31 {
		t.Errorf("after the restart: window %d", r.effWindow())
	}
}

// TestModernRecoveryUnderLoss: the long WRITE of TestGoodputCollapsesWithLoss
// (100 Gb/s, 10 us round trip, random loss both ways) with selective
// repeat, the adaptive timer and slow restart keeps most of its loss-free
// goodput where go-back-N collapses.
func TestModernRecoveryUnderLoss(t *testing.T) {
	gbn := harnessConfig{rate: 100e9, delay: 5 * sim.Microsecond, opts: Options{Timeout: 8}}
	modern := gbn
	modern.opts.SelectiveRepeat, modern.opts.AdaptiveRetrans, modern.opts.SlowRestart = true, true, true
	const size = 16 << 20
	seeds := uint64(2)
	for _, p := range []float64{0.01, 0.05} {
		var rg, rm float64
		var sm ConnStats
		for seed := uint64(1); seed <= seeds; seed++ {
			b, _ := goodput(t, 0, seed, gbn, size)
			g, _ := goodput(t, p, seed, gbn, size)
			bm, _ := goodput(t, 0, seed, modern, size)
			m, s := goodput(t, p, seed, modern, size)
			rg += g / b / float64(seeds)
			rm += m / bm / float64(seeds)
			sm.Timeouts += s.Timeouts
			sm.SelectiveResends += s.SelectiveResends
			sm.Rewinds += s.Rewinds
		}
		t.Logf("loss %g%%: go-back-N %.3f of loss-free, modern %.3f (%d selective resends, %d timeouts, %d rewinds)",
			p*100, rg, rm, sm.SelectiveResends, sm.Timeouts, sm.Rewinds)
		// At 1% (measured 0.98) within 10% of the loss ceiling; at 5%
		// (measured 0.52: a resend lost after the last repeated NAK
		// waits for the timer) at least 4x go-back-N (0.06).
		if (p == 0.01 && (rm < 0.9*(1-p) || rm <= rg)) || (p == 0.05 && rm < 4*rg) {
			t.Errorf("loss %g: modern RoCEv2 keeps %.3f of loss-free (go-back-N %.3f)", p, rm, rg)
		}
	}
}
