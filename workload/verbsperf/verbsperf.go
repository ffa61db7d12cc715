// Package verbsperf is perftest over a live lab's verbs endpoint:
// write_bw, send_bw, read_bw and write_lat between two hosts, each side a
// process driving its host's NIC through package verbs, exactly as a
// user's program does. mrlab perf runs the two sides in the hosts and
// reports what they measured. Every byte can be checked: WRITEs and SENDs
// by the server as each message lands (a slot is reused only after its
// check), READs and ping-pong echoes by the client.
package verbsperf

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"slices"
	"time"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/verbs"
	"github.com/mrlab/mrlab/workload"
)

// Tests.
const (
	WriteBW  = "write"
	SendBW   = "send"
	ReadBW   = "read"
	WriteLat = "write_lat"
)

// Spec is a test as the client asks for it.
type Spec struct {
	Test      string          `json:"test"`
	Size      int             `json:"size"`
	Count     int             `json:"count"` // messages (round trips for write_lat); 0: run for Duration
	Duration  time.Duration   `json:"duration_ns"`
	Depth     int             `json:"depth"` // messages in flight (1 for write_lat)
	Transport verbs.Transport `json:"transport"`
	Verify    bool            `json:"verify"`
	// Events waits for completions in the kernel instead of polling.
	Events bool `json:"events"`
	// CQMod is perftest's CQ moderation for the BW peak (0: perftest's
	// default for the size); NoPeak skips the peak (perftest's -N).
	CQMod  int  `json:"cq_mod,omitempty"`
	NoPeak bool `json:"no_peak,omitempty"`
}

// MaxPeakMessages is the most messages a bandwidth run records post and
// completion times for (16 bytes each); a longer run, like any --duration
// run (as in perftest), reports no BW peak.
const MaxPeakMessages = 1 << 22

// perftest's CQ moderation: one completion in 100 is signalled up to 8 KiB
// messages, every one above.
func (s *Spec) cqMod() int {
	switch {
	case s.CQMod > 0:
		return s.CQMod
	case s.Size <= 8192:
		return 100
	}
	return 1
}

// Check validates a spec.
func (s *Spec) Check() error {
	switch s.Test {
	case WriteBW, SendBW, ReadBW:
	case WriteLat:
		s.Depth = 1
	default:
		return fmt.Errorf("test %q: want write, send, read or write_lat", s.Test)
	}
	switch {
	case s.Size < 1 || s.Size > 1<<30:
		return fmt.Errorf("size %d: want 1 byte to 1GiB", s.Size)
	case s.Depth < 1 || s.Depth > 1024:
		return fmt.Errorf("depth %d: want 1..1024", s.Depth)
	case s.Count < 0 || s.Count > 1<<31-1 || s.Duration < 0 || s.Count == 0 && s.Duration == 0:
		return fmt.Errorf("count %d, duration %v: want a count up to 2^31-1 or a duration", s.Count, s.Duration)
	case int64(s.Size)*int64(s.Depth) > 4<<30:
		return fmt.Errorf("%d messages of %d bytes in flight: more than 4GiB", s.Depth, s.Size)
	}
	return nil
}

// Result is what one side measured.
type Result struct {
	Spec      Spec          `json:"spec"`
	Transport string        `json:"transport"`
	Messages  int64         `json:"messages"`
	Bytes     int64         `json:"bytes"`
	Elapsed   time.Duration `json:"elapsed_ns"` // first post to last completion
	Goodput   float64       `json:"goodput_bps"`
	Latency   *Latency      `json:"latency,omitempty"`
	// BWPeakGbps is perftest's BW peak (bandwidth tests of a count up to
	// MaxPeakMessages; 0 otherwise) with CQMod its CQ moderation.
	BWPeakGbps float64 `json:"bw_peak_gbps,omitempty"`
	CQMod      int     `json:"cq_mod,omitempty"`
	// MTU is the client NIC's path MTU: RDMA payload bytes per packet.
	MTU int `json:"mtu,omitempty"`
	// Checked counts messages whose every byte was compared; Verified is
	// true when every message was checked and none differed.
	Checked  int64 `json:"checked"`
	Verified bool  `json:"verified"`
	// FirstBad names the first message that did not check out and the
	// offset of its first wrong byte (this side's checks).
	FirstBad string `json:"first_bad,omitempty"`
	Errors   int    `json:"errors"`
	Status   string `json:"status"`
	// The client's system calls on the data path (verbs.Stats).
	Posted    uint64 `json:"posted"`
	Doorbells uint64 `json:"doorbells"`
	Waits     uint64 `json:"waits"`
	// Timing says whether the lab kept real time during the measurement
	// (the client's; nil at the server).
	Timing *verbs.Timing `json:"timing,omitempty"`
	// QP is the client connection's counters (retransmissions, ECN).
	QP verbs.QPStats `json:"qp"`
}

// Latency is write_lat's one-way latency (half the round trip).
type Latency struct {
	N                              int
	Min, P50, Mean, P99, P999, Max time.Duration
	Stdev                          time.Duration
}

const (
	magic    = 0x56504652 // "RFPV"
	ctlSize  = 4096
	helloOff = 0    // the client's hello lands here at the server
	replyOff = 1024 // the server's ready and fin reply land here at the client
	ackOff   = 2048 // credits and other 0-byte messages need no space
	badBit   = 1 << 31
	seed     = 0x6d726c6162 // the data pattern's seed
)

// side is one end's verbs objects.
type side struct {
	dev  *verbs.Device
	pd   *verbs.PD
	cq   *verbs.CQ
	qp   *verbs.QP
	ctl  *verbs.MR
	buf  *verbs.MR
	wc   [64]verbs.WC
	have []verbs.WC
	ev   bool
	size int
	// key keys the data pattern: the client draws it and sends it in the
	// hello, so each connection's content differs from any other's.
	key uint64
}

func newSide(dev *verbs.Device, spec *Spec, depth int) (*side, error) {
	s := &side{dev: dev, ev: spec.Events}
	var err error
	if s.pd, err = dev.AllocPD(); err != nil {
		return nil, err
	}
	if s.ctl, err = s.pd.AllocMR(ctlSize, verbs.AccessLocalWrite); err != nil {
		return nil, err
	}
	q := depth + 3
	if s.cq, err = dev.CreateCQ(4 * q); err != nil {
		return nil, err
	}
	s.qp, err = dev.CreateQP(verbs.QPConfig{PD: s.pd, SendCQ: s.cq, RecvCQ: s.cq, Transport: spec.Transport, MaxSend: q, MaxRecv: q})
	return s, err
}

// next returns the next completion; a failed one is an error.
func (s *side) next(ctx context.Context) (verbs.WC, error) {
	for len(s.have) == 0 {
		if n := s.cq.Poll(s.wc[:]); n > 0 {
			s.have = s.wc[:n]
			break
		}
		if err := ctx.Err(); err != nil {
			return verbs.WC{}, err
		}
		if err := s.dev.Err(); err != nil {
			return verbs.WC{}, err // the lab stopped: Poll alone would spin forever
		}
		if s.ev {
			if err := s.cq.Wait(ctx); err != nil {
				return verbs.WC{}, err
			}
		} else {
			runtime.Gosched()
		}
	}
	wc := s.have[0]
	s.have = s.have[1:]
	if wc.Status != verbs.StatusSuccess {
		return wc, fmt.Errorf("%v completed with %v", wc.Op, wc.Status)
	}
	return wc, nil
}

// postSlotRecv posts the receive of slot k: where a SEND's data lands, or
// a WRITE_IMM's notification (no data).
func (s *side) postSlotRecv(spec *Spec, k uint64) error {
	wr := verbs.RecvWR{ID: k}
	if spec.Test == SendBW {
		wr.SGL = []verbs.SGE{s.buf.SGE(int(k)*s.size, s.size)}
	}
	return s.qp.PostRecv(wr)
}

// recvCtl posts a receive for a control message (or a credit).
func (s *side) recvCtl(off int) error {
	return s.qp.PostRecv(verbs.RecvWR{ID: uint64(off), SGL: []verbs.SGE{s.ctl.SGE(off, 64)}})
}

// sendImm sends a 0-byte SEND_IMM: a credit or the end of the test.
func (s *side) sendImm(imm uint32) error {
	return s.qp.PostSend(verbs.SendWR{ID: 1 << 40, Op: verbs.OpSendImm, Imm: imm})
}

// fill writes message msg's pattern into b; firstBad returns the offset of
// the first byte of b that differs from it (-1: none). xorshift64 words
// seeded by the connection's key and the message, so no copy of the data
// is needed to check it, and a chunk of another message or connection, or
// from another offset, never checks out.
func (s *side) fill(b []byte, msg uint64) {
	x := (s.key ^ (msg+1)*0x9e3779b97f4a7c15) | 1
	var t [8]byte
	for i := 0; i < len(b); i += 8 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		if i+8 <= len(b) {
			binary.LittleEndian.PutUint64(b[i:], x)
		} else {
			binary.LittleEndian.PutUint64(t[:], x)
			copy(b[i:], t[:])
		}
	}
}

func (s *side) firstBad(b []byte, msg uint64) int {
	x := (s.key ^ (msg+1)*0x9e3779b97f4a7c15) | 1
	var t [8]byte
	for i := 0; i < len(b); i += 8 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		binary.LittleEndian.PutUint64(t[:], x)
		for j := 0; j < 8 && i+j < len(b); j++ {
			if b[i+j] != t[j] {
				return i + j
			}
		}
	}
	return -1
}

// check reports whether b holds message msg, noting the first bad offset
// of the first message that does not in res.
func (s *side) check(res *Result, b []byte, msg uint64) bool {
	d := s.firstBad(b, msg)
	if d >= 0 && res.FirstBad == "" {
		res.FirstBad = fmt.Sprintf("message %d: byte %d of %d wrong", msg, d, len(b))
	}
	return d < 0
}

// The hello (client -> server, 64 bytes): magic, test, size, depth,
// verify, the client's landing region (write_lat). The ready reply
// (server -> client): the server's region. The fin reply: checked, bad.
var tests = []string{WriteBW, SendBW, ReadBW, WriteLat}

func putHello(b []byte, spec *Spec, addr uint64, rkey uint32, key uint64) {
	le := binary.LittleEndian
	le.PutUint32(b[0:], magic)
	b[4] = byte(slices.Index(tests, spec.Test))
	if spec.Verify {
		b[5] = 1
	}
	le.PutUint32(b[8:], uint32(spec.Depth))
	le.PutUint64(b[16:], uint64(spec.Size))
	le.PutUint64(b[24:], addr)
	le.PutUint32(b[32:], rkey)
	le.PutUint64(b[40:], key)
}

// ErrProtocol is a peer that does not speak this package's protocol.
var ErrProtocol = errors.New("verbsperf: peer broke the protocol")

// DefaultPort is the first port Serve tries when asked for any (port 0):
// perftest's.
const DefaultPort = 18515

// Serve accepts one client on port (0: the first free one from
// DefaultPort up) and serves its test until the client says it is done.
// listening, if set, learns the port once it listens. It returns what the
// server checked.
func Serve(ctx context.Context, dev *verbs.Device, port uint16, listening func(port uint16)) (*Result, error) {
	// The server does not know the depth before the hello: it sizes its
	// queues for the most a client may ask.
	pre := &Spec{Depth: 1024}
	s, err := newSide(dev, pre, pre.Depth)
	if err != nil {
		return nil, err
	}
	if err := s.recvCtl(helloOff); err != nil {
		return nil, err
	}
	var ln *verbs.Listener
	if port != 0 {
		ln, err = dev.Listen(s.pd, port, 1)
	} else {
		for port = DefaultPort; port < DefaultPort+1000; port++ {
			if ln, err = dev.Listen(s.pd, port, 1); !errors.Is(err, verbs.ErrBusy) {
				break
			}
		}
	}
	if err != nil {
		return nil, err
	}
	defer ln.Close()
	if listening != nil {
		listening(port)
	}
	if err := ln.Accept(ctx, s.qp); err != nil {
		return nil, err
	}
	wc, err := s.next(ctx)
	if err != nil {
		return nil, err
	}
	h := s.ctl.Bytes()[helloOff:]
	le := binary.LittleEndian
	if wc.Op != verbs.OpRecv || le.Uint32(h) != magic || int(h[4]) >= len(tests) {
		return nil, fmt.Errorf("%w: no hello", ErrProtocol)
	}
	spec := Spec{Test: tests[h[4]], Verify: h[5] == 1, Depth: int(le.Uint32(h[8:])), Size: int(le.Uint64(h[16:])), Count: 1}
	if err := spec.Check(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrProtocol, err)
	}
	peerAddr, peerKey := le.Uint64(h[24:]), le.Uint32(h[32:])
	if s.key = le.Uint64(h[40:]); s.key == 0 {
		s.key = seed // a client that sends no key
	}
	res := &Result{Spec: spec, Status: "ok"}
	access := verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead
	if s.buf, err = s.pd.AllocMR(spec.Depth*spec.Size, access); err != nil {
		return nil, err
	}
	size := spec.Size
	slot := func(i uint64) []byte { k := int(i % uint64(spec.Depth)); return s.buf.Bytes()[k*size : (k+1)*size] }
	s.size = size
	// One receive per slot: WRITE_IMM notifications, SENDs' data. The
	// client's fin (a 0-byte SEND_IMM) takes whichever is next: it comes
	// only once every message has been credited, so one is posted.
	for i := 0; i < spec.Depth; i++ {
		if err := s.postSlotRecv(&spec, uint64(i)); err != nil {
			return nil, err
		}
	}
	if spec.Test == ReadBW {
		for i := 0; i < spec.Depth; i++ {
			s.fill(slot(uint64(i)), uint64(i))
		}
	}
	ready := s.ctl.Bytes()[replyOff:]
	le.PutUint64(ready, s.buf.Addr())
	le.PutUint32(ready[8:], s.buf.RKey())
	if err := s.qp.PostSend(verbs.SendWR{ID: 1 << 40, Op: verbs.OpSend, SGL: []verbs.SGE{s.ctl.SGE(replyOff, 16)}}); err != nil {
		return nil, err
	}
	// Until the fin, and for the tests whose messages arrive here until
	// every one of them has.
	arrive := spec.Test == SendBW || spec.Test == WriteLat || spec.Test == WriteBW && spec.Verify
	credits := spec.Test == SendBW || spec.Test == WriteBW && spec.Verify
	var n, bad uint64
	fin := int64(-1)
	for fin < 0 || arrive && int64(n) < fin {
		wc, err := s.next(ctx)
		if err != nil {
			return res, fmt.Errorf("after %d messages: %w", n, err)
		}
		if wc.Op != verbs.OpRecv && wc.Op != verbs.OpRecvImm {
			continue // our own sends
		}
		if wc.Op == verbs.OpRecvImm && wc.Bytes == 0 {
			fin = int64(wc.Imm) // the client's count
			continue
		}
		i := n
		n++
		ok := true
		k := wc.ID // the slot the receive was posted for
		data := slot(k)
		// Repost first: write_lat's echo makes the client send its next
		// message at once, and a credit lets it reuse a slot; either must
		// find a receive posted. The slot's bytes are not overwritten
		// before its credit (or echo) goes out.
		if err := s.postSlotRecv(&spec, k); err != nil {
			return res, err
		}
		switch spec.Test {
		case WriteBW:
			ok = wc.Op == verbs.OpRecvImm && uint64(wc.Imm) == i && int(wc.Bytes) == size && (!spec.Verify || s.check(res, data, i))
		case SendBW:
			ok = wc.Op == verbs.OpRecv && int(wc.Bytes) == size && (!spec.Verify || s.check(res, data, i))
		case WriteLat:
			ok = wc.Op == verbs.OpRecvImm && uint64(wc.Imm) == i && (!spec.Verify || s.check(res, data, i))
			// The echo goes back from our own memory: the bytes that landed.
			if err := s.qp.PostSend(verbs.SendWR{ID: i, Op: verbs.OpWriteImm, Imm: uint32(i), SGL: []verbs.SGE{s.buf.SGE(0, size)},
				RemoteAddr: peerAddr, RKey: peerKey}); err != nil {
				return res, err
			}
		}
		if spec.Verify {
			res.Checked++
		}
		if !ok {
			bad++
			res.Errors++
		}
		if credits {
			credit := uint32(i) &^ badBit
			if !ok {
				credit |= badBit
			}
			if err := s.sendImm(credit); err != nil {
				return res, err
			}
		}
	}
	res.Messages = int64(n)
	if !arrive {
		res.Messages = fin
	}
	res.Verified = spec.Verify && bad == 0 && res.Checked == res.Messages
	reply := s.ctl.Bytes()[replyOff:]
	le.PutUint64(reply, uint64(res.Checked))
	le.PutUint64(reply[8:], bad)
	if err := s.qp.PostSend(verbs.SendWR{ID: 1 << 41, Op: verbs.OpSend, SGL: []verbs.SGE{s.ctl.SGE(replyOff, 16)}}); err != nil {
		return res, err
	}
	// The fin reply must go out before the connection closes.
	for {
		wc, err := s.next(ctx)
		if err != nil || wc.ID == 1<<41 {
			break
		}
	}
	if bad > 0 {
		res.Status = fmt.Sprintf("%d of %d messages did not check out", bad, res.Checked)
	}
	return res, nil
}

// Run connects to a server at to and runs spec.
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
	size := spec.Size
	// Depth slots to send from (write_lat: one, and one the echo lands in).
	if s.buf, err = s.pd.AllocMR((spec.Depth+1)*size, verbs.AccessLocalWrite|verbs.AccessRemoteWrite); err != nil {
		return nil, err
	}
	slot := func(i uint64) int { return int(i%uint64(spec.Depth)) * size }
	// Receives for the ready message, every credit, the fin reply, and
	// write_lat's echoes.
	for i := 0; i < spec.Depth+2; i++ {
		if err := s.recvCtl(replyOff); err != nil {
			return nil, err
		}
	}
	if err := s.qp.Connect(ctx, to); err != nil {
		return nil, err
	}
	s.key = rand.Uint64() | 1 // this connection's pattern key, told to the server
	putHello(s.ctl.Bytes()[helloOff:], &spec, s.buf.Addr()+uint64(size), s.buf.RKey(), s.key)
	if err := s.qp.PostSend(verbs.SendWR{ID: 1 << 40, Op: verbs.OpSend, SGL: []verbs.SGE{s.ctl.SGE(helloOff, 64)}}); err != nil {
		return nil, err
	}
	var raddr uint64
	var rkey uint32
	for raddr == 0 {
		wc, err := s.next(ctx)
		if err != nil {
			return nil, err
		}
		if wc.Op == verbs.OpRecv {
			r := s.ctl.Bytes()[replyOff:]
			raddr, rkey = binary.LittleEndian.Uint64(r), binary.LittleEndian.Uint32(r[8:])
			if err := s.recvCtl(replyOff); err != nil {
				return nil, err
			}
		}
	}
	res := &Result{Spec: spec, Status: "ok", Transport: s.qp.Transport().String(), MTU: dev.PathMTU()}
	credits := spec.Test == SendBW || spec.Test == WriteBW && spec.Verify
	if spec.Test != SendBW && !spec.Verify {
		for i := 0; i < spec.Depth; i++ { // a pattern, even unchecked
			s.fill(s.buf.Bytes()[slot(uint64(i)):slot(uint64(i))+size], uint64(i))
		}
	}
	var posted, done, credited uint64
	var lat []time.Duration
	// Post and completion times, from the first post, for the BW peak.
	var postAt, doneAt []sim.Time
	peak := spec.Test != WriteLat && !spec.NoPeak && spec.Count > 0 && spec.Count <= MaxPeakMessages
	if peak {
		postAt, doneAt = make([]sim.Time, 0, spec.Count), make([]sim.Time, 0, spec.Count)
	}
	var t0 time.Time
	sw, err := dev.StartTiming()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	last := start
	more := func() bool {
		if spec.Count > 0 {
			return posted < uint64(spec.Count)
		}
		return time.Since(start) < spec.Duration
	}
	for more() || done < posted || credits && credited < posted {
		// Post while the window allows: depth in flight, and for
		// checked WRITEs and SENDs a slot the server has checked.
		for more() && posted-done < uint64(spec.Depth) && (!credits || posted-credited < uint64(spec.Depth)) &&
			(spec.Test != WriteLat || posted == done) {
			off := slot(posted)
			wr := verbs.SendWR{ID: posted, SGL: []verbs.SGE{s.buf.SGE(off, size)}}
			switch spec.Test {
			case WriteBW:
				wr.Op, wr.RemoteAddr, wr.RKey = verbs.OpWrite, raddr+uint64(off), rkey
				if spec.Verify {
					wr.Op, wr.Imm = verbs.OpWriteImm, uint32(posted)
				}
			case SendBW:
				wr.Op = verbs.OpSend
			case ReadBW:
				wr.Op, wr.RemoteAddr, wr.RKey = verbs.OpRead, raddr+uint64(off), rkey
			case WriteLat:
				wr.Op, wr.Imm, wr.RemoteAddr, wr.RKey = verbs.OpWriteImm, uint32(posted), raddr, rkey
				wr.SGL[0] = s.buf.SGE(0, size)
			}
			if spec.Verify && spec.Test != ReadBW {
				b := s.buf.Bytes()[off : off+size]
				if spec.Test == WriteLat {
					b = s.buf.Bytes()[:size]
				}
				s.fill(b, posted)
			}
			if posted == 0 {
				start = time.Now()
			}
			t0 = time.Now()
			if err := s.qp.PostSend(wr); err != nil {
				if errors.Is(err, verbs.ErrQueueFull) {
					break
				}
				return res, err
			}
			if peak {
				postAt = append(postAt, sim.Time(time.Since(start)))
			}
			posted++
		}
		wc, err := s.next(ctx)
		if err != nil {
			res.Errors++
			res.Status = err.Error()
			return res, fmt.Errorf("after %d of %d messages: %w", done, posted, err)
		}
		switch {
		case spec.Test == WriteLat && wc.Op == verbs.OpRecvImm:
			lat = append(lat, time.Since(t0)/2)
			i := uint64(wc.Imm)
			if i != done || int(wc.Bytes) != size {
				return res, fmt.Errorf("%w: echo %d of %d bytes, expected %d", ErrProtocol, i, wc.Bytes, done)
			}
			if spec.Verify {
				res.Checked++
				if !s.check(res, s.buf.Bytes()[size:2*size], i) {
					res.Errors++
				}
			}
			done++
			last = time.Now()
			if err := s.recvCtl(replyOff); err != nil {
				return res, err
			}
		case wc.Op == verbs.OpRecvImm:
			// A credit; its bad bit is counted by the server, which
			// reports its total at the end.
			credited++
			if err := s.recvCtl(replyOff); err != nil {
				return res, err
			}
		case wc.Op == verbs.OpWrite || wc.Op == verbs.OpWriteImm && spec.Test != WriteLat || wc.Op == verbs.OpSend || wc.Op == verbs.OpRead:
			if wc.ID >= 1<<40 {
				continue
			}
			if spec.Test == ReadBW && spec.Verify {
				res.Checked++
				off := slot(wc.ID)
				if !s.check(res, s.buf.Bytes()[off:off+size], wc.ID%uint64(spec.Depth)) {
					res.Errors++
				}
			}
			done++
			last = time.Now()
			if peak {
				doneAt = append(doneAt, sim.Time(last.Sub(start)))
			}
		}
	}
	timing, err := sw.Stop()
	if err != nil {
		return res, err
	}
	res.Timing = &timing
	res.Messages = int64(done)
	res.Bytes = int64(done) * int64(size)
	res.Elapsed = last.Sub(start)
	if res.Elapsed > 0 && spec.Test != WriteLat {
		res.Goodput = float64(res.Bytes) * 8 / res.Elapsed.Seconds()
	}
	if len(lat) > 0 {
		res.Latency = summarize(lat)
	}
	if peak {
		res.CQMod = spec.cqMod()
		res.BWPeakGbps = workload.PeakGbps(postAt, doneAt, size, res.CQMod)
	}
	// Tell the server we are done and learn what it checked.
	if err := s.sendImm(uint32(done)); err != nil {
		return res, err
	}
	for {
		wc, err := s.next(ctx)
		if err != nil {
			return res, err
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
	st := dev.Stats()
	res.Posted, res.Doorbells, res.Waits = st.Posted, st.Doorbells, st.Waits
	if res.QP, err = s.qp.Query(); err != nil {
		return res, err
	}
	return res, nil
}

func summarize(d []time.Duration) *Latency {
	s := slices.Clone(d)
	slices.Sort(s)
	l := &Latency{N: len(s), Min: s[0], Max: s[len(s)-1], P50: s[len(s)/2],
		P99: s[min(len(s)-1, len(s)*99/100)], P999: s[min(len(s)-1, len(s)*999/1000)]}
	var sum, sq float64
	for _, x := range s {
		sum += float64(x)
	}
	mean := sum / float64(len(s))
	for _, x := range s {
		sq += (float64(x) - mean) * (float64(x) - mean)
	}
	l.Mean = time.Duration(mean)
	l.Stdev = time.Duration(math.Sqrt(sq / float64(len(s))))
	return l
}
