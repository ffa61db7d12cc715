package fabric_test

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/header"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/workload/udpgen"
)

// endPs returns when the k-th (1-based) of back-to-back packets of size
// bytes finishes serializing at rate bit/s, in ps: floor(k*size*8e12/rate).
func endPs(k, size int, rate float64) int64 {
	num := new(big.Int).Mul(big.NewInt(int64(k*size*8)), big.NewInt(1e12))
	return new(big.Int).Quo(num, big.NewInt(int64(rate))).Int64()
}

func TestSerializationExact(t *testing.T) {
	cases := []struct {
		name  string
		size  int
		rate  float64
		n     int
		delay sim.Time
	}{
		{"4096B@100G", 4096, 100e9, 1000, 0},
		{"4096B@100G+1us", 4096, 100e9, 1000, sim.Microsecond},
		{"1500B@25G", 1500, 25e9, 300, 500},
		{"64B@400G", 64, 400e9, 500, 0},
		{"4096B@3G", 4096, 3e9, 200, 10}, // 10922.666.. ns: remainders carry
		{"9000B@1.5G", 9000, 1.5e9, 50, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l, port, s1 := b2b(t, fabric.LinkParams{Rate: c.rate, Delay: c.delay, QueueBytes: c.n * c.size}, fabric.BuildOptions{})
			for i := 0; i < c.n; i++ {
				port.Send(0, udp(l.pool, addr0, addr1, 1, 2, c.size, 0))
			}
			l.loop.Run()
			if len(s1.got) != c.n {
				t.Fatalf("got %d packets, want %d", len(s1.got), c.n)
			}
			for k, a := range s1.got {
				want := sim.Time((endPs(k+1, c.size, c.rate)+999)/1000) + c.delay
				if a.at != want {
					t.Fatalf("packet %d arrived at %v, want %v", k, a.at, want)
				}
			}
			if l.pool.Outstanding() != 0 {
				t.Errorf("%d buffers leaked", l.pool.Outstanding())
			}
		})
	}
	// The figure, spelled out: 1000 x 4096 B at 100 Gbit/s take
	// exactly 327680 ns, and one takes 327.68 ns (the first arrives in ns 328).
	if got := endPs(1000, 4096, 100e9); got != 327680*1000 {
		t.Fatalf("1000 packets end at %d ps", got)
	}
}

// A pull-style sender (one packet per idle callback) keeps the line
// exactly busy: no rounding gap between packets.
func TestSerializationPull(t *testing.T) {
	topo, err := fabric.BackToBack(fabric.BackToBackParams{Link: fabric.LinkParams{Rate: 100e9, Delay: 2 * sim.Microsecond}})
	l := newLab(t, mustTopo(t, topo, err), fabric.BuildOptions{})
	hs, err := udpgen.AttachAll(l.net, l.pool, l.loop)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hs[0].AddFlow(udpgen.FlowSpec{Dst: hs[1].Addr(), SrcPort: 1, DstPort: 2, Size: 4096, Count: 1000}); err != nil {
		t.Fatal(err)
	}
	hs[0].Start(0)
	l.loop.Run()
	rx := hs[1].Received()
	if len(rx) != 1 || rx[0].Packets != 1000 {
		t.Fatalf("received %+v", rx)
	}
	if want := 327680 + 2*sim.Microsecond; rx[0].Last != want {
		t.Errorf("last packet at %v, want %v", rx[0].Last, want)
	}
	c := l.net.Counters()
	if lc, _ := c.Link("p0-h0-h1", fabric.AtoB); lc.QueueMaxBytes != 0 {
		t.Errorf("pull sender queued %d bytes", lc.QueueMaxBytes)
	}
}

// Store-and-forward at equal rates never queues, although events fire on
// whole nanoseconds: switches forward with the exact picosecond arrival.
func TestForwardingAtLineRateDoesNotQueue(t *testing.T) {
	topo, err := fabric.LeafSpine(fabric.LeafSpineParams{Leaves: 2, Spines: 1, HostsPerLeaf: 1,
		HostLink: fabric.LinkParams{Delay: 700}, FabricLink: fabric.LinkParams{Delay: 1300}})
	l := newLab(t, mustTopo(t, topo, err), fabric.BuildOptions{})
	hs, err := udpgen.AttachAll(l.net, l.pool, l.loop)
	if err != nil {
		t.Fatal(err)
	}
	hs[0].AddFlow(udpgen.FlowSpec{Dst: hs[1].Addr(), SrcPort: 1, DstPort: 2, Size: 4096, Count: 500})
	hs[0].Start(0)
	l.loop.Run()
	c := l.net.Counters()
	for _, lc := range c.Links {
		if lc.QueueMaxBytes != 0 {
			t.Errorf("%s:%v queued up to %d bytes", lc.Link, lc.Dir, lc.QueueMaxBytes)
		}
	}
	// 4 hops of 327.68 ns + 700+1300+1300+700 ns propagation after the last
	// packet leaves the host at 500*327.68 ns.
	want := sim.Time((endPs(500, 4096, 100e9) + 3*327680 + 4000*1000 + 999) / 1000)
	if got := hs[1].Received()[0].Last; got != want {
		t.Errorf("last arrival %v, want %v", got, want)
	}
}

func TestQueueDropTailAndDepth(t *testing.T) {
	const size, queued, extra = 4096, 10, 9
	l, port, s1 := b2b(t, fabric.LinkParams{Rate: 100e9, QueueBytes: queued * size}, fabric.BuildOptions{})
	for i := 0; i < 1+queued+extra; i++ {
		port.Send(0, udp(l.pool, addr0, addr1, 1, 2, size, 0))
	}
	const end = 10 * sim.Microsecond
	l.loop.RunUntil(end)
	if len(s1.got) != 1+queued {
		t.Fatalf("delivered %d, want %d", len(s1.got), 1+queued)
	}
	c := l.net.Counters()
	lc, _ := c.Link("p0-h0-h1", fabric.AtoB)
	var wantDrops fabric.DropCounts
	wantDrops[fabric.DropQueueFull] = extra
	if diff := cmp.Diff(wantDrops, lc.Drops); diff != "" {
		t.Errorf("drops (-want +got):\n%s", diff)
	}
	if lc.TxPackets != 1+queued || lc.TxBytes != (1+queued)*size || lc.RxPackets != 1+queued {
		t.Errorf("tx %d/%d rx %d", lc.TxPackets, lc.TxBytes, lc.RxPackets)
	}
	if lc.QueueMaxBytes != queued*size {
		t.Errorf("max queue %d, want %d", lc.QueueMaxBytes, queued*size)
	}
	// The queue holds 10 packets at 0 and loses one each time a
	// serialization ends, in the nanosecond its last bit leaves.
	var area float64
	prev := sim.Time(0)
	for j := 1; j <= queued; j++ {
		tj := sim.Time(endPs(j, size, 100e9) / 1000)
		area += float64((queued-j+1)*size) * float64(tj-prev)
		prev = tj
	}
	if want := area / float64(end); math.Abs(lc.QueueAvgBytes-want) > 1e-9*want {
		t.Errorf("time-averaged queue %v, want %v", lc.QueueAvgBytes, want)
	}
	pc, _ := c.Port("h0", 0)
	if pc.TxPackets != 1+queued+extra || pc.Drops[fabric.DropQueueFull] != extra {
		t.Errorf("port view: %+v", pc)
	}
}

// ECN step marking: an ECT packet is marked exactly when the bytes queued
// ahead of it exceed K, for any arrival pattern.
func TestECNStepMarksExactlyAboveK(t *testing.T) {
	const K = 20000
	l, port, s1 := b2b(t, fabric.LinkParams{Rate: 10e9, QueueBytes: 1 << 20,
		ECN: fabric.ECNConfig{Mode: fabric.ECNStep, K: K}}, fabric.BuildOptions{})
	rec := &recorderWithNet{net: l.net}
	l.net.SetObserver(rec)
	r := rand.New(rand.NewPCG(1, 2))
	ecns := []uint8{header.ECNECT0, header.ECNECT1, header.ECNNotECT, header.ECNCE}
	sent := map[uint64]uint8{}
	at := sim.Time(0)
	for i := 0; i < 3000; i++ {
		at += sim.Time(r.IntN(1200))
		size := 64 + r.IntN(1500)
		ecn := ecns[r.IntN(len(ecns))]
		l.loop.RunUntil(at)
		b := udp(l.pool, addr0, addr1, 1, 2, size, ecn)
		sent[b.ID] = ecn
		port.Send(at, b)
	}
	l.loop.Run()
	marked := map[uint64]bool{}
	var marks, ectSeen int
	for _, e := range rec.evs {
		switch e.ev {
		case fabric.EvMark:
			marked[e.id] = true
		case fabric.EvEnqueue:
			ect := sent[e.id] == header.ECNECT0 || sent[e.id] == header.ECNECT1
			if !ect {
				if marked[e.id] {
					t.Fatalf("non-ECT packet %d marked", e.id)
				}
				continue
			}
			ectSeen++
			if want := e.queue > K; marked[e.id] != want {
				t.Fatalf("packet %d found %d bytes queued: marked=%v", e.id, e.queue, marked[e.id])
			}
			if marked[e.id] {
				marks++
			}
		}
	}
	if marks == 0 || marks == ectSeen {
		t.Fatalf("%d of %d ECT packets marked: the test load does not straddle K", marks, ectSeen)
	}
	// Receivers see CE on marked packets, with a valid IPv4 checksum.
	ce := 0
	for _, a := range s1.got {
		if !a.ok {
			t.Fatal("marked packet arrived with a bad IPv4 header")
		}
		if a.ecn == header.ECNCE {
			ce++
		}
	}
	ceSent := 0
	for _, e := range sent {
		if e == header.ECNCE {
			ceSent++
		}
	}
	lc, _ := l.net.Counters().Link("p0-h0-h1", fabric.AtoB)
	if lc.Drops.Total() != 0 {
		t.Fatalf("unexpected drops %v", lc.Drops)
	}
	if int(lc.ECNMarks) != marks || ce != marks+ceSent {
		t.Errorf("counter %d marks, observer %d, CE received %d (sent CE %d)", lc.ECNMarks, marks, ce, ceSent)
	}
}

// RED: nothing below Min, everything at or above Max, and in between a
// mark rate matching the linear probability.
func TestECNRED(t *testing.T) {
	const minB, maxB, pmax = 10000, 30000, 0.5
	l, port, _ := b2b(t, fabric.LinkParams{Rate: 10e9, QueueBytes: 1 << 20,
		ECN: fabric.ECNConfig{Mode: fabric.ECNRED, Min: minB, Max: maxB, PMax: pmax}}, fabric.BuildOptions{Seed: 3})
	rec := &recorderWithNet{net: l.net}
	l.net.SetObserver(rec)
	// Bursts of 40 packets, each drained before the next: the queue
	// sweeps 0..39000 bytes, so every burst crosses Min and Max.
	for burst := 0; burst < 500; burst++ {
		at := sim.Time(burst) * 40 * sim.Microsecond
		l.loop.RunUntil(at)
		for i := 0; i < 40; i++ {
			port.Send(at, udp(l.pool, addr0, addr1, 1, 2, 1000, header.ECNECT0))
		}
	}
	l.loop.Run()
	marked := map[uint64]bool{}
	var expect, variance float64
	var mid, midMarks int
	for _, e := range rec.evs {
		switch e.ev {
		case fabric.EvMark:
			marked[e.id] = true
		case fabric.EvEnqueue:
			q := e.queue
			switch {
			case q < minB && marked[e.id]:
				t.Fatalf("marked below Min at queue %d", q)
			case q >= maxB && !marked[e.id]:
				t.Fatalf("not marked above Max at queue %d", q)
			case q >= minB && q < maxB:
				p := pmax * float64(q-minB) / float64(maxB-minB)
				expect += p
				variance += p * (1 - p)
				mid++
				if marked[e.id] {
					midMarks++
				}
			}
		}
	}
	if mid < 1000 {
		t.Fatalf("only %d arrivals between Min and Max", mid)
	}
	if d := math.Abs(float64(midMarks) - expect); d > 4*math.Sqrt(variance) {
		t.Errorf("%d marks between Min and Max, expected %.0f ± %.0f", midMarks, expect, math.Sqrt(variance))
	}
}

// RED on the averaged queue lags the instantaneous one.
func TestECNREDAveraged(t *testing.T) {
	l, port, _ := b2b(t, fabric.LinkParams{Rate: 10e9, QueueBytes: 1 << 20,
		ECN: fabric.ECNConfig{Mode: fabric.ECNRED, Min: 1000, Max: 2000, PMax: 1, Weight: 0.002}}, fabric.BuildOptions{})
	// A burst of 10 packets: the instantaneous queue reaches Max at the
	// fourth packet, the average (w = 0.002) stays far below Min.
	for i := 0; i < 10; i++ {
		port.Send(0, udp(l.pool, addr0, addr1, 1, 2, 1000, header.ECNECT0))
	}
	l.loop.Run()
	lc, _ := l.net.Counters().Link("p0-h0-h1", fabric.AtoB)
	if lc.ECNMarks != 0 {
		t.Errorf("averaged RED marked %d packets of a short burst", lc.ECNMarks)
	}
	l.net.SetECN("p0-h0-h1", fabric.AtoB, fabric.ECNConfig{Mode: fabric.ECNRED, Min: 1000, Max: 2000, PMax: 1})
	for i := 0; i < 10; i++ {
		port.Send(l.loop.Now(), udp(l.pool, addr0, addr1, 1, 2, 1000, header.ECNECT0))
	}
	l.loop.Run()
	lc2, _ := l.net.Counters().Link("p0-h0-h1", fabric.AtoB)
	// Packet i (0-based) finds (i-1)*1000 bytes queued: i >= 3 reach Max;
	// i = 2 finds exactly Min, where the probability is 0.
	if marks := lc2.ECNMarks - lc.ECNMarks; marks != 7 {
		t.Errorf("instantaneous RED marked %d, want 7", marks)
	}
}

func TestLinkDownDropsQueueAndWire(t *testing.T) {
	l, port, s1 := b2b(t, fabric.LinkParams{Rate: 100e9, Delay: 5 * sim.Microsecond}, fabric.BuildOptions{})
	idles := 0
	port.SetOnIdle(func(now sim.Time) { idles++ })
	for i := 0; i < 20; i++ {
		port.Send(0, udp(l.pool, addr0, addr1, 1, 2, 4096, 0))
	}
	// At 2 us: 6 packets have left (327.68 ns each), 1 serializing, 13 queued.
	l.loop.RunUntil(2 * sim.Microsecond)
	if err := l.net.SetLinkUp(2*sim.Microsecond, "p0-h0-h1", false); err != nil {
		t.Fatal(err)
	}
	if port.Up() || !port.Idle() || idles != 1 {
		t.Fatalf("after down: up=%v idle=%v idle callbacks=%d", port.Up(), port.Idle(), idles)
	}
	port.Send(l.loop.Now(), udp(l.pool, addr0, addr1, 1, 2, 4096, 0))
	l.loop.RunUntil(10 * sim.Microsecond)
	if err := l.net.SetLinkUp(10*sim.Microsecond, "p0-h0-h1", true); err != nil {
		t.Fatal(err)
	}
	if idles != 2 {
		t.Errorf("no idle callback when the link came back")
	}
	port.Send(l.loop.Now(), udp(l.pool, addr0, addr1, 1, 2, 4096, 0))
	l.loop.Run()
	lc, _ := l.net.Counters().Link("p0-h0-h1", fabric.AtoB)
	// 6 on the wire + 1 serializing + 13 queued + 1 sent while down.
	if lc.Drops[fabric.DropLinkDown] != 21 || len(s1.got) != 1 {
		t.Errorf("link-down drops %d, delivered %d; want 21, 1", lc.Drops[fabric.DropLinkDown], len(s1.got))
	}
	if l.pool.Outstanding() != 0 {
		t.Errorf("%d buffers leaked", l.pool.Outstanding())
	}
}

func TestRateChangeNextPacket(t *testing.T) {
	l, port, s1 := b2b(t, fabric.LinkParams{Rate: 100e9}, fabric.BuildOptions{})
	for i := 0; i < 3; i++ {
		port.Send(0, udp(l.pool, addr0, addr1, 1, 2, 4096, 0))
	}
	// Degrade to 10 Gbit/s while the first packet serializes: the second
	// and third serialize at the new rate.
	if err := l.net.SetImpairment("p0-h0-h1", fabric.AtoB, fabric.Impairment{Rate: 10e9}); err != nil {
		t.Fatal(err)
	}
	l.loop.Run()
	// Ends at 327.68 ns, then +3276.8 ns twice, delivered in the next ns.
	want := []sim.Time{328, 3605, 6882}
	var got []sim.Time
	for _, a := range s1.got {
		got = append(got, a.at)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("arrivals (-want +got):\n%s", diff)
	}
	if port.Rate() != 10e9 {
		t.Errorf("Rate() = %v", port.Rate())
	}
}

func TestImpairmentDelayDistributions(t *testing.T) {
	cases := []struct {
		spec       string
		mean, std  float64 // of the added delay, ns
		lo, hi     float64 // bounds of the added delay, ns
		checkStd   bool
		meanTolStd float64
	}{
		{"delay 10us", 10000, 0, 10000, 10000, true, 0},
		{"delay 10us 2us", 10000, 2000 / math.Sqrt(3), 8000, 12000, true, 4},
		{"delay 10us 2us distribution normal", 10000, 2000, 0, math.Inf(1), true, 4},
		{"delay 10us 2us distribution pareto", 10000, 2000 * math.Sqrt(0.75), 9000, math.Inf(1), false, 6},
		{"delay 10us 2us distribution paretonormal", 10000, 2000 * math.Sqrt(0.75*0.75+0.25*0.25*0.75), 0, math.Inf(1), false, 4},
	}
	for _, c := range cases {
		t.Run(c.spec, func(t *testing.T) {
			imp, err := fabric.ParseImpairment(c.spec)
			if err != nil {
				t.Fatal(err)
			}
			l, port, _ := b2b(t, fabric.LinkParams{Rate: 100e9, Delay: 1000, Impair: imp}, fabric.BuildOptions{Seed: 9})
			rec := &recorderWithNet{net: l.net}
			l.net.SetObserver(rec)
			const n = 20000
			sentAt := map[uint64]sim.Time{}
			for i := 0; i < n; i++ {
				at := sim.Time(i) * sim.Microsecond
				l.loop.RunUntil(at)
				b := udp(l.pool, addr0, addr1, 1, 2, 1000, 0)
				sentAt[b.ID] = at
				port.Send(at, b)
			}
			l.loop.Run()
			var sum, sq float64
			got := 0
			for _, e := range rec.evs {
				if e.ev != fabric.EvDeliver {
					continue
				}
				// 80 ns serialization + 1 us propagation, then the impairment.
				d := float64(e.at - sentAt[e.id] - 80 - 1000)
				if d < c.lo-0.5 || d > c.hi+0.5 {
					t.Fatalf("added delay %v ns outside [%v, %v]", d, c.lo, c.hi)
				}
				sum += d
				sq += d * d
				got++
			}
			if got != n {
				t.Fatalf("delivered %d of %d", got, n)
			}
			mean := sum / n
			std := math.Sqrt(sq/n - mean*mean)
			tol := 1.0
			if c.std > 0 {
				tol = c.meanTolStd * c.std / math.Sqrt(n)
			}
			if math.Abs(mean-c.mean) > tol+0.5 {
				t.Errorf("mean added delay %.1f ns, want %.1f ± %.1f", mean, c.mean, tol)
			}
			if c.checkStd && math.Abs(std-c.std) > 0.05*c.std+0.5 {
				t.Errorf("std of added delay %.1f ns, want %.1f", std, c.std)
			}
		})
	}
}

func TestImpairmentDuplicateCorruptReorder(t *testing.T) {
	cases := []struct {
		spec                      string
		at                        fabric.LossPoint
		dupFrac, corrupt, reorder bool
		fcs                       bool
	}{
		{spec: "duplicate 30%", dupFrac: true},
		{spec: "corrupt 100%", at: fabric.LossAtEnqueue, corrupt: true},
		{spec: "corrupt 30%", fcs: true},
		{spec: "delay 20us reorder 25%", reorder: true},
	}
	for _, c := range cases {
		t.Run(c.spec+"/"+c.at.String(), func(t *testing.T) {
			imp, err := fabric.ParseImpairment(c.spec)
			if err != nil {
				t.Fatal(err)
			}
			topo, err := fabric.BackToBack(fabric.BackToBackParams{Link: fabric.LinkParams{Rate: 100e9, Delay: 1000, Impair: imp, LossAt: c.at}})
			l := newLab(t, mustTopo(t, topo, err), fabric.BuildOptions{Seed: 4})
			hs, err := udpgen.AttachAll(l.net, l.pool, l.loop)
			if err != nil {
				t.Fatal(err)
			}
			const n = 10000
			hs[0].AddFlow(udpgen.FlowSpec{Dst: hs[1].Addr(), SrcPort: 7, DstPort: 9, Size: 1000, Count: n, Rate: 1e9})
			hs[0].Start(0)
			l.loop.Run()
			rx := hs[1].Received()
			lc, _ := l.net.Counters().Link("p0-h0-h1", fabric.AtoB)
			var got udpgen.RecvStats
			for _, r := range rx {
				if r.SrcPort == 7 && r.DstPort == 9 {
					got = r
				}
			}
			if len(rx) != 1 && !c.corrupt {
				t.Fatalf("received %+v", rx)
			}
			switch {
			case c.dupFrac:
				if got.Packets != n+lc.Duplicated || math.Abs(float64(lc.Duplicated)/n-0.3) > 0.02 {
					t.Errorf("received %d, duplicated %d of %d", got.Packets, lc.Duplicated, n)
				}
				if got.Duplicates != lc.Duplicated || got.OutOfOrder != 0 {
					t.Errorf("receiver saw %d duplicates (want %d), %d out of order", got.Duplicates, lc.Duplicated, got.OutOfOrder)
				}
			case c.fcs:
				// On the wire a flipped bit is an FCS error: the frame
				// used the line and the receiving port discards it.
				pc, _ := l.net.Counters().Port("h1", 0)
				if got.Packets+lc.Corrupted != n || lc.TxPackets != n || got.Corrupt != 0 ||
					lc.Drops[fabric.DropFCS] != lc.Corrupted || pc.FCSErrors != lc.Corrupted || pc.Drops[fabric.DropFCS] != lc.Corrupted ||
					math.Abs(float64(lc.Corrupted)/n-0.3) > 0.02 {
					t.Errorf("received %d (%d corrupt), transmitted %d, corrupted %d, FCS drops %d, h1 FCS errors %d of %d",
						got.Packets, got.Corrupt, lc.TxPackets, lc.Corrupted, lc.Drops[fabric.DropFCS], pc.FCSErrors, n)
				}
				if h0, _ := l.net.Counters().Port("h0", 0); h0.Drops[fabric.DropFCS] != 0 {
					t.Errorf("sender's port counts the receiver's FCS errors: %v", h0.Drops)
				}
			case c.corrupt:
				// The bit lands after the IPv4 header: every packet still
				// routes and arrives, and the receiver sees the damage
				// (UDP header or payload).
				pk, _ := hs[1].ReceivedTotal()
				if pk+hs[1].Other() != n || lc.Corrupted != n {
					t.Errorf("received %d (+%d other), corrupted %d of %d", pk, hs[1].Other(), lc.Corrupted, n)
				}
				// Most flips land in the 964-byte payload, which the
				// receiver checks; the rest hit the UDP header.
				if frac := float64(got.Corrupt) / n; frac < 0.95 {
					t.Errorf("receiver found %d corrupt payloads of %d", got.Corrupt, n)
				}
			case c.reorder:
				if got.Packets != n {
					t.Errorf("received %d", got.Packets)
				}
				// A delayed packet (75%) arrives out of order when one of
				// the next two (sent 8 and 16 us later, < 20 us) skipped
				// the delay: 0.75 x (1 - 0.75^2) = 0.328.
				if frac := float64(got.OutOfOrder) / n; math.Abs(frac-0.328) > 0.02 {
					t.Errorf("out-of-order fraction %.3f, want 0.328", frac)
				}
			}
			if l.pool.Outstanding() != 0 {
				t.Errorf("%d buffers leaked", l.pool.Outstanding())
			}
		})
	}
}

// TestRingGrowPowersOfTwo: a port's rings wrap their indices with a mask,
// which is right only while every size ringGrow gives is a power of two.
func TestRingGrowPowersOfTwo(t *testing.T) {
	n := 0
	for range 20 {
		n = fabric.RingGrow(n)
		if n&(n-1) != 0 {
			t.Fatalf("ringGrow gave %d, not a power of two", n)
		}
	}
}
