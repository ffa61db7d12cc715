package live

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/mrlab/mrlab/internal/testenv"
	"github.com/mrlab/mrlab/labs"
	"github.com/mrlab/mrlab/labs/hostns"
	"github.com/mrlab/mrlab/observe/telemetry"
)

// The namespace integration tests: they need root and /dev/net/tun
// (testenv.RequireNamespaces). Every lab gets a name unique to the test process and a
// temporary run directory, and t.Cleanup removes what it created by exact
// name even when a test fails.

// testLabName returns a lab name unique to this process (namespaces are
// mrl-<lab>-<host>).
func testLabName(tag string) string { return fmt.Sprintf("t%d%s", os.Getpid()%100000, tag) }

// upLive brings a built-in lab up in real namespaces under a unique name.
func upLive(t *testing.T, builtin, tag string, opts Options) (*Lab, *labs.Lab) {
	t.Helper()
	lab := loadTestLab(t, builtin)
	name := testLabName(tag)
	eng, err := NewLabEngine(lab, EngineConfig{MaxRate: DefaultMaxRate, Name: name})
	if err != nil {
		t.Fatal(err)
	}
	if opts.RunDir == "" {
		opts.RunDir = t.TempDir()
	}
	opts.Logf = t.Logf
	l, err := Up(context.Background(), name, eng, opts)
	if err != nil {
		t.Fatal(err)
	}
	st := l.State()
	t.Cleanup(func() {
		l.Close()
		// Belt and braces: whatever the lab recorded is gone.
		for _, ns := range st.Namespaces {
			if hostns.Exists(ns) {
				t.Errorf("namespace %s left behind; deleting it", ns)
				hostns.Delete(ns)
			}
		}
	})
	return l, lab
}

func hostAddr(t *testing.T, l *Lab, name string) (StateHost, *hostns.Namespace) {
	t.Helper()
	st := l.State()
	h, ok := st.Host(name)
	if !ok {
		t.Fatalf("no host %s", name)
	}
	return h, openNS(t, h.Namespace)
}

// TestLiveLab is the end-to-end check on the default lab: ping and
// TCP between hosts on different leaves, faults mid-transfer, bad requests
// refused with the lab untouched, and a teardown that leaves the root
// namespace exactly as it was.
func TestLiveLab(t *testing.T) {
	testenv.RequireNamespaces(t)
	before, err := hostns.TakeSnapshot(nil)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	l, _ := upLive(t, "leafspine", "a", Options{RunDir: dir})
	st := l.State()
	if len(st.Namespaces) != len(st.Hosts) || len(st.Hosts) < 4 {
		t.Fatalf("%d namespaces for %d hosts: %v", len(st.Namespaces), len(st.Hosts), st.Namespaces)
	}
	// Another tool's namespace comes and goes while the lab is up.
	delIPNetns := ipNetnsBetween(t)
	h0, ns0 := hostAddr(t, l, "h0")
	h4, ns4 := hostAddr(t, l, otherLeafHost(t, st, h0).Name)
	dst := mustAddr(t, h4.Addr)
	t.Logf("h0 %s -> %s %s", h0.Addr, h4.Name, h4.Addr)

	t.Run("inside", func(t *testing.T) {
		snap, err := hostns.TakeSnapshot(ns0)
		if err != nil {
			t.Fatal(err)
		}
		all := strings.Join(snap.Routes, "\n")
		if !strings.Contains(all, "dst=198.18.0.0/15") || strings.Contains(all, "table=254 dst=<nil>") {
			t.Errorf("routes in h0:\n%s", all)
		}
		for _, a := range snap.Addrs {
			if strings.Contains(a, ":") && !strings.HasPrefix(a, "lo ") {
				t.Errorf("IPv6 address in a lab namespace: %s", a)
			}
		}
	})

	t.Run("ping", func(t *testing.T) {
		rtts, err := ping(ns0, dst, 5, 3*time.Second)
		if err != nil {
			t.Fatalf("ping h0 -> h4 (%v): %v", dst, err)
		}
		t.Logf("ping h0 -> h4: %v", rtts)
	})

	t.Run("capture", func(t *testing.T) {
		// A pcapng stream of h0's port traffic while h0 pings.
		c := NewClient(l.Name(), st.Socket)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		rc, err := c.Capture(ctx, "h0", "", 4)
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		if _, err := c.Capture(ctx, "nowhere", "", 1); err == nil {
			t.Error("capture of an unknown point accepted")
		}
		if _, err := ping(ns0, dst, 2, 3*time.Second); err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(rc)
		if err != nil {
			t.Fatal(err)
		}
		// Section header block, then blocks; 4 ICMP packets of 84 bytes.
		if len(data) < 4*84 || !bytes.Equal(data[:4], []byte{0x0a, 0x0d, 0x0d, 0x0a}) {
			t.Fatalf("capture: %d bytes, starting % x", len(data), data[:min(8, len(data))])
		}
	})

	t.Run("tcp", func(t *testing.T) {
		r, err := tcpTransfer(ns0, ns4, dst, 16<<20, 60*time.Second, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !r.OK {
			t.Fatalf("TCP transfer corrupted or short: %+v", r)
		}
		t.Logf("TCP h0 -> h4: %d bytes in %v = %.0f Mbit/s", r.Bytes, r.Elapsed, r.Mbps())
	})

	t.Run("iperf3", func(t *testing.T) {
		// Kernel TCP at full speed loses nothing on its own host's side:
		// the NIC's host queue, mr0's ring and the writer's queue hold a
		// TCP window and a busy machine's pauses (they used to drop 5% of
		// a TCP flow, which then ran at 0.3-0.4 of the cap). The margin
		// (1%) leaves room for TCP filling the host queue now and then.
		ctx := context.Background()
		before, err := l.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		bps, err := iperf3(t, ns0, ns4, dst, "-t", "2")
		if err != nil {
			t.Fatal(err)
		}
		after, err := l.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		sent := after.Hosts[0].FromKernel - before.Hosts[0].FromKernel
		local := after.Engine.NICs["h0"]["drops_host-queue-full"] - before.Engine.NICs["h0"]["drops_host-queue-full"]
		var ring, writer uint64
		for i := range after.Hosts {
			writer += after.Hosts[i].ToKernelDrops - before.Hosts[i].ToKernelDrops
			if k, k0 := after.Hosts[i].Kernel, before.Hosts[i].Kernel; k != nil && k0 != nil {
				ring += k.TxDropped - k0.TxDropped
			}
		}
		t.Logf("iperf3 TCP h0 -> h4: %.0f Mbit/s; %d packets from h0's kernel; local drops: host queue %d, mr0 rings %d, writers %d", bps/1e6, sent, local, ring, writer)
		if drops := local + ring + writer; drops*100 > sent {
			t.Errorf("%d of %d packets dropped on the hosts' side of the lab (want under 1%%)", drops, sent)
		}
	})

	t.Run("faults-mid-transfer", func(t *testing.T) {
		// A spine link, then a whole plane, fail while TCP runs; the
		// NIC steers host traffic to ports that are up and TCP recovers
		// whatever was black-holed before detection.
		ctx := context.Background()
		r, err := tcpTransfer(ns0, ns4, dst, 8<<20, 60*time.Second, func() {
			time.Sleep(100 * time.Millisecond)
			for _, f := range []FaultRequest{
				{Target: "link", Name: "p0-leaf0-spine0", Action: "down"},
				{Target: "plane", Name: "1", Action: "down"},
			} {
				if err := l.Fault(ctx, f); err != nil {
					t.Errorf("fault %+v: %v", f, err)
				}
				time.Sleep(200 * time.Millisecond)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		if !r.OK {
			t.Fatalf("TCP transfer across faults corrupted or short: %+v", r)
		}
		s, err := l.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		down := map[string]bool{}
		for _, k := range s.Engine.Links {
			if !k.Up {
				down[k.Name] = true
			}
		}
		if !down["p0-leaf0-spine0"] || !down["h0-p1"] {
			t.Errorf("status after faults: down links %v, want p0-leaf0-spine0 and plane 1's", down)
		}
		for _, f := range []FaultRequest{{Target: "link", Name: "p0-leaf0-spine0", Action: "up"}, {Target: "plane", Name: "1", Action: "up"}} {
			if err := l.Fault(ctx, f); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := ping(ns0, dst, 2, 3*time.Second); err != nil {
			t.Errorf("ping after restoring: %v", err)
		}
	})

	t.Run("metaroce-write-bw-through-faults", func(t *testing.T) {
		// A MetaRoCE write_bw between hosts on different leaves; a spine
		// link and then a whole plane go down mid-run. The run must finish
		// without an error and with every byte verified.
		ctx := context.Background()
		type out struct {
			r   PerfResult
			err error
		}
		ch := make(chan out, 1)
		go func() {
			r, err := l.Perf(ctx, PerfRequest{From: "h0", To: h4.Name, Op: "write", Transport: "metaroce", Size: 64 << 10, Duration: 3 * time.Second, Verify: true})
			ch <- out{r, err}
		}()
		faults := []FaultRequest{
			{Target: "link", Name: "p0-leaf0-spine0", Action: "down"},
			{Target: "plane", Name: "1", Action: "down"},
		}
		var res out
	wait:
		for i := 0; ; i++ {
			select {
			case res = <-ch:
				break wait
			case <-time.After(700 * time.Millisecond):
				if i < len(faults) {
					if err := l.Fault(ctx, faults[i]); err != nil {
						t.Errorf("fault %+v: %v", faults[i], err)
					}
				}
			}
		}
		for _, f := range []FaultRequest{{Target: "link", Name: "p0-leaf0-spine0", Action: "up"}, {Target: "plane", Name: "1", Action: "up"}} {
			if err := l.Fault(ctx, f); err != nil {
				t.Fatal(err)
			}
		}
		if res.err != nil {
			t.Fatal(res.err)
		}
		r := res.r
		t.Logf("MetaRoCE write_bw h0 -> %s through faults: %d bytes in %v = %.3f Gbit/s, counters %v", h4.Name, r.Bytes, r.Elapsed, r.Goodput/1e9, r.Counters)
		if r.Errors != 0 || !statusOK(r) || !r.Verified || r.Bytes == 0 {
			t.Errorf("MetaRoCE run through faults: status %q, %d errors, verified %v, %d bytes", r.Status, r.Errors, r.Verified, r.Bytes)
		}
	})

	t.Run("strays-during-perf", func(t *testing.T) {
		// While h0 writes to h4, h1 sends h4 a MetaRoCE connection
		// request from a UDP socket and a packet posing as h0 from a raw
		// socket. The request is held half-open and counted (it never
		// reaches the run's listener: no handshake completes), the forgery
		// dropped at h1's NIC and counted, and the run completes with its
		// data verified.
		ctx := context.Background()
		h1, ns1 := hostAddr(t, l, "h1")
		before, err := l.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		type out struct {
			r   PerfResult
			err error
		}
		ch := make(chan out, 1)
		go func() {
			r, err := l.Perf(ctx, PerfRequest{From: "h0", To: h4.Name, Op: "write", Transport: "metaroce", Size: 64 << 10, Duration: 1500 * time.Millisecond, Verify: true})
			ch <- out{r, err}
		}()
		time.Sleep(500 * time.Millisecond)
		if err := sendUnsolicitedSyn(ns1, dst); err != nil {
			t.Fatal(err)
		}
		if err := sendSpoofed(ns1, mustAddr(t, h0.Addr), dst); err != nil {
			t.Fatal(err)
		}
		res := <-ch
		if res.err != nil {
			t.Fatal(res.err)
		}
		r := res.r
		after, err := l.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		delta := func(host, k string) uint64 { return after.Engine.NICs[host][k] - before.Engine.NICs[host][k] }
		t.Logf("run: %s, verified %v, counters %v; %s spoofed drops +%d, %s half-open +%d", r.Status, r.Verified, r.Counters,
			h1.Name, delta(h1.Name, "drops_spoofed"), h4.Name, delta(h4.Name, "half_open_opened"))
		if !statusOK(r) || !r.Verified || r.Errors != 0 {
			t.Errorf("run with strays: status %q, verified %v, %d errors", r.Status, r.Verified, r.Errors)
		}
		// A SYN alone is held half-open by the NIC and never reaches the
		// run's listener (its SYN_ACK goes to h1's NIC, not the socket).
		src := "src:" + h1.Addr + ":"
		if r.Counters["refused_connections"] != 0 || delta(h4.Name, src+"requests") != 1 || delta(h4.Name, src+"established") != 0 {
			t.Errorf("unsolicited request: run refused %d (want 0: it never sees one), %s's NIC counted %d requests from %s, %d established (want 1, 0)",
				r.Counters["refused_connections"], h4.Name, delta(h4.Name, src+"requests"), h1.Addr, delta(h4.Name, src+"established"))
		}
		if delta(h1.Name, "drops_spoofed") == 0 {
			t.Errorf("spoofed packet not dropped at %s's NIC: %v", h1.Name, after.Engine.NICs[h1.Name])
		}
		// The same counters in Prometheus, with the kernel's own of mr0.
		m := scrape(t, l.State().Metrics)
		for _, series := range []string{
			fmt.Sprintf(`mrlab_nic_drops_total{host="%s",lab="%s",reason="spoofed"}`, h1.Name, l.Name()),
			fmt.Sprintf(`mrlab_nic_half_open_opened_total{host="%s",lab="%s"}`, h4.Name, l.Name()),
			fmt.Sprintf(`mrlab_nic_source{counter="requests",host="%s",lab="%s",source="%s"}`, h4.Name, l.Name(), h1.Addr),
		} {
			if metricValue(m, series) < 1 {
				t.Errorf("/metrics: %s = %v, want >= 1", series, metricValue(m, series))
			}
		}
		if v := metricValue(m, fmt.Sprintf(`mrlab_host_mr0_tx_packets_total{host="h0",lab="%s"}`, l.Name())); v <= 0 {
			t.Errorf("/metrics: h0's mr0 tx packets %v", v)
		}
	})

	t.Run("observability", func(t *testing.T) {
		// A lossy MetaRoCE run watched three ways: the protocol trace
		// streams its loss reactions and the fabric's drops, /telemetry
		// has its connection while it runs, and the Prometheus endpoint
		// at the recorded loopback address has mrlab metrics.
		checkObservability(t, l, "h0", h4.Name)
	})

	t.Run("bad-input", func(t *testing.T) {
		ctx := context.Background()
		// A second up of the same lab.
		eng, _ := NewLabEngine(loadTestLab(t, "leafspine"), EngineConfig{})
		if _, err := Up(ctx, l.Name(), eng, Options{RunDir: dir}); !errors.Is(err, ErrRunning) {
			t.Errorf("second up: %v, want ErrRunning", err)
		}
		// Unknown link, switch, plane; bad impairment.
		for _, f := range []FaultRequest{
			{Target: "link", Name: "p0-leaf9-spine9", Action: "down"},
			{Target: "switch", Name: "nope", Action: "down"},
			{Target: "plane", Name: "7", Action: "down"},
			{Target: "link", Name: "h0-p0", Action: "impair", Impair: []string{"loss", "banana"}},
			{Target: "link", Name: "h0-p0", Action: "impair", Impair: []string{""}},
			{Target: "link", Name: "h0-p0", Action: "explode"},
		} {
			c := NewClient(l.Name(), l.State().Socket)
			if err := c.Fault(ctx, f); err == nil {
				t.Errorf("fault %+v accepted", f)
			} else {
				t.Logf("fault %+v: %v", f, err)
			}
		}
		// exec on an unknown host.
		if err := Exec(dir, l.Name(), "h99", exec.Command("true")); err == nil || !strings.Contains(err.Error(), `no host "h99"`) {
			t.Errorf("exec on unknown host: %v", err)
		}
		// The lab still works: one of three echoes comes back. One echo
		// was lost once in CI with the lab 35-51 ms behind under load
		// (cause not found; the drop counters were not logged), so the
		// lab's drops are logged when an echo is lost.
		var perr error
		for try := 0; try < 3; try++ {
			if _, perr = ping(ns0, dst, 1, 3*time.Second); perr == nil {
				break
			}
			st, _ := l.Status(ctx)
			t.Logf("ping after bad requests, try %d: %v; lab counters %+v", try+1, perr, st.Engine.Counters)
		}
		if perr != nil {
			t.Errorf("ping after bad requests: %v", perr)
		}
	})

	t.Run("exec", func(t *testing.T) {
		testenv.RequireCommand(t, "ip")
		cmd := exec.Command("ip", "-o", "-4", "addr", "show", "dev", ifaceName)
		var out strings.Builder
		cmd.Stdout = &out
		if err := Exec(dir, l.Name(), h4.Name, cmd); err != nil {
			t.Fatal(err)
		}
		if err := cmd.Wait(); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), h4.Addr+"/32") {
			t.Errorf("ip addr in h4: %q, want %s/32", out.String(), h4.Addr)
		}
	})

	s, err := l.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("lag: %+v", s.Lag)

	delIPNetns()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for _, ns := range st.Namespaces {
		if hostns.Exists(ns) {
			t.Errorf("namespace %s left after down", ns)
		}
	}
	if _, err := ReadState(dir, l.Name()); !errors.Is(err, ErrNotRunning) {
		t.Errorf("state after down: %v", err)
	}
	after, err := hostns.TakeSnapshot(nil)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(before, after); d != "" {
		t.Errorf("root namespace changed (-before +after):\n%s", d)
	}
}

// lossReaction matches a trace line of a MetaRoCE sender reacting to loss
// (host filter h0): "t=1.2ms h0->h4 conn 1 path 3: SACK hole psn 18, retransmit".
var lossReaction = regexp.MustCompile(`^t=\S+ h0->h\d+ conn \d+ path \d+:? .*(retransmit|tail-loss probe|RTO|SACK hole)`)

// checkObservability runs a lossy MetaRoCE write_bw from src to dst on a
// running lab and checks what watches it: GET /trace (filtered to src)
// streams loss reactions and fabric drops during the run, GET /telemetry
// has the connection while it runs, and the Prometheus endpoint recorded
// in the state serves mrlab metrics with the traffic counted. Shared by the
// namespace test and the device test.
func checkObservability(t *testing.T, l *Lab, src, dst string) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st := l.State()
	ap, err := netip.ParseAddrPort(st.Metrics)
	if err != nil || !ap.Addr().IsLoopback() || ap.Port() == 0 {
		t.Fatalf("state records metrics address %q (%v), want loopback with a port", st.Metrics, err)
	}
	if s, err := l.Status(ctx); err != nil || s.Metrics != st.Metrics {
		t.Errorf("status metrics %q (%v), want %q", s.Metrics, err, st.Metrics)
	}
	c := NewClient(l.Name(), st.Socket)
	if _, err := c.Trace(ctx, "path=banana", ""); err == nil {
		t.Error("trace with a bad filter accepted")
	}

	// 2% loss both ways on src's plane-0 link: every path crossing it
	// loses packets, the run still completes.
	uplink := src + "-p0"
	if err := l.Fault(ctx, FaultRequest{Target: "link", Name: uplink, Action: "impair", Impair: []string{"loss", "2%"}}); err != nil {
		t.Fatal(err)
	}
	defer l.Fault(context.Background(), FaultRequest{Target: "link", Name: uplink, Action: "impair", Impair: []string{"none"}})

	trCtx, trStop := context.WithCancel(ctx)
	defer trStop()
	rc, err := c.Trace(trCtx, "host="+src, "drops")
	if err != nil {
		t.Fatal(err)
	}
	traced := make(chan []string, 1)
	go func() {
		defer rc.Close()
		var lines []string
		sc := bufio.NewScanner(rc)
		for sc.Scan() && len(lines) < 200000 {
			lines = append(lines, sc.Text())
		}
		traced <- lines
	}()

	before := scrape(t, st.Metrics)
	type out struct {
		r   PerfResult
		err error
	}
	ran := make(chan out, 1)
	go func() {
		r, err := l.Perf(ctx, PerfRequest{From: src, To: dst, Op: "write", Transport: "metaroce", Size: 64 << 10, Duration: 1500 * time.Millisecond, Verify: true})
		ran <- out{r, err}
	}()

	// While it runs, /telemetry and /metrics show the connection: the
	// sender's end sending, the receiver's placing bytes (MetaRoCE's
	// delivery counter is the receiver's).
	var sender, receiver *telemetry.Sample
	var during string
	for sender == nil || receiver == nil {
		select {
		case res := <-ran:
			t.Fatalf("the run ended before telemetry showed its connection (sender %v, receiver %v): %+v %v", sender != nil, receiver != nil, res.r, res.err)
		case <-time.After(50 * time.Millisecond):
		}
		snap, err := c.Telemetry(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for i := range snap.Samples {
			x := &snap.Samples[i]
			switch {
			case x.Kind != telemetry.KindConn || x.Transport != "metaroce":
			case x.Host == src && x.Peer == dst && x.SendRate > 0:
				sender = x
			case x.Host == dst && x.Peer == src && x.BytesAcked > 0 && receiver == nil:
				// Pin the first receiving connection seen with the
				// scrape taken right after it: a later snapshot may
				// show another connection (a new one the scrape
				// predates), whose series that scrape cannot hold.
				during = scrape(t, st.Metrics)
				receiver = x
			}
		}
	}
	t.Logf("telemetry: %s->%s conn %d sending at %.3g bit/s, cwnd %d, srtt %v, %d retransmits; %s placed %d bytes",
		sender.Host, sender.Peer, sender.Conn, sender.SendRate, sender.Cwnd, sender.SRTT, sender.Retransmits, dst, receiver.BytesAcked)
	want := fmt.Sprintf(`mrlab_conn_acked_bytes_total{conn="%d",host="%s",lab="%s",peer="%s",transport="metaroce"}`, receiver.Conn, dst, l.Name(), src)
	// /metrics may serve a snapshot taken a moment before the one
	// /telemetry showed: scrape again while the run goes on (bounded).
	v := metricValue(during, want)
	for i := 0; i < 20 && v <= 0 && len(ran) == 0; i++ {
		time.Sleep(50 * time.Millisecond)
		v = metricValue(scrape(t, st.Metrics), want)
	}
	if v <= 0 {
		t.Errorf("/metrics during the run: %s = %v, want > 0", want, v)
	}

	res := <-ran
	if res.err != nil {
		t.Fatal(res.err)
	}
	r := res.r
	t.Logf("MetaRoCE write_bw %s -> %s with 2%% loss on %s: %.3f Gbit/s, counters %v", src, dst, uplink, r.Goodput/1e9, r.Counters)
	if !statusOK(r) || !r.Verified || r.Counters["retransmits"] == 0 {
		t.Errorf("lossy run: status %q, verified %v, counters %v (want ok, verified, retransmits)", r.Status, r.Verified, r.Counters)
	}

	// After the run: link counters in Prometheus text, from a sample
	// taken after the run ended, counting at least the run's bytes on
	// src's two uplinks and drops on the lossy one.
	s, err := l.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var after string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		after = scrape(t, st.Metrics)
		if metricValue(after, `mrlab_lab_time_seconds{lab="`+l.Name()+`"}`) >= s.VirtualTime.Seconds() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/metrics: lab time %v s, not past the run's end at %v", metricValue(after, `mrlab_lab_time_seconds{lab="`+l.Name()+`"}`), s.VirtualTime)
		}
	}
	for _, want := range []string{"# TYPE mrlab_link_transmit_bytes_total counter", "# TYPE mrlab_lab_time_seconds gauge", "mrlab_link_drops_total{"} {
		if !strings.Contains(after, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	delta := func(series string) float64 { return metricValue(after, series) - metricValue(before, series) }
	sent := delta(fmt.Sprintf(`mrlab_link_transmit_bytes_total{direction="AtoB",lab="%s",link="%s-p0"}`, l.Name(), src)) +
		delta(fmt.Sprintf(`mrlab_link_transmit_bytes_total{direction="AtoB",lab="%s",link="%s-p1"}`, l.Name(), src))
	if sent < float64(r.Bytes) {
		t.Errorf("/metrics: %s's uplinks sent %v bytes during the run, which moved %d", src, sent, r.Bytes)
	}
	if d := delta(fmt.Sprintf(`mrlab_link_drops_total{direction="AtoB",lab="%s",link="%s",reason="fcs-error"}`, l.Name(), uplink)); d <= 0 {
		t.Errorf("/metrics: %v fcs-error drops on %s:AtoB during the run under 2%% loss", d, uplink)
	}

	trStop()
	lines := <-traced
	var reactions, drops int
	for _, ln := range lines {
		switch {
		case strings.HasPrefix(ln, "#"):
		case !strings.Contains(ln, src):
			t.Errorf("trace filter host=%s let through %q", src, ln)
		case lossReaction.MatchString(ln):
			reactions++
		case strings.Contains(ln, "fabric: drop (fcs-error) at "+uplink):
			drops++
		}
	}
	t.Logf("trace: %d lines, %d loss reactions, %d fabric drops", len(lines), reactions, drops)
	if reactions == 0 || drops == 0 {
		t.Errorf("trace of a lossy run: %d loss reactions, %d drops in %d lines; first lines:\n%s",
			reactions, drops, len(lines), strings.Join(lines[:min(20, len(lines))], "\n"))
	}
}

// statusOK reports whether a perf run completed without error: "ok", or
// (on a machine too busy for the lab to keep real time, which these tests
// of function do not judge) the lagging verdict and nothing else.
func statusOK(r PerfResult) bool {
	return r.Status == "ok" || (r.Timing.Lagging() && r.Status == r.Timing.Verdict())
}

// scrape GETs the Prometheus endpoint and checks its content type.
func scrape(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("GET /metrics: %s, Content-Type %q", resp.Status, resp.Header.Get("Content-Type"))
	}
	return string(body)
}

// metricValue reads the value of the series written exactly as series in
// Prometheus text (-1 if absent).
func metricValue(text, series string) float64 {
	for _, ln := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(ln, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err == nil {
				return f
			}
		}
	}
	return -1
}

// TestStaleLabCleanup kills a lab process with SIGKILL (no teardown) and
// checks `down` removes exactly what it recorded.
func TestStaleLabCleanup(t *testing.T) {
	testenv.RequireNamespaces(t)
	if os.Getenv("MRLAB_LIVE_HELPER") == "1" {
		t.Skip("helper mode")
	}
	dir := t.TempDir()
	name := testLabName("s")
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperLab$", "-test.v")
	cmd.Env = append(os.Environ(), "MRLAB_LIVE_HELPER=1", "MRLAB_HELPER_DIR="+dir, "MRLAB_HELPER_NAME="+name)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var st *State
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
		if st != nil {
			for _, ns := range st.Namespaces {
				hostns.Delete(ns)
			}
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		s, err := ReadState(dir, name)
		if err == nil {
			if _, err := NewClient(name, s.Socket).Status(context.Background()); err == nil {
				st = s
				break
			}
		}
		select {
		case <-exited:
			t.Fatalf("helper lab exited: %s", out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("helper lab not up: %s", out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-exited
	for _, ns := range st.Namespaces {
		if !hostns.Exists(ns) {
			t.Fatalf("namespace %s vanished with the process: nothing to test", ns)
		}
	}
	// A new up of the same lab cleans the stale one itself; here down does.
	if err := Down(context.Background(), dir, name, nil); err != nil {
		t.Fatal(err)
	}
	for _, ns := range st.Namespaces {
		if hostns.Exists(ns) {
			t.Errorf("namespace %s left after down of a dead lab", ns)
		}
	}
	if _, err := os.Stat(st.Socket); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket left: %v", err)
	}
}

// TestHelperLab is the lab process TestStaleLabCleanup kills.
func TestHelperLab(t *testing.T) {
	if os.Getenv("MRLAB_LIVE_HELPER") != "1" {
		t.Skip("only run by TestStaleLabCleanup")
	}
	lab := loadTestLab(t, "b2b")
	eng, err := NewLabEngine(lab, EngineConfig{MaxRate: DefaultMaxRate})
	if err != nil {
		t.Fatal(err)
	}
	l, err := Up(context.Background(), os.Getenv("MRLAB_HELPER_NAME"), eng, Options{RunDir: os.Getenv("MRLAB_HELPER_DIR"), Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-time.After(60 * time.Second):
	case <-l.pacer.Done():
	}
	l.Close()
}

// loadTestLab loads a built-in lab.
func loadTestLab(t *testing.T, builtin string) *labs.Lab {
	t.Helper()
	lab, err := labs.Builtin(builtin)
	if err != nil {
		t.Fatal(err)
	}
	return lab
}

// otherLeafHost returns the first host on another leaf than h (another
// /24: the builders give each leaf its own).
func otherLeafHost(t testing.TB, st State, h StateHost) StateHost {
	t.Helper()
	a := mustAddr(t, h.Addr).As4()
	for _, o := range st.Hosts {
		if b := mustAddr(t, o.Addr).As4(); b[2] != a[2] {
			return o
		}
	}
	t.Fatal("no host on another leaf")
	return StateHost{}
}

func mustAddr(t testing.TB, s string) netip.Addr {
	t.Helper()
	a, err := netip.ParseAddr(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
