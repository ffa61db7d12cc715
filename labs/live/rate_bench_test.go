package live

import (
	"context"
	"encoding/binary"
	"flag"
	"net/netip"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mrlab/mrlab/labs"
)

// The lab's own packet rate: how many packets a second the live runtime
// forwards from one host's kernel to another's, with the kernels played
// by devices that cost nothing (a reader that always has a full batch of
// 1500-byte UDP packets queued, a writer that only counts), so the figure
// is the runtime's: TUN hand-offs, the loop, the fabric and the NICs. The
// b2b lab at its file's 100 Gbit/s, so no link limits the rate.
//
//	go test ./labs/live -run '^$' -bench LabPacketRate -benchtime 300000x -count 3
//
// Compare two builds (or modes) in the same run; the machine's load moves
// the absolute figure.

// writerOnly runs the benchmarks' labs with Options.WriterOnly, to
// compare with the default in one build.
var (
	writerOnly = flag.Bool("live.writer-only", false, "benchmarks: labs hand every batch for a kernel to its writer goroutine (Options.WriterOnly)")
	readerOnly = flag.Bool("live.reader-only", false, "benchmarks: labs read every kernel on a reader goroutine (Options.ReaderOnly)")
)

// genDevice is a host kernel that sends as fast as the lab reads: every
// Read returns a full batch of copies of pkt. Writes are counted.
type genDevice struct {
	pkt    []byte
	batch  int
	read   atomic.Int64
	wrote  atomic.Int64
	closed chan struct{}
	gate   chan struct{} // Read waits for it to close (the timer to start)
	idle   bool          // a receiver: Read blocks until Close
	efd    int           // PollFD: an eventfd readable from the gate's opening on, never if idle
}

// PollFD makes the device one the loop reads itself (direct.go): it
// polls readable once the gate opens (always, for a sender: a kernel
// with packets queued) and never for an idle receiver.
func (d *genDevice) PollFD() (int, error) {
	if d.efd == 0 {
		fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
		if err != nil {
			return -1, err
		}
		d.efd = fd
		if !d.idle {
			go func() {
				<-d.gate
				unix.Write(fd, []byte{1, 0, 0, 0, 0, 0, 0, 0})
			}()
		}
	}
	return d.efd, nil
}

func (d *genDevice) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	if d.idle {
		<-d.closed
		return 0, os.ErrClosed
	}
	select {
	case <-d.closed:
		return 0, os.ErrClosed
	case <-d.gate:
	}
	select {
	case <-d.closed:
		return 0, os.ErrClosed
	default:
	}
	n := min(len(bufs), d.batch)
	for i := 0; i < n; i++ {
		sizes[i] = copy(bufs[i][offset:], d.pkt)
	}
	d.read.Add(int64(n))
	return n, nil
}

func (d *genDevice) Write(bufs [][]byte, _ int) (int, error) {
	d.wrote.Add(int64(len(bufs)))
	return len(bufs), nil
}

func (d *genDevice) BatchSize() int { return d.batch }
func (d *genDevice) MTU() int       { return DefaultMTU }
func (d *genDevice) Close() error {
	select {
	case <-d.closed:
	default:
		close(d.closed)
		if d.efd > 0 {
			unix.Close(d.efd)
		}
	}
	return nil
}

// udp4 is an IPv4/UDP packet of total size n from src to dst, checksummed.
func udp4(src, dst netip.Addr, n int) []byte {
	b := make([]byte, n)
	b[0] = 0x45
	binary.BigEndian.PutUint16(b[2:], uint16(n))
	b[8] = 64
	b[9] = 17
	s, d := src.As4(), dst.As4()
	copy(b[12:], s[:])
	copy(b[16:], d[:])
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	binary.BigEndian.PutUint16(b[10:], ^uint16(sum))
	binary.BigEndian.PutUint16(b[20:], 40000) // UDP ports
	binary.BigEndian.PutUint16(b[22:], 5201)
	binary.BigEndian.PutUint16(b[24:], uint16(n-20))
	return b
}

// BenchmarkLabPacketRate forwards b.N packets h0 -> h1 through the b2b
// lab and reports packets per second of wall time (pps), the loop's worst
// lateness meanwhile and the packets lost on the way. Two regimes: 1500-
// byte packets at the file's 100 Gbit/s (the host queues hold 20 ms of
// that: 166,000 packets), and 256-byte packets with links capped at
// 10 Gbit/s (queues of 16,700 packets).
func BenchmarkLabPacketRate(b *testing.B) {
	for _, tc := range []struct {
		name    string
		maxRate float64
		size    int
	}{
		{"100g-1500B", 0, DefaultMTU},
		{"10g-256B", 10e9, 256},
	} {
		b.Run(tc.name, func(b *testing.B) { benchPacketRate(b, tc.maxRate, tc.size) })
	}
}

func benchPacketRate(b *testing.B, maxRate float64, size int) {
	lab, err := labs.Builtin("b2b")
	if err != nil {
		b.Fatal(err)
	}
	eng, err := NewLabEngine(lab, EngineConfig{MaxRate: maxRate})
	if err != nil {
		b.Fatal(err)
	}
	hs := eng.Hosts()
	const batch = 64
	src := &genDevice{pkt: udp4(hs[0].Addr, hs[1].Addr, size), batch: batch, closed: make(chan struct{}), gate: make(chan struct{})}
	dst := &genDevice{batch: batch, closed: make(chan struct{}), idle: true}
	l, err := Up(context.Background(), testLabName("r"), eng, Options{RunDir: b.TempDir(), Devices: []Device{src, dst}, WriterOnly: *writerOnly, ReaderOnly: *readerOnly})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	b.ResetTimer()
	cpu0, csw0 := cpuTime(), ctxSwitches()
	start := time.Now()
	close(src.gate)
	deadline := start.Add(2 * time.Minute)
	for dst.wrote.Load() < int64(b.N) && time.Now().Before(deadline) {
		time.Sleep(200 * time.Microsecond)
	}
	el := time.Since(start)
	cpu, csw := cpuTime()-cpu0, ctxSwitches()-csw0
	got, sent := dst.wrote.Load(), src.read.Load()
	b.StopTimer()
	src.Close()
	s, _ := l.Status(context.Background())
	if got < int64(b.N) {
		b.Fatalf("%d of %d packets forwarded in %v (%d read)", got, b.N, el, sent)
	}
	b.ReportMetric(float64(got)/el.Seconds(), "pps")
	b.ReportMetric(cpu.Seconds()/el.Seconds(), "cores")
	// CPU and context switches per packet: what the runtime costs,
	// whatever share of the machine it got.
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(max(got, 1)), "cpu-ns/pkt")
	b.ReportMetric(1000*float64(csw)/float64(max(got, 1)), "csw/kpkt")
	b.ReportMetric(float64(s.Lag.MaxLag)/1e6, "max-lag-ms")
	b.ReportMetric(100*float64(max(sent-got, 0))/float64(max(sent, 1)), "in-flight-or-lost-%")
}

// ctxSwitches is how many times the process's threads were switched off
// their CPU so far, voluntarily or not.
func ctxSwitches() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Nvcsw + ru.Nivcsw
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestLoopDoesKernelIO: a lab whose hosts' devices can be polled has the
// loop read and write them itself (no reader or writer goroutine), and
// packets cross it; with ReaderOnly and WriterOnly the goroutines do it.
func TestLoopDoesKernelIO(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts Options
		own  bool
	}{
		{"loop", Options{}, true},
		{"goroutines", Options{ReaderOnly: true, WriterOnly: true}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eng, err := NewLabEngine(mustBuiltin(t, "b2b"), EngineConfig{MaxRate: 1e9})
			if err != nil {
				t.Fatal(err)
			}
			hs := eng.Hosts()
			src := &genDevice{pkt: udp4(hs[0].Addr, hs[1].Addr, 256), batch: 8, closed: make(chan struct{}), gate: make(chan struct{})}
			dst := &genDevice{batch: 8, closed: make(chan struct{}), idle: true}
			opts := tc.opts
			opts.RunDir, opts.Devices = t.TempDir(), []Device{src, dst}
			l, err := Up(context.Background(), testLabName("io"), eng, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			for i, h := range l.hosts {
				if h.direct != tc.own || h.out.inline != tc.own {
					t.Errorf("host %d: the loop reads it %v and writes it %v, want %v", i, h.direct, h.out.inline, tc.own)
				}
			}
			close(src.gate)
			for end := time.Now().Add(20 * time.Second); dst.wrote.Load() < 1000 && time.Now().Before(end); {
				time.Sleep(10 * time.Millisecond)
			}
			src.Close()
			if n := dst.wrote.Load(); n < 1000 {
				t.Fatalf("%d packets reached h1's kernel in 20 s, want 1000", n)
			}
		})
	}
}
