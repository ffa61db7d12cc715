package live

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/internal/testenv"
)

// floodRate is BenchmarkUDPFlood's offered rate.
var floodRate = flag.Float64("flood.rate", 1.5e9, "BenchmarkUDPFlood: iperf3's offered UDP rate, bits/s")

// floodMmsg sends the flood from this process instead of iperf3.
var floodMmsg = flag.Bool("flood.mmsg", false, "BenchmarkUDPFlood: send from a goroutine of the test with sendmmsg (64 datagrams a call, as fast as h0's qdisc takes them) to a socket in h1 drained with recvmmsg, instead of iperf3: a sender the machine's load does not starve, so the loop saturates")

// floodCount turns BenchmarkUDPFlood's perf stat off (to profile the
// loop with perf record meanwhile).
var floodCount = flag.Bool("flood.syscalls", true, "BenchmarkUDPFlood: count the loop thread's system calls with perf stat")

// floodCalls are the loop thread's system calls BenchmarkUDPFlood counts:
// all, then the ones named.
var floodCalls = []string{"raw_syscalls:sys_enter", "syscalls:sys_enter_read", "syscalls:sys_enter_write", "syscalls:sys_enter_epoll_wait", "syscalls:sys_enter_epoll_pwait", "syscalls:sys_enter_futex", "syscalls:sys_enter_timerfd_settime", "syscalls:sys_enter_pread64", "syscalls:sys_enter_getrusage"}

// BenchmarkUDPFlood is the loop's CPU per forwarded datagram where it is
// saturated: iperf3 UDP (1400-byte datagrams) from h0 to h1 of b2b
// capped at 10 Gbit/s, offered above what the loop reads (-flood.rate),
// for 3 s, -kernel.reps times. Figures that the machine's load moves
// little: the loop thread's CPU per datagram it read (its getrusage),
// writes to h1's mr0 per datagram written (h1's rx_packets: UDP GSO
// coalesces a flow's datagrams of one batch), and with perf(1) installed
// the loop thread's system calls per datagram read (perf stat on its
// raw_syscalls:sys_enter); beside them the rate it read.
//
//	sudo go test ./labs/live -run '^$' -bench UDPFlood -benchtime 1x -kernel.reps 3
func BenchmarkUDPFlood(b *testing.B) {
	testenv.RequireNamespaces(b)
	testenv.RequireCommand(b, "iperf3")
	p := pairUp(b, mustBuiltin(b, "b2b"), 10e9, false)
	var tid int
	if err := p.lab.pacer.Do(context.Background(), func(sim.Time) { tid = unix.Gettid() }); err != nil {
		b.Fatal(err)
	}
	perf, _ := exec.LookPath("perf")
	if _, err := ping(p.lc, p.laddr, 1, 3*time.Second); err != nil { // ARP, caches
		b.Fatal(err)
	}
	var cpuDgram, writesDgram, callsDgram, kpps, labCPUDgram, cswDgram []float64
	b.ResetTimer()
	for i := 0; i < *kernelReps; i++ {
		before, _ := p.lab.Status(context.Background())
		var stat *exec.Cmd
		var out strings.Builder
		if perf != "" && *floodCount {
			stat = exec.Command(perf, "stat", "-x,", "-e", strings.Join(floodCalls, ","), "-t", strconv.Itoa(tid))
			stat.Stderr = &out
			if err := stat.Start(); err != nil {
				stat = nil
			}
		}
		t0, cpu0, csw0 := time.Now(), cpuTime(), ctxSwitches()
		var r iperf3Result
		var err error
		if *floodMmsg {
			r, err = mmsgFlood(p, 3*time.Second)
		} else {
			r, err = iperf3Run(b, p.lc, p.ls, p.laddr, "-u", "-b", fmt.Sprintf("%.0f", *floodRate), "-l", "1400", "-w", "4M", "-t", "3")
		}
		wall, labCPU, csw := time.Since(t0), cpuTime()-cpu0, ctxSwitches()-csw0
		calls := map[string]float64{}
		if stat != nil {
			stat.Process.Signal(unix.SIGINT)
			stat.Wait()
			for _, l := range strings.Split(out.String(), "\n") {
				if f := strings.Split(l, ","); len(f) > 2 {
					if n, err := strconv.ParseFloat(f[0], 64); err == nil {
						calls[strings.TrimPrefix(strings.TrimPrefix(f[2], "syscalls:sys_enter_"), "raw_syscalls:")] = n
					}
				}
			}
		}
		if err != nil {
			b.Fatal(err)
		}
		after, _ := p.lab.Status(context.Background())
		a, z := after.Hosts, before.Hosts
		read := float64(a[0].FromKernel - z[0].FromKernel)
		wrote := float64(a[1].ToKernel - z[1].ToKernel)
		if read == 0 || wrote == 0 || a[1].Kernel == nil || z[1].Kernel == nil {
			b.Fatalf("rep %d: %v datagrams read, %v written", i, read, wrote)
		}
		cpu := float64(after.Lag.LoopCPU-before.Lag.LoopCPU) / 1e3 / read
		writes := float64(a[1].Kernel.RxPackets-z[1].Kernel.RxPackets) / wrote
		labDgram := float64(labCPU.Nanoseconds()) / 1e3 / read
		cpuDgram, writesDgram, labCPUDgram, cswDgram = append(cpuDgram, cpu), append(writesDgram, writes), append(labCPUDgram, labDgram), append(cswDgram, float64(csw)/read)
		kpps = append(kpps, read/wall.Seconds()/1e3)
		var each strings.Builder
		if n, ok := calls["sys_enter"]; ok {
			callsDgram = append(callsDgram, n/read)
			for _, c := range floodCalls[1:] {
				c = strings.TrimPrefix(c, "syscalls:sys_enter_")
				fmt.Fprintf(&each, " %s %.3f", c, calls[c]/read)
			}
		}
		b.Logf("rep %d: %.0f datagrams read (%.0f kpps over the run's wall time), loop %.2f us CPU and %.2f system calls a datagram (%s), the lab process %.2f us CPU and %.2f context switches a datagram, %.3f writes a datagram written; iperf3 sent %.0f Mbit/s, lost %.2f%%; loop slept %.2f and watched the clock %.2f us a datagram; max lag %v; load %s",
			i, read, read/wall.Seconds()/1e3, cpu, calls["sys_enter"]/read, strings.TrimSpace(each.String()), labDgram, float64(csw)/read, writes, r.SentPerSecond/1e6, r.LostPercent, float64(after.Lag.Sleeps-before.Lag.Sleeps)/read, float64(after.Lag.SpinTime-before.Lag.SpinTime)/1e3/read, after.Lag.MaxLag, loadAvg())
	}
	b.StopTimer()
	b.ReportMetric(median(cpuDgram), "loop-cpu-us/dgram")
	b.ReportMetric(median(writesDgram), "writes/dgram")
	b.ReportMetric(median(labCPUDgram), "lab-cpu-us/dgram")
	b.ReportMetric(median(cswDgram), "lab-csw/dgram")
	if len(callsDgram) > 0 {
		b.ReportMetric(median(callsDgram), "syscalls/dgram")
	}
	b.ReportMetric(median(kpps), "read-kpps")
}

// mmsgFlood sends 1400-byte UDP datagrams from p's client to its server
// for d, 64 a system call (sendmmsg), to a socket in the server drained
// 64 a call (recvmmsg); the result counts what was sent and received.
func mmsgFlood(p *pair, d time.Duration) (iperf3Result, error) {
	var tx, rx *net.UDPConn
	if err := p.ls.Do(func() (err error) {
		rx, err = net.ListenUDP("udp4", &net.UDPAddr{IP: p.laddr.AsSlice(), Port: 5301})
		return err
	}); err != nil {
		return iperf3Result{}, err
	}
	defer rx.Close()
	rx.SetReadBuffer(4 << 20)
	if err := p.lc.Do(func() (err error) {
		tx, err = net.DialUDP("udp4", nil, &net.UDPAddr{IP: p.laddr.AsSlice(), Port: 5301})
		return err
	}); err != nil {
		return iperf3Result{}, err
	}
	defer tx.Close()
	var got atomic.Int64
	go func() {
		pc := ipv4.NewPacketConn(rx)
		ms := make([]ipv4.Message, 64)
		for i := range ms {
			ms[i].Buffers = [][]byte{make([]byte, 2048)}
		}
		for {
			n, err := pc.ReadBatch(ms, 0)
			if err != nil {
				return
			}
			got.Add(int64(n))
		}
	}()
	pc := ipv4.NewPacketConn(tx)
	ms := make([]ipv4.Message, 64)
	for i := range ms {
		ms[i].Buffers = [][]byte{make([]byte, 1400)}
	}
	sent := 0
	for end := time.Now().Add(d); time.Now().Before(end); {
		n, err := pc.WriteBatch(ms, 0)
		if err != nil {
			return iperf3Result{}, err
		}
		sent += n
	}
	time.Sleep(100 * time.Millisecond)
	r := iperf3Result{Packets: sent, Lost: sent - int(got.Load()), SentPerSecond: float64(sent) * 1400 * 8 / d.Seconds()}
	r.LostPercent = 100 * float64(r.Lost) / float64(max(sent, 1))
	return r, nil
}
