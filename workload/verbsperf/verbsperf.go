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
	"runtime"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mrlab/mrlab/verbs"
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
	// Events waits for completions in the kernel instead of polling
	// (where the side does not sleep its window's time: pacer.go).
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
	// Sleeps counts the side's sleeps while its window was in flight
	// (pacer.go), Slept their wall time and Asked the time they asked
	// for (the rest is how late the side woke); Looks its polls of an
	// empty CQ that spun instead.
	Sleeps uint64        `json:"sleeps"`
	Slept  time.Duration `json:"slept_ns"`
	Asked  time.Duration `json:"asked_ns"`
	Looks  uint64        `json:"looks"`
	// Timing says whether the lab kept real time during the measurement
	// (the client's; nil at the server).
	Timing *verbs.Timing `json:"timing,omitempty"`
	// CPU is this side's process CPU time (user and system, every
	// thread) over the measurement: the client's from its first post to
	// its last completion, the server's from the hello to the fin. Per
	// byte moved it hardly depends on the machine's load (CPUPerGB).
	CPU time.Duration `json:"cpu_ns,omitempty"`
	// QP is the client connection's counters (retransmissions, ECN).
	QP verbs.QPStats `json:"qp"`
}

// noteWaits records how the side waited for completions.
func (r *Result) noteWaits(s *side) {
	r.Looks = s.looks
	if s.pace != nil {
		r.Sleeps, r.Slept, r.Asked = uint64(s.pace.Sleeps), s.pace.Slept, s.pace.Asked
	}
}

// CPUPerGB is the side's CPU time per 10^9 bytes moved (0 when nothing
// moved or the kernel did not say).
func (r *Result) CPUPerGB() time.Duration {
	if r.Bytes <= 0 || r.CPU <= 0 {
		return 0
	}
	return time.Duration(float64(r.CPU) * 1e9 / float64(r.Bytes))
}

// processCPU is this process's CPU time so far (user and system, every
// thread), or -1 when the kernel does not say.
func processCPU() time.Duration {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) != nil {
		return -1
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cpuSince is the CPU time since start (a processCPU reading), or 0 when
// unknown.
func cpuSince(start time.Duration) time.Duration {
	if end := processCPU(); start >= 0 && end >= start {
		return end - start
	}
	return 0
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
	// pat is the key's pattern table (pattern.go), made on first use.
	pat *pattern
	// pace, once set, lets a polling side sleep while its window is in
	// flight (pacer.go); looks counts polls of an empty CQ that spun.
	pace  *pacer
	looks uint64
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
		// A paced side sleeps while its window is in flight; where the
		// pacer would spin, an events side (perftest's -e) waits in the
		// kernel instead.
		d := time.Duration(0)
		if s.pace != nil {
			d = s.pace.sleepFor(time.Now())
		}
		switch {
		case d > 0:
			s.pace.sleep(ctx, d)
		case d == block || s.ev:
			if err := s.cq.Wait(ctx); err != nil {
				return verbs.WC{}, err
			}
		default:
			s.looks++
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
