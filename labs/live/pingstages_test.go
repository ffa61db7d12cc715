package live

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/internal/testenv"
	"github.com/mrlab/mrlab/labs/hostns"
	"golang.org/x/sys/unix"
)

// BenchmarkPingStages is where a ping's time goes in a live lab, stage by
// stage, beside a veth pair's: one echo at a time from h0 to a host on
// another leaf of the loss-free default lab (1 Gbit/s), as
// BenchmarkKernelPath's ping, each echo stamped at
//
//	send  the client's sendto (user space)
//	tx    h0's kernel handing it to mr0 (SO_TIMESTAMPING, software TX)
//	read  the lab's read of it from h0's mr0 (the loop time of the read)
//	dlv   the event that hands it to the far host's kernel (when it ran)
//	back  the lab's read of the reply from the far host's mr0
//	ret   the event that hands the reply to h0's kernel (when it ran)
//	rx    h0's kernel receiving the reply (software RX stamp: the write)
//	recv  the client's recvmsg returning
//
// and reports each stage's median in µs (on veth only send->tx, tx->rx
// and rx->recv exist). The lab's own wire one way (propagation and
// serialization of the 38-byte echo over the path's 4 links, wire-us) is
// part of read->dlv and back->ret. Beside them: ping(8)'s median RTT in a
// process of its own over both paths (ping8-lab-us, ping8-veth-us), and
// the machine's bare thread wake-up (wake-us), the floor of rx->recv.
//
//	sudo go test ./labs/live -run '^$' -bench PingStages -benchtime 1x
func BenchmarkPingStages(b *testing.B) {
	testenv.RequireNamespaces(b)
	rec := &stageRecorder{}
	eng, err := NewLabEngine(lossFreeDefault(b), EngineConfig{MaxRate: 1e9})
	if err != nil {
		b.Fatal(err)
	}
	rec.Engine = eng
	lp := lossFreeDefault(b).Topology().Links[0].Params
	wire := 4 * (time.Duration(lp.Delay) + time.Duration(38*8/min(lp.Rate, 1e9)*1e9))
	l, err := Up(context.Background(), testLabName("ps"), rec, Options{RunDir: b.TempDir(), Logf: func(string, ...any) {}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	if err := l.pacer.Do(context.Background(), func(sim.Time) { rec.start = l.pacer.start }); err != nil {
		b.Fatal(err)
	}
	st := l.State()
	h0, _ := st.Host("h0")
	far := otherLeafHost(b, st, h0)
	ns0 := openNS(b, h0.Namespace)
	dst := netip.MustParseAddr(far.Addr)
	vc, _, vaddr := vethPair(b)
	const n = 200
	for _, warm := range []*hostns.Namespace{ns0, vc} {
		a := dst
		if warm == vc {
			a = vaddr
		}
		if _, err := ping(warm, a, 1, 3*time.Second); err != nil { // ARP, caches
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	vs, err := stampedPings(vc, vaddr, n, nil)
	if err != nil {
		b.Fatal(err)
	}
	before, _ := l.Status(context.Background())
	ls, err := stampedPings(ns0, dst, n, rec)
	if err != nil {
		b.Fatal(err)
	}
	after, _ := l.Status(context.Background())
	b.StopTimer()
	names := []string{"send-tx", "tx-read", "read-dlv", "dlv-back", "back-ret", "ret-rx", "rx-recv", "rtt"}
	med := func(s [][8]time.Duration, i int) float64 {
		x := make([]time.Duration, 0, len(s))
		for _, v := range s {
			x = append(x, v[i])
		}
		slices.Sort(x)
		return float64(x[len(x)/2]) / 1e3
	}
	var line string
	for i, name := range names {
		line += fmt.Sprintf(" %s %.1f/%.1f", name, med(ls, i), med(vs, i))
		b.ReportMetric(med(ls, i), name+"-us")
	}
	b.ReportMetric(med(vs, 7), "veth-rtt-us")
	b.ReportMetric(float64(wire)/1e3, "wire-us")
	// The same path timed by ping(8), a process of its own (the stages'
	// client shares the lab's Go runtime).
	if pv, err := pingProgram(vc, vaddr, n); err == nil {
		pl, err := pingProgram(ns0, dst, n)
		if err == nil {
			b.ReportMetric(float64(medianDur(pl))/1e3, "ping8-lab-us")
			b.ReportMetric(float64(medianDur(pv))/1e3, "ping8-veth-us")
		}
	}
	wake, err := threadWakeups(n)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(wake)/1e3, "wake-us")
	b.ReportMetric(med(vs, 2)+med(vs, 3)+med(vs, 4)+med(vs, 5), "veth-tx-rx-us")
	b.Logf("medians in µs, lab/veth (veth: tx-rx in dlv-back):%s; a thread blocked in read woken by another's write: %.1f; lab loop over the run: %d sleeps, %d spins, %v spinning, worst wake-up %v, events %d (%d late), policy %s; load %s",
		line, float64(wake)/1e3, after.Lag.Sleeps-before.Lag.Sleeps, after.Lag.Spins-before.Lag.Spins, after.Lag.SpinTime-before.Lag.SpinTime, after.Lag.WakeLatency,
		after.Lag.Events-before.Lag.Events, after.Lag.EventsLate-before.Lag.EventsLate, policyWord(after.Lag.Priority), loadAvg())
}

// pingProgram runs ping(8) in ns, n echoes 2 ms apart, and returns the
// RTTs it printed.
func pingProgram(ns *hostns.Namespace, dst netip.Addr, n int) ([]time.Duration, error) {
	var out strings.Builder
	cmd := exec.Command("ping", "-n", "-i", "0.002", "-c", strconv.Itoa(n), dst.String())
	cmd.Stdout = &out
	if err := ns.Start(cmd); err != nil {
		return nil, err
	}
	if err := cmd.Wait(); err != nil {
		return nil, fmt.Errorf("ping: %w", err)
	}
	var rtts []time.Duration
	for _, line := range strings.Split(out.String(), "\n") {
		_, after, ok := strings.Cut(line, " time=")
		if !ok {
			continue
		}
		ms, err := strconv.ParseFloat(strings.TrimSuffix(after, " ms"), 64)
		if err != nil {
			continue
		}
		rtts = append(rtts, time.Duration(ms*1e6))
	}
	if len(rtts) == 0 {
		return nil, fmt.Errorf("ping printed no RTT")
	}
	return rtts, nil
}

// threadWakeups is the median time from one thread's write to a pipe to
// the return of another thread's read blocked on it, over n wake-ups 1 ms
// apart: the wake-up a ping's client pays when its reply comes from
// another thread (the lab's), and never over a veth pair, whose echo runs
// inside the client's own sendto.
func threadWakeups(n int) (time.Duration, error) {
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC); err != nil {
		return 0, err
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	sent := make(chan time.Time, 1)
	got := make(chan time.Duration, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		var x [8]byte
		for range n {
			if _, err := unix.Read(fds[0], x[:]); err != nil {
				close(got)
				return
			}
			got <- time.Since(<-sent)
		}
	}()
	var w []time.Duration
	for range n {
		time.Sleep(time.Millisecond) // the reader is asleep in read
		sent <- time.Now()
		if _, err := unix.Write(fds[1], []byte{1}); err != nil {
			return 0, err
		}
		d, ok := <-got
		if !ok {
			return 0, fmt.Errorf("reading the pipe failed")
		}
		w = append(w, d)
	}
	slices.Sort(w)
	return w[len(w)/2], nil
}

// stageRecorder is a lab engine that stamps ICMP echoes as they enter and
// leave the fabric (loop goroutine).
type stageRecorder struct {
	Engine
	start time.Time
	// Wall times (Unix ns) of the current echo's stages (zero: not seen
	// yet), written on the loop goroutine, read on the test's.
	read, dlv, back, ret atomic.Int64
	seq                  atomic.Uint32
}

func (r *stageRecorder) Start(loop *sim.Loop, pool *packet.Pool, deliver func(int, sim.Time, []byte)) error {
	return r.Engine.Start(loop, pool, func(host int, now sim.Time, ip []byte) {
		if t, seq, ok := icmpEcho(ip); ok && uint32(seq) == r.seq.Load() {
			if t == 8 {
				r.dlv.CompareAndSwap(0, time.Now().UnixNano())
			} else {
				r.ret.CompareAndSwap(0, time.Now().UnixNano())
			}
		}
		deliver(host, now, ip)
	})
}

func (r *stageRecorder) FromKernel(host int, now sim.Time, p *packet.Buffer) {
	if t, seq, ok := icmpEcho(p.Data()); ok && uint32(seq) == r.seq.Load() {
		at := r.start.Add(time.Duration(now)).UnixNano()
		if t == 8 {
			r.read.CompareAndSwap(0, at)
		} else {
			r.back.CompareAndSwap(0, at)
		}
	}
	r.Engine.FromKernel(host, now, p)
}

// icmpEcho is an IPv4 ICMP echo's type (8 request, 0 reply) and sequence.
func icmpEcho(ip []byte) (typ uint8, seq uint16, ok bool) {
	if len(ip) < 28 || ip[9] != 1 {
		return 0, 0, false
	}
	h := int(ip[0]&15) * 4
	if len(ip) < h+8 || (ip[h] != 8 && ip[h] != 0) {
		return 0, 0, false
	}
	return ip[h], binary.BigEndian.Uint16(ip[h+6:]), true
}

// stampedPings sends echoes one at a time from ns to dst on a raw socket
// with software TX and RX timestamps, until n came back stamped, and
// returns each one's stages (BenchmarkPingStages's order; the last is the
// whole RTT). rec, if set, is the lab's recorder, armed for each echo.
func stampedPings(ns *hostns.Namespace, dst netip.Addr, n int, rec *stageRecorder) ([][8]time.Duration, error) {
	var fd int
	if err := ns.Do(func() (err error) {
		fd, err = unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_ICMP)
		return err
	}); err != nil {
		return nil, fmt.Errorf("icmp socket: %w", err)
	}
	defer unix.Close(fd)
	flags := unix.SOF_TIMESTAMPING_TX_SOFTWARE | unix.SOF_TIMESTAMPING_RX_SOFTWARE | unix.SOF_TIMESTAMPING_SOFTWARE | unix.SOF_TIMESTAMPING_OPT_TSONLY
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPING, flags); err != nil {
		return nil, fmt.Errorf("SO_TIMESTAMPING: %w", err)
	}
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 3}); err != nil {
		return nil, err
	}
	to := &unix.SockaddrInet4{Addr: dst.As4()}
	id := uint16(0x4d52)
	var out [][8]time.Duration
	buf, oob := make([]byte, 1500), make([]byte, 512)
	for seq := uint16(1); len(out) < n; seq++ {
		if int(seq) > 20*n {
			return out, fmt.Errorf("%d of %d echoes carried the kernel's timestamps", len(out), seq-1)
		}
		if rec != nil {
			rec.arm(seq)
		}
		msg := make([]byte, 18)
		msg[0] = 8
		binary.BigEndian.PutUint16(msg[4:], id)
		binary.BigEndian.PutUint16(msg[6:], seq)
		copy(msg[8:], "mrlab-ping")
		binary.BigEndian.PutUint16(msg[2:], inetChecksum(msg))
		send := time.Now()
		if err := unix.Sendto(fd, msg, 0, to); err != nil {
			return out, err
		}
		var rx, recv time.Time
		for {
			k, ok, _, _, err := unix.Recvmsg(fd, buf, oob, 0)
			if err != nil {
				return out, fmt.Errorf("echo %d: %w", seq, err)
			}
			recv = time.Now()
			if t, s, good := icmpEcho(buf[:k]); good && t == 0 && s == seq {
				rx = stampOf(oob[:ok])
				break
			}
		}
		var tx time.Time
		for range 100 {
			_, ok, _, _, err := unix.Recvmsg(fd, buf, oob, unix.MSG_ERRQUEUE|unix.MSG_DONTWAIT)
			if err == nil {
				tx = stampOf(oob[:ok])
				break
			}
			time.Sleep(10 * time.Microsecond)
		}
		if tx.IsZero() || rx.IsZero() {
			// The kernel turns software stamps on for its receive path
			// some time after the socket asks (a deferred static key):
			// the first echoes may come unstamped.
			time.Sleep(time.Millisecond)
			continue
		}
		s := [8]time.Duration{tx.Sub(send), 0, 0, rx.Sub(tx), 0, 0, recv.Sub(rx), recv.Sub(send)}
		if rec != nil {
			read, dlv, back, ret, ok := rec.stamps()
			if !ok {
				return out, fmt.Errorf("echo %d: the lab did not see it both ways", seq)
			}
			s = [8]time.Duration{tx.Sub(send), read.Sub(tx), dlv.Sub(read), back.Sub(dlv), ret.Sub(back), rx.Sub(ret), recv.Sub(rx), recv.Sub(send)}
		}
		out = append(out, s)
	}
	return out, nil
}

// arm clears the stamps for echo seq; stamps reads them once its reply
// arrived. Test goroutine.
func (r *stageRecorder) arm(seq uint16) {
	r.seq.Store(uint32(seq))
	r.read.Store(0)
	r.dlv.Store(0)
	r.back.Store(0)
	r.ret.Store(0)
}

func (r *stageRecorder) stamps() (read, dlv, back, ret time.Time, ok bool) {
	a, b, c, d := r.read.Load(), r.dlv.Load(), r.back.Load(), r.ret.Load()
	return time.Unix(0, a), time.Unix(0, b), time.Unix(0, c), time.Unix(0, d), a != 0 && b != 0 && c != 0 && d != 0
}

// stampOf is the software timestamp in a control message of
// SCM_TIMESTAMPING (zero if none).
func stampOf(oob []byte) time.Time {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return time.Time{}
	}
	for _, m := range msgs {
		if m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SCM_TIMESTAMPING && len(m.Data) >= int(unsafe.Sizeof(unix.Timespec{})) {
			ts := (*unix.Timespec)(unsafe.Pointer(&m.Data[0]))
			return time.Unix(ts.Unix())
		}
	}
	return time.Time{}
}

// inetChecksum is the Internet checksum of b.
func inetChecksum(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s > 0xffff {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}
