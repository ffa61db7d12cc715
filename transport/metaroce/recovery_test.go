package metaroce_test

// Loss recovery with shallow queues (issue 27): few messages outstanding,
// so each path holds one or two packets and a path's own SACK rarely shows
// a hole. Loss detection across paths (lossdetect.go) finds such losses
// about one round trip after they were sent.

import (
	"fmt"
	"testing"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/metaroce"
	"github.com/mrlab/mrlab/workload"
)

// TestTargetShallowLoss: 16 outstanding messages, random loss on every
// link, goodput as a fraction of the same bed loss-free, and the same
// lossy run with two oracles: job.oracle (the sender learns of each lost
// data packet the moment a wire drops it: the bound of any loss
// detection on the bed) and job.oracleRTT (it learns one base RTT after
// the packet was sent: the bound of any rule that needs a later packet's
// ACK, as RACK across paths and a receiver's report of a gap in a
// connection-wide sequence both do; no ACK is lost or held for it).
//
// The floors are regression guards: the figures measured (seed 1) less
// a margin of about 0.03. History of 16 streams at 10%: 0.419 where a
// lost packet began to cost wire time (fabric.LossAtWire), 0.408 with the
// measured lateness, 0.387 once ties broke by (time, origin, seq), 0.372
// with the active paths capped by the window, 0.411 with suspect moves
// under the chance rule (probe.go), 0.476 with ACK redundancy by the
// chance rule (ackgen.go), 0.494 with a quick extra ACK copy under
// measured loss (ackgen.go; seeds 1-5: 0.435 (0.411-0.447) -> 0.494
// (0.476-0.497) -> 0.513 (0.494-0.524); seeds 1-15 median 0.495 ->
// 0.514; seed 1 is the worst of the five). Seeds 1-5 now: leafspine one
// stream 0.685 (0.644-0.725), 16 streams at 1% 0.935 (0.925-0.950), 10us
// one stream 0.477 (0.353-0.501; seeds 1-15 median 0.457, before 0.448),
// 16 streams 0.622 (0.605-0.662). With proactive copies while the share
// is unused (redundancy.go; seeds 1-5 median (worst), before -> after,
// TestCopiesSeeds): one stream 1% 0.688 (0.682) -> 0.811 (0.801), 16
// streams 10% 0.472 (0.459) -> 0.663 (0.648), 16 streams 1% 0.933
// (0.927) -> 0.947 (0.945), 10us one stream 0.480 (0.429) -> 0.499
// (0.474), 10us 16 streams 0.632 (0.604) -> 0.655 (0.641); the floors
// are seed 1 with copies less about 0.03, so the leaf-spine ones fail
// without them.
//
// The one-RTT oracle says where the rest goes. The one-stream cases are
// near it (seeds 1-5 with the measured ACK hold of lossdetect.go's notes:
// leafspine 0.706 against 0.727, 10us 0.463 against 0.469): their loss is
// found about one RTT after it was sent (measured: 10.0-10.4 us from
// send to declaration on leafspine, base RTT about 9.5 us), as soon as
// any end-to-end signal can show it, and what the instant oracle gains
// beyond (0.880, 0.704) is the time the packet would have spent reaching
// the receiver and its ACK coming back. A connection-wide transmission
// sequence that lets the receiver report gaps needs a later packet's
// arrival too: it is bounded by the same one-RTT oracle. So no loss detection reaches the
// issue's 0.85 for one stream; a stream's in-order completion holds the
// whole queue for about two round trips per loss, and only sending less
// often into that wait (redundancy while the window has room) would.
// The 10us 1-stream drop from 0.491 to 0.458 with the ACK redundancy
// rule was the five seeds: over seeds 1-30, 0.452 (k = 2) and 0.438 (the
// rule) median, 0.446 and 0.437 mean.
func TestTargetShallowLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("long")
	}
	leafspine := bed{topo: "leafspine", rate: 100e9, hpl: 2, spines: 2}
	long := leafspine
	long.delay = 10 * sim.Microsecond
	for _, c := range []struct {
		name      string
		b         bed
		size      int
		streams   int
		loss      float64
		min       float64
		oracleMin float64
	}{
		{"b2b 4KiB", bed{topo: "b2b", rate: 100e9}, 4 << 10, 1, 0.01, 0.94, 0.95},
		{"b2b 4KiB", bed{topo: "b2b", rate: 100e9}, 4 << 10, 1, 0.1, 0.80, 0.87},
		{"leafspine 4KiB", leafspine, 4 << 10, 1, 0.01, 0.77, 0.84},
		{"leafspine 4KiB", leafspine, 4 << 10, 16, 0.01, 0.92, 0.94},
		{"leafspine 4KiB", leafspine, 4 << 10, 16, 0.1, 0.61, 0.72},
		{"leafspine 10us 64KiB", long, 64 << 10, 1, 0.01, 0.47, 0.67},
		{"leafspine 10us 64KiB", long, 64 << 10, 16, 0.01, 0.63, 0.79},
	} {
		t.Run(fmt.Sprintf("%s %d streams %g%%", c.name, c.streams, 100*c.loss), func(t *testing.T) {
			run := func(loss float64, oracle, oracleRTT bool) outcome {
				b := c.b
				b.loss = lossModel(loss, false)
				spec := b.bulk(transport.MetaRoCE, 200)
				spec.Size, spec.QueueDepth, spec.Streams = c.size, 16, c.streams
				spec.Duration = max(spec.Duration, sim.Millisecond)
				return b.run(t, job{spec: spec, oracle: oracle, oracleRTT: oracleRTT})
			}
			free, lossy, oracle, oracleRTT := run(0, false, false), run(c.loss, false, false), run(c.loss, true, false), run(c.loss, false, true)
			ratio, bound, rttBound := lossy.goodput/free.goodput, oracle.goodput/free.goodput, oracleRTT.goodput/free.goodput
			t.Logf("%.1f Gb/s loss-free, %.1f Gb/s at %g%%: %.3f (%d retransmissions, %d timeouts); with the oracle %.3f, told one base RTT after the send %.3f",
				free.goodput/1e9, lossy.goodput/1e9, 100*c.loss, ratio, lossy.res.Retransmits, lossy.res.Timeouts, bound, rttBound)
			if ratio < c.min {
				t.Errorf("%.3f of loss-free goodput, want >= %.2f", ratio, c.min)
			}
			if bound < c.oracleMin {
				t.Errorf("with the oracle %.3f of loss-free goodput, want >= %.2f", bound, c.oracleMin)
			}
		})
	}
}

// TestTargetPlanesDefaultPaths: an 8-plane k=4 fat-tree permutation with
// the default options (8 paths per plane: 64, all active under a window
// of hundreds of packets) carries at least 0.8 of its capacity loss-free
// in steady state (#27's target), 64 KiB WRITEs, 64 outstanding per
// connection (16 cover under one base RTT of an 800 Gbit/s host).
// Measured 0.845; 0.752 with 4 paths per plane (32), the default before
// the active paths were capped by the window (DefaultPaths).
func TestTargetPlanesDefaultPaths(t *testing.T) {
	if testing.Short() {
		t.Skip("long")
	}
	b := bed{topo: "fattree", rate: 100e9, planes: 8}
	spec := workload.Spec{Name: workload.Permutation, Transport: transport.MetaRoCE, Size: 64 << 10, QueueDepth: 64,
		Duration: 400 * sim.Microsecond}
	o := b.run(t, job{spec: spec, from: 100 * sim.Microsecond, to: spec.Duration})
	frac := o.goodput / (16 * 8 * b.rate * wireLimit(transport.MetaRoCE, 64<<10))
	t.Logf("%.0f Gb/s = %.3f of capacity, %d retransmissions, %d timeouts", o.goodput/1e9, frac, o.res.Retransmits, o.res.Timeouts)
	if frac < 0.8 {
		t.Errorf("%.3f of capacity, want >= 0.8", frac)
	}
}

// TestManyConnsFewMoves: many connections per host pair on 4 planes (a
// small plane-scaling bed: 16 KiB WRITEs, 2 in flight per connection,
// each connection paced at a sliver of the hosts' capacity), so the
// receiving NICs' transmit schedulers hold ACKs for many packet times and
// every path of a connection hears late alike. A path whose tail-loss
// probe goes unanswered moves its chunks only with evidence against its
// route (probe.go); moving on silence alone, most moves were spurious and
// each such chunk went twice: 3.36% of data packets sent again, 1.58%
// with the rule, 1.57% with the active paths capped by the window too
// (8 hosts, 250 connections per pair, 4 KiB packets), 1.56% with the
// suspect rule's chance count and the receiver's ACK redundancy (#27),
// unchanged (1.56%) with the quick ACK copy under measured loss; 0.38%
// with copies on a timer loss-free too (ackgen.go's notes: not kept).
func TestManyConnsFewMoves(t *testing.T) {
	if testing.Short() {
		t.Skip("long")
	}
	b := bed{topo: "leafspine", rate: 100e9, planes: 4, hpl: 4, spines: 2}
	spec := workload.Spec{Name: workload.Permutation, Transport: transport.MetaRoCE, Size: 16 << 10, QueueDepth: 2,
		Conns: 250, Iterations: 250 * 4}
	o := b.run(t, job{spec: spec})
	data := uint64(0)
	for _, nic := range o.cl.NICs {
		for _, c := range nic.Conns() {
			if mc, ok := c.Transport().(*metaroce.Conn); ok {
				data += mc.Stats().DataPacketsSent
			}
		}
	}
	frac := float64(o.res.Retransmits) / float64(data)
	t.Logf("%.0f Gb/s, %d data packets, %d retransmissions (%.2f%%), %d timeouts, %d errors",
		o.goodput/1e9, data, o.res.Retransmits, 100*frac, o.res.Timeouts, o.res.Errors)
	if o.res.Errors != 0 || frac > 0.025 {
		t.Errorf("%.2f%% of data packets sent again (want <= 2.5%%), %d errors", 100*frac, o.res.Errors)
	}
}

// TestAckLossNotResent: at 10% bursty loss on every link of a k=4
// fat-tree (47% of packets lost end to end, ACKs as often as data), the
// receiver's ACKs carry each path's state often enough that a path whose
// ACKs were lost is seldom taken for one whose packets were: fewer than
// 2.5% of the data packets the receiver accepts arrive a second time
// under the same PSN (a resend of a packet that had arrived). With every
// arrival carried by two ACKs whatever the loss (both lost for one
// arrival in five), 4.93% did; with the receiver's chance rule
// (ackgen.go: 10 ACKs here) 0.55%; 0.70% with the quick extra ACK copy
// (24 of 3,448: small counts; the owed copies themselves a packet time
// apart, all in one burst, made it 2.28%). (The regimes cell fattree 10G 10%
// bursty, seeds 1 and 5: 4.9% and 4.9% before, 1.0% and 1.3% after.)
func TestAckLossNotResent(t *testing.T) {
	if testing.Short() {
		t.Skip("long")
	}
	b := bed{topo: "fattree", rate: 10e9, loss: lossModel(0.1, true)}
	o := b.run(t, job{spec: b.bulk(transport.MetaRoCE, 300)})
	var rx, dup uint64
	for _, nic := range o.cl.NICs {
		for _, c := range nic.Conns() {
			if mc, ok := c.Transport().(*metaroce.Conn); ok {
				st := mc.Stats()
				rx += st.DataReceived
				dup += st.DupPackets
			}
		}
	}
	frac := float64(dup) / float64(rx)
	t.Logf("%d data packets accepted, %d arrived again under the same PSN (%.2f%%), %d retransmissions", rx, dup, 100*frac, o.res.Retransmits)
	if rx == 0 || frac > 0.025 {
		t.Errorf("%.2f%% of accepted data packets arrived again under the same PSN, want <= 2.5%%", 100*frac)
	}
}
