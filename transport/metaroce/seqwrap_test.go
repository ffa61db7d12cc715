package metaroce

import (
	"testing"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
)

// TestSequenceWrap runs SENDs, WRITEs and READs between two engines whose
// message, chunk and receive numbers start just below 2^32, so the send
// queue's and the receiver's windows (msgOpen, the queue limits, the DSN
// window, the receive tokens, msn_base) all cross the wrap, with and
// without loss: every message completes once and nothing fails.
func TestSequenceWrap(t *testing.T) {
	const msgs = 120
	for _, drop := range []int{0, 7} {
		p := newPair(Options{}, 2, 100e9, 4096)
		p.dropEvery = drop
		for i, e := range p.ends {
			c, peer := e.conn, p.ends[1-i].conn
			const top = uint32(0xffffffff) // the last number before the wrap
			msn, dsn, tok := top-40, top-3, top-25
			c.s.msnBase, c.s.msnNext, c.s.segNext = msn, msn, msn
			c.s.dsnBase, c.s.dsnNext = dsn, dsn
			c.s.tokens = tok
			peer.r.msnBase, peer.r.peerBase = msn, msn
			peer.r.dsn.base = dsn
			peer.r.rqBase, peer.r.rqNext = tok, tok
		}
		a, b := p.ends[0], p.ends[1]
		for k := range msgs / 3 {
			if err := b.conn.PostRecv(p.now, recvWR(uint64(1000+k), addrRcv+uint64(k)*2048, 2048)); err != nil {
				t.Fatal(err)
			}
		}
		posted := 0
		for k := range msgs {
			var wr *transport.WorkRequest
			switch k % 3 {
			case 0:
				wr = send(uint64(k+1), uint16(k%4), addrRW, 1500+k)
			case 1:
				wr = &transport.WorkRequest{ID: uint64(k + 1), Op: transport.OpWrite, Stream: uint16(k % 4),
					RemoteAddr: addrRW + 8192, RKey: keyRW, NumSGE: 1}
				wr.SGL[0] = transport.SGE{Addr: addrRW, Len: 9000, LKey: keyRW}
			default:
				wr = &transport.WorkRequest{ID: uint64(k + 1), Op: transport.OpRead, Stream: uint16(k % 4),
					RemoteAddr: addrRW, RKey: keyRW, NumSGE: 1}
				wr.SGL[0] = transport.SGE{Addr: addrRcv + 1<<19, Len: 5000, LKey: keyRecv}
			}
			for a.conn.PostSend(p.now, wr) == transport.ErrQueueFull {
				if !p.step() {
					t.Fatalf("drop %d: stalled with a full queue after %d posts", drop, posted)
				}
			}
			posted++
		}
		for steps := 0; a.done < msgs || b.done < msgs/3; steps++ {
			if steps > 1e6 || p.now > sim.Second || !p.step() {
				t.Fatalf("drop %d: %d of %d sends and %d of %d receives completed by %v (failed %d %d, last %+v %+v)", drop, a.done, msgs, b.done, msgs/3, p.now, a.failed, b.failed, a.last, b.last)
			}
		}
		if a.failed+b.failed != 0 {
			t.Errorf("drop %d: %d and %d failed completions (last %+v, %+v)", drop, a.failed, b.failed, a.last, b.last)
		}
		if a.done != msgs || b.done != msgs/3 {
			t.Errorf("drop %d: %d and %d completions, want %d and %d", drop, a.done, b.done, msgs, msgs/3)
		}
		c, peer := a.conn, b.conn
		for name, v := range map[string]uint32{"msn_base": c.s.msnBase, "dsn_base": c.s.dsnBase, "tokens": c.s.tokens,
			"peer msn_base": peer.r.msnBase, "peer rq_base": peer.r.rqBase} {
			if v > 1000 {
				t.Errorf("drop %d: %s is %#x: it did not cross the wrap", drop, name, v)
			}
		}
		if drop > 0 && p.dropped == 0 {
			t.Errorf("drop %d: nothing was dropped", drop)
		}
	}
}
