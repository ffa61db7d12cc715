package verbsperf

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"time"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/verbs"
	"github.com/mrlab/mrlab/workload"
)

// Run connects to a server at to and runs spec.
//
// The steps: connect and learn the server's region (connect), post
// messages while the window allows and take their completions
// (postWindow, complete) to the count or duration, sum up (measured) and
// exchange the fin for what the server checked (finish).
func Run(ctx context.Context, dev *verbs.Device, to netip.AddrPort, spec Spec) (*Result, error) {
	if err := spec.Check(); err != nil {
		return nil, err
	}
	if l := dev.Limits(); l.MaxWR < spec.Depth+3 {
		return nil, fmt.Errorf("depth %d: the endpoint's queues hold at most %d", spec.Depth, l.MaxWR-3)
	}
	s, err := newSide(dev, &spec, spec.Depth)
	if err != nil {
		return nil, err
	}
	c := &client{s: s, spec: spec, size: spec.Size}
	if err := c.connect(ctx, to); err != nil {
		return nil, err
	}
	c.res = &Result{Spec: spec, Status: "ok", Transport: s.qp.Transport().String(), MTU: dev.PathMTU()}
	res := c.res
	c.credits = spec.Test == SendBW || spec.Test == WriteBW && spec.Verify
	if spec.Test != SendBW && !spec.Verify {
		for i := 0; i < spec.Depth; i++ { // a pattern, even unchecked
			s.fill(c.slotBytes(uint64(i)), uint64(i))
		}
	}
	// Post and completion times, from the first post, for the BW peak.
	c.peak = spec.Test != WriteLat && !spec.NoPeak && spec.Count > 0 && spec.Count <= MaxPeakMessages
	if c.peak {
		c.postAt, c.doneAt = make([]sim.Time, 0, spec.Count), make([]sim.Time, 0, spec.Count)
	}
	sw, err := dev.StartTiming()
	if err != nil {
		return nil, err
	}
	s.looks = 0 // the connection's set-up is not the run's
	s.pace = newPacer(spec.Depth, func() (uint64, uint64) {
		done := c.done
		if c.credits {
			done = min(done, c.credited)
		}
		return done, c.posted - done
	})
	cpu0 := processCPU()
	c.start = time.Now()
	c.last = c.start
	for c.more() || c.done < c.posted || c.credits && c.credited < c.posted {
		if err := c.postWindow(); err != nil {
			return res, err
		}
		wc, err := s.next(ctx)
		if err != nil {
			res.Errors++
			res.Status = err.Error()
			return res, fmt.Errorf("after %d of %d messages: %w", c.done, c.posted, err)
		}
		if err := c.complete(wc); err != nil {
			return res, err
		}
	}
	timing, err := sw.Stop()
	if err != nil {
		return res, err
	}
	res.Timing = &timing
	res.CPU = cpuSince(cpu0)
	res.noteWaits(s)
	c.measured()
	if err := c.finish(ctx); err != nil {
		return res, err
	}
	st := dev.Stats()
	res.Posted, res.Doorbells, res.Waits = st.Posted, st.Doorbells, st.Waits
	if res.QP, err = s.qp.Query(); err != nil {
		return res, err
	}
	return res, nil
}

// client is Run's state.
type client struct {
	s    *side
	spec Spec
	res  *Result
	size int
	// raddr and rkey name the server's region.
	raddr uint64
	rkey  uint32
	// credits: checked WRITEs and SENDs reuse a slot only once the server
	// has credited it.
	credits                bool
	posted, done, credited uint64
	lat                    []time.Duration
	// peak: postAt and doneAt record each message's post and completion
	// times from the first post, for the BW peak.
	peak           bool
	postAt, doneAt []sim.Time
	// start is the first post, last the last completion, t0 the last
	// post (write_lat's round trip).
	start, last, t0 time.Time
}

// slot returns the offset of message i's slot in the client's region.
func (c *client) slot(i uint64) int { return int(i%uint64(c.spec.Depth)) * c.size }

func (c *client) slotBytes(i uint64) []byte {
	off := c.slot(i)
	return c.s.buf.Bytes()[off : off+c.size]
}

// connect allocates the client's region, posts the control receives,
// connects, sends the hello and waits for the server's ready reply: the
// address and key of the region messages go to.
func (c *client) connect(ctx context.Context, to netip.AddrPort) error {
	s, spec, size := c.s, &c.spec, c.size
	var err error
	// Depth slots to send from (write_lat: one, and one the echo lands in).
	if s.buf, err = s.pd.AllocMR((spec.Depth+1)*size, verbs.AccessLocalWrite|verbs.AccessRemoteWrite); err != nil {
		return err
	}
	// Receives for the ready message, every credit, the fin reply, and
	// write_lat's echoes.
	for i := 0; i < spec.Depth+2; i++ {
		if err := s.recvCtl(replyOff); err != nil {
			return err
		}
	}
	// The server's QP may be bound to the connection after the hello
	// arrives (it waits in the listener's backlog until the server's
	// Accept, which a busy machine can delay by milliseconds): RNR NAKs
	// until then must not fail the run, so rnr_retry is forever, as
	// perftest sets it.
	if err := s.qp.SetRNRRetry(verbs.RNRRetryForever); err != nil {
		return err
	}
	if err := s.qp.Connect(ctx, to); err != nil {
		return err
	}
	s.key = rand.Uint64() | 1 // this connection's pattern key, told to the server
	putHello(s.ctl.Bytes()[helloOff:], spec, s.buf.Addr()+uint64(size), s.buf.RKey(), s.key)
	if err := s.qp.PostSend(verbs.SendWR{ID: 1 << 40, Op: verbs.OpSend, SGL: []verbs.SGE{s.ctl.SGE(helloOff, 64)}}); err != nil {
		return err
	}
	for c.raddr == 0 {
		wc, err := s.next(ctx)
		if err != nil {
			return err
		}
		if wc.Op == verbs.OpRecv {
			r := s.ctl.Bytes()[replyOff:]
			c.raddr, c.rkey = binary.LittleEndian.Uint64(r), binary.LittleEndian.Uint32(r[8:])
			if err := s.recvCtl(replyOff); err != nil {
				return err
			}
		}
	}
	return nil
}

// more reports whether messages remain to be posted: to the count, or
// until the duration has passed since the first post.
func (c *client) more() bool {
	if c.spec.Count > 0 {
		return c.posted < uint64(c.spec.Count)
	}
	return time.Since(c.start) < c.spec.Duration
}

// postWindow posts while the window allows: depth in flight, and for
// checked WRITEs and SENDs a slot the server has checked. A full send
// queue ends the window early.
func (c *client) postWindow() error {
	s, spec, depth := c.s, &c.spec, uint64(c.spec.Depth)
	for c.more() && c.posted-c.done < depth && (!c.credits || c.posted-c.credited < depth) &&
		(spec.Test != WriteLat || c.posted == c.done) {
		wr := c.request()
		if c.posted == 0 {
			c.start = time.Now()
		}
		c.t0 = time.Now()
		if err := s.qp.PostSend(wr); err != nil {
			if errors.Is(err, verbs.ErrQueueFull) {
				return nil
			}
			return err
		}
		if c.peak {
			c.postAt = append(c.postAt, sim.Time(time.Since(c.start)))
		}
		c.posted++
	}
	return nil
}

// request builds the next message's work request and, when checked,
// fills its bytes with the message's pattern.
func (c *client) request() verbs.SendWR {
	s, spec, size := c.s, &c.spec, c.size
	off := c.slot(c.posted)
	wr := verbs.SendWR{ID: c.posted, SGL: []verbs.SGE{s.buf.SGE(off, size)}}
	switch spec.Test {
	case WriteBW:
		wr.Op, wr.RemoteAddr, wr.RKey = verbs.OpWrite, c.raddr+uint64(off), c.rkey
		if spec.Verify {
			wr.Op, wr.Imm = verbs.OpWriteImm, uint32(c.posted)
		}
	case SendBW:
		wr.Op = verbs.OpSend
	case ReadBW:
		wr.Op, wr.RemoteAddr, wr.RKey = verbs.OpRead, c.raddr+uint64(off), c.rkey
	case WriteLat:
		wr.Op, wr.Imm, wr.RemoteAddr, wr.RKey = verbs.OpWriteImm, uint32(c.posted), c.raddr, c.rkey
		wr.SGL[0] = s.buf.SGE(0, size)
	}
	if spec.Verify && spec.Test != ReadBW {
		b := s.buf.Bytes()[off : off+size]
		if spec.Test == WriteLat {
			b = s.buf.Bytes()[:size]
		}
		s.fill(b, c.posted)
	}
	return wr
}

// complete takes one completion: write_lat's echo, a credit, or one of
// the client's own messages (the control sends, IDs from 1<<40, are
// ignored).
func (c *client) complete(wc verbs.WC) error {
	s, spec, res, size := c.s, &c.spec, c.res, c.size
	switch {
	case spec.Test == WriteLat && wc.Op == verbs.OpRecvImm:
		c.lat = append(c.lat, time.Since(c.t0)/2)
		i := uint64(wc.Imm)
		if i != c.done || int(wc.Bytes) != size {
			return fmt.Errorf("%w: echo %d of %d bytes, expected %d", ErrProtocol, i, wc.Bytes, c.done)
		}
		if spec.Verify {
			res.Checked++
			if !s.check(res, s.buf.Bytes()[size:2*size], i) {
				res.Errors++
			}
		}
		c.done++
		c.last = time.Now()
		return s.recvCtl(replyOff)
	case wc.Op == verbs.OpRecvImm:
		// A credit; its bad bit is counted by the server, which
		// reports its total at the end.
		c.credited++
		return s.recvCtl(replyOff)
	case wc.Op == verbs.OpWrite || wc.Op == verbs.OpWriteImm && spec.Test != WriteLat || wc.Op == verbs.OpSend || wc.Op == verbs.OpRead:
		if wc.ID >= 1<<40 {
			return nil
		}
		if spec.Test == ReadBW && spec.Verify {
			res.Checked++
			if !s.check(res, c.slotBytes(wc.ID), wc.ID%uint64(spec.Depth)) {
				res.Errors++
			}
		}
		c.done++
		c.last = time.Now()
		if c.peak {
			c.doneAt = append(c.doneAt, sim.Time(c.last.Sub(c.start)))
		}
	}
	return nil
}

// measured fills in the result's counts, goodput, latency and BW peak.
func (c *client) measured() {
	res, spec := c.res, &c.spec
	res.Messages = int64(c.done)
	res.Bytes = int64(c.done) * int64(c.size)
	res.Elapsed = c.last.Sub(c.start)
	if res.Elapsed > 0 && spec.Test != WriteLat {
		res.Goodput = float64(res.Bytes) * 8 / res.Elapsed.Seconds()
	}
	if len(c.lat) > 0 {
		res.Latency = summarize(c.lat)
	}
	if c.peak {
		res.CQMod = spec.cqMod()
		res.BWPeakGbps = workload.PeakGbps(c.postAt, c.doneAt, c.size, res.CQMod)
	}
}

// finish tells the server the client is done and learns what it checked.
func (c *client) finish(ctx context.Context) error {
	s, spec, res := c.s, &c.spec, c.res
	if err := s.sendImm(uint32(c.done)); err != nil {
		return err
	}
	for {
		wc, err := s.next(ctx)
		if err != nil {
			return err
		}
		if wc.Op == verbs.OpRecv {
			r := s.ctl.Bytes()[replyOff:]
			if checked, bad := binary.LittleEndian.Uint64(r), binary.LittleEndian.Uint64(r[8:]); spec.Test == WriteBW || spec.Test == SendBW {
				res.Checked, res.Errors = int64(checked), res.Errors+int(bad)
			}
			break
		}
	}
	res.Verified = spec.Verify && res.Errors == 0 && res.Checked == res.Messages
	if res.Errors > 0 {
		res.Status = fmt.Sprintf("%d of %d messages did not check out", res.Errors, res.Checked)
	}
	return nil
}
