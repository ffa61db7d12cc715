package live

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/internal/testenv"
	"github.com/mrlab/mrlab/labs/hostns"
)

// TestLiveUDPAtCap is issue 26's UDP target on a small lab: iperf3 UDP at
// 80% of the 1 Gbit/s cap (1400-byte datagrams, h0 -> h1 of b2b) loses
// under 1%, counted by iperf3, when the lab keeps real time. Every drop
// is located: the sender's mr0 ring (the lab did not read it in time),
// the NICs (host queues), the fabric, the writers (to-kernel drops), the
// receiver's socket buffer. The test does not judge what it did not
// measure: it skips, saying why, when the lab fell behind the wall clock
// during the run (Timing.Lagging, the rule perf uses), when the machine
// kept iperf3 from offering 80% of the cap (its own send rate, under 90%
// of the offer), or when every datagram lost beyond 1% was dropped at the
// receiving program's socket (that program starved of CPU, not the lab).
func TestLiveUDPAtCap(t *testing.T) {
	testenv.RequireNamespaces(t)
	testenv.RequireCommand(t, "iperf3")
	l, _ := upLive(t, "b2b", "u", Options{})
	_, ns0 := hostAddr(t, l, "h0")
	h1, ns1 := hostAddr(t, l, "h1")
	dst := mustAddr(t, h1.Addr)
	ctx := context.Background()
	if _, err := ping(ns0, dst, 1, 3e9); err != nil { // ARP, caches
		t.Fatal(err)
	}
	offer := 0.8 * DefaultMaxRate
	before, err := l.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rcv0 := udpRcvbufErrors(t, ns1)
	var w *lagWatch
	if err := l.pacer.Do(ctx, func(sim.Time) { w = l.pacer.watch() }); err != nil {
		t.Fatal(err)
	}
	r, err := iperf3Run(t, ns0, ns1, dst, "-u", "-b", fmt.Sprintf("%.0f", offer), "-l", "1400", "-w", "4M", "-t", "2")
	var tm Timing
	if err := l.pacer.Do(ctx, func(sim.Time) { tm = w.stop() }); err != nil {
		t.Fatal(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	after, err := l.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rcv := udpRcvbufErrors(t, ns1) - rcv0
	where := udpDropsWhere(r, before, after, rcv) + "; " + tm.Verdict()
	t.Log(where)
	switch {
	case tm.Lagging():
		t.Skipf("this machine did not let the lab keep real time during the run, so its loss is not the lab's figure: %s", where)
	case r.SentPerSecond < 0.9*offer:
		t.Skipf("this machine kept iperf3 from offering 80%% of the cap: %s", where)
	case r.LostPercent < 1:
		return
	case uint64(r.Lost) <= rcv+uint64(r.Packets)/100:
		t.Skipf("the loss beyond 1%% is at the receiving iperf3's socket (that program starved of CPU), not in the lab: %s", where)
	}
	// The datagrams the lab did not read in time from the sender's mr0
	// (its kernel's tx_dropped) while it kept real time by its own rule:
	// on this 2-core box, about one run in four while each look read a
	// device once (the loop's pass rate capped its read rate). Then the
	// ring's loss was iperf3 catching up at 1.7-2x the line after the
	// machine delayed it (the loop reads ~1.2x the line at most); mr0 is
	// now paced to the NIC's rate (kernelShape) and such bursts wait in
	// the qdisc (drops there are counted). Not yet measured on a quiet
	// box at 800 Mbit/s: at load 13-20 iperf3 offered 68-210 Mbit/s.
	testenv.KnownMiss(t, "labs/live", "#26", "UDP at 80%% of the cap lost %.2f%% (want under 1%%) while the lab kept real time: %s", r.LostPercent, where)
}

// udpDropsWhere says where a UDP run's datagrams were dropped: the
// sender's mr0 qdisc (it sent faster than its NIC's rate for longer than
// the shaper holds: kernelShape), its ring (its kernel's tx_dropped: the
// lab did not read it in time), the NICs, the fabric's links, the writers (to-kernel drops) and
// the receiver's socket buffer (rcv, RcvbufErrors over the run).
func udpDropsWhere(r iperf3Result, before, after Status, rcv uint64) string {
	var ring, qdisc, nic, writer, fabric uint64
	for i := range after.Hosts {
		writer += after.Hosts[i].ToKernelDrops - before.Hosts[i].ToKernelDrops
		if k, k0 := after.Hosts[i].Kernel, before.Hosts[i].Kernel; k != nil && k0 != nil {
			ring += k.TxDropped - k0.TxDropped
			qdisc += k.QdiscDropped - k0.QdiscDropped
		}
	}
	for name, c := range after.Engine.NICs {
		nic += c["drops"] - before.Engine.NICs[name]["drops"]
	}
	for i, k := range after.Engine.Links {
		if i < len(before.Engine.Links) {
			fabric += k.Drops - before.Engine.Links[i].Drops
		}
	}
	return fmt.Sprintf("sent %.0f Mbit/s, %d of %d datagrams lost (%.2f%%); drops: mr0 qdiscs %d, mr0 rings %d, NICs %d, fabric %d, writers %d, receiver's socket %d",
		r.SentPerSecond/1e6, r.Lost, r.Packets, r.LostPercent, qdisc, ring, nic, fabric, writer, rcv)
}

// udpRcvbufErrors is ns's count of UDP datagrams dropped at a full socket
// receive buffer (/proc/net/snmp's Udp RcvbufErrors).
func udpRcvbufErrors(t testing.TB, ns *hostns.Namespace) uint64 {
	return snmpCounter(t, ns, "Udp", "RcvbufErrors")
}

// snmpCounter is ns's counter name of protocol proto (Udp, Tcp) in
// /proc/net/snmp, read by a process started in ns: it sees ns's /proc/net.
func snmpCounter(t testing.TB, ns *hostns.Namespace, proto, name string) uint64 {
	t.Helper()
	var out strings.Builder
	cmd := exec.Command("cat", "/proc/net/snmp")
	cmd.Stdout = &out
	if err := ns.Start(cmd); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("reading /proc/net/snmp in %s: %v", ns.Name(), err)
	}
	var names []string
	for _, line := range strings.Split(out.String(), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != proto+":" {
			continue
		}
		if names == nil {
			names = f
			continue
		}
		for i, n := range names {
			if n == name && i < len(f) {
				v, err := strconv.ParseUint(f[i], 10, 64)
				if err != nil {
					t.Fatalf("/proc/net/snmp in %s: %v", ns.Name(), err)
				}
				return v
			}
		}
	}
	t.Fatalf("no %s %s in %s's /proc/net/snmp", proto, name, ns.Name())
	return 0
}
