package rocev2

import (
	"net/netip"
	"testing"
	"time"

	"github.com/mrlab/mrlab/internal/header"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/rocev2/ib"
)

// streamPair is an established pair with a endlessly WRITEing 1 MiB
// messages to b (and b SENDing to a, so both halves of both QPs run),
// keeping a few requests queued. Completions are counted, not kept.
type streamPair struct {
	h          *harness
	wr, sendWR transport.WorkRequest
	recvWR     transport.WorkRequest
	posted     int
}

const streamMsg = 1 << 20

func newStreamPair(tb testing.TB, hc harnessConfig) *streamPair {
	hc.noTrace = true
	h := newHarness(tb, hc)
	h.dial()
	h.a.keep, h.b.keep = false, false
	lkey, src := h.a.mem.add(0x1000, streamMsg, allAccess)
	rkey, _ := h.b.mem.add(0x1000, streamMsg, allAccess)
	fill(src, 1)
	bl, _ := h.b.mem.add(0x20_0000, 4096, allAccess)
	al, _ := h.a.mem.add(0x20_0000, 4096, allAccess)
	p := &streamPair{h: h, wr: writeWR(1, lkey, 0x1000, streamMsg, rkey, 0x1000),
		sendWR: sendWR(2, bl, 0x20_0000, 4096), recvWR: recvWR(3, al, 0x20_0000, 4096)}
	p.top()
	return p
}

// top keeps four WRITEs and four SENDs outstanding.
func (p *streamPair) top() {
	now := p.h.loop.Now()
	for p.posted-p.h.a.nComp < 4 {
		p.h.a.conn.PostSend(now, &p.wr)
		p.posted++
	}
	for int(p.h.b.conn.req.tail-p.h.b.conn.req.head) < 4 {
		p.h.a.conn.PostRecv(now, &p.recvWR)
		p.h.b.conn.PostSend(now, &p.sendWR)
	}
	p.h.a.after(now)
	p.h.b.after(now)
}

func (p *streamPair) step() {
	if !p.h.loop.Step() {
		panic("loop ran dry")
	}
	p.top()
}

// TestSteadyStateAllocatesNothing runs the whole pair (both engines,
// framing, ICRC, the event loop) for many packets after a warm-up and
// requires zero allocations per event, with DCQCN throttling on (CE
// marks) and without.
func TestSteadyStateAllocatesNothing(t *testing.T) {
	for _, ce := range []bool{false, true} {
		p := newStreamPair(t, harnessConfig{})
		if ce {
			p.h.filter = func(from *endpoint, pk *ib.Packet) verdict {
				if pk.BTH.PSN()%7 == 0 {
					return markCE
				}
				return pass
			}
		}
		for i := 0; i < 20000; i++ { // warm up: pools, heap, queues
			p.step()
		}
		before := p.h.a.conn.Stats()
		allocs := testing.AllocsPerRun(20000, p.step)
		after := p.h.a.conn.Stats()
		if after.DataPackets-before.DataPackets < 1000 {
			t.Fatalf("ce=%v: only %d packets during the measurement", ce, after.DataPackets-before.DataPackets)
		}
		if ce && after.RateCuts == 0 {
			t.Fatalf("CE marks did not engage DCQCN")
		}
		if allocs != 0 {
			t.Fatalf("ce=%v: %.2f allocations per event in steady state, want 0", ce, allocs)
		}
	}
}

// TestLossRecoveryAllocatesNothing: go-back-N, NAKs and timeouts do not
// allocate either (tracing off).
func TestLossRecoveryAllocatesNothing(t *testing.T) {
	p := newStreamPair(t, harnessConfig{opts: Options{AckTimeout: 100 * sim.Microsecond}})
	p.h.filter = lossy(0.01, 3)
	for i := 0; i < 20000; i++ {
		p.step()
	}
	before := p.h.a.conn.Stats()
	allocs := testing.AllocsPerRun(20000, p.step)
	after := p.h.a.conn.Stats()
	if after.Rewinds == before.Rewinds {
		t.Fatal("no go-back-N during the measurement")
	}
	if allocs != 0 {
		t.Fatalf("%.3f allocations per event under loss, want 0", allocs)
	}
}

// BenchmarkPairWrite streams 1 MiB WRITEs between two QPs through the
// harness (real IPv4/UDP framing, ICRC seal and check, event loop) at
// 100 Gb/s; one op is one event of the loop. It reports request packets
// per second of CPU time.
func BenchmarkPairWrite(b *testing.B) {
	p := newStreamPair(b, harnessConfig{rate: 100e9})
	for i := 0; i < 20000; i++ {
		p.step()
	}
	b.ReportAllocs()
	before := p.h.a.conn.Stats().DataPackets + p.h.b.conn.Stats().DataPackets
	simStart := p.h.loop.Now()
	start := time.Now()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p.step()
	}
	b.StopTimer()
	el := time.Since(start)
	pkts := p.h.a.conn.Stats().DataPackets + p.h.b.conn.Stats().DataPackets - before
	b.ReportMetric(float64(pkts)/el.Seconds(), "pkts/s")
	b.ReportMetric((p.h.loop.Now()-simStart).Seconds()/el.Seconds(), "sim-s/s")
}

// BenchmarkEngineWrite is the baseline for BenchmarkPairWrite: the same
// two QPs wired back to back by direct calls (a.Transmit -> b.Receive,
// b.Transmit -> a.Receive), without framing, ICRC or the event loop. One
// op is one request packet.
func BenchmarkEngineWrite(b *testing.B) {
	p := newStreamPair(b, harnessConfig{rate: 100e9})
	ac, bc := p.h.a.conn, p.h.b.conn
	now := p.h.loop.Now()
	ab := make([]byte, 4096+transport.HeaderRoom)
	ba := make([]byte, 4096+transport.HeaderRoom)
	rx := transport.RxMeta{}
	run := func(n int) {
		for sent := 0; sent < n; {
			now += 330 * sim.Nanosecond // a 4 KiB packet at 100 Gb/s
			if k, _ := ac.Transmit(now, 0, ab); k > 0 {
				bc.Receive(now, ab[:k], rx)
				sent++
			}
			for {
				k, _ := bc.Transmit(now, 0, ba)
				if k == 0 {
					break
				}
				ac.Receive(now, ba[:k], rx)
			}
			for p.posted-p.h.a.nComp < 4 {
				ac.PostSend(now, &p.wr)
				p.posted++
			}
		}
	}
	run(20000)
	b.ReportAllocs()
	start := time.Now()
	b.ResetTimer()
	run(b.N)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "pkts/s")
}

// BenchmarkICRC seals one 4 KiB-payload packet.
func BenchmarkICRC(b *testing.B) {
	pkt := make([]byte, framing+ib.BTHSize+ib.RETHSize+4096+ib.ICRCSize)
	header.IPv4(pkt).Encode(&header.IPv4Fields{TotalLength: uint16(len(pkt)), Protocol: header.IPv4ProtoUDP,
		Src: netip.MustParseAddr("198.18.0.1"), Dst: netip.MustParseAddr("198.18.0.2")})
	header.UDP(pkt[header.IPv4MinSize:]).Encode(0xc000, UDPPort, len(pkt)-framing)
	b.SetBytes(int64(len(pkt)))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		SealICRC(pkt)
	}
}
