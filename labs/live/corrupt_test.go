package live

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/mrlab/mrlab/internal/testenv"
	"github.com/mrlab/mrlab/labs"
	"github.com/mrlab/mrlab/labs/hostns"
)

// corruptLab is the mini lab with tc-netem's loss point on every link, so
// an impairment's corrupted packets reach the far NIC with one bit flipped
// (on the wire they would fail the far port's FCS and never reach it).
func corruptLab(t *testing.T) *labs.Lab {
	t.Helper()
	src, err := os.ReadFile("testdata/mini.yaml")
	if err != nil {
		t.Fatal(err)
	}
	const from = "ecn: {step: 64KiB}}"
	text := strings.Replace(string(src), from, "ecn: {step: 64KiB}, loss_at: enqueue}", 1)
	if text == string(src) {
		t.Fatalf("testdata/mini.yaml no longer has %q to add loss_at to", from)
	}
	lab, err := labs.Parse("mini+enqueue", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return lab
}

// TestLiveCorruption is the live ICRC test on fake devices (the real
// fabric, NICs and real-time loop; perf runs are NIC to NIC, so no root):
// see checkCorruption. TestLiveCorruptionNamespaces runs it in a lab in
// network namespaces.
func TestLiveCorruption(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two 1s perf runs in real time")
	}
	eng, err := NewLabEngine(corruptLab(t), EngineConfig{MaxRate: DefaultMaxRate, Name: testLabName("c")})
	if err != nil {
		t.Fatal(err)
	}
	var devs []Device
	for range eng.Hosts() {
		devs = append(devs, newPipe())
	}
	l, err := Up(context.Background(), testLabName("c"), eng, Options{RunDir: t.TempDir(), Devices: devs, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	checkCorruption(t, l, "h0", "h2")
}

// TestLiveCorruptionNamespaces: checkCorruption on the same lab brought up
// in network namespaces (TUN devices, the host kernels attached).
func TestLiveCorruptionNamespaces(t *testing.T) {
	testenv.RequireNamespaces(t)
	if testing.Short() {
		t.Skip("runs two 1s perf runs in real time")
	}
	name := testLabName("cn")
	eng, err := NewLabEngine(corruptLab(t), EngineConfig{MaxRate: DefaultMaxRate, Name: name})
	if err != nil {
		t.Fatal(err)
	}
	l, err := Up(context.Background(), name, eng, Options{RunDir: t.TempDir(), Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	st := l.State()
	defer func() {
		l.Close()
		for _, ns := range st.Namespaces {
			if hostns.Exists(ns) {
				t.Errorf("namespace %s left behind; deleting it", ns)
				hostns.Delete(ns)
			}
		}
	}()
	checkCorruption(t, l, "h0", "h2")
}

// checkCorruption corrupts and duplicates 1% of the packets on both of
// dst's links (both directions) during a WRITE run of each transport, and
// checks: the impairment's corrupted packets reach the NICs, which drop
// and count them (RoCEv2: the NIC's ICRC check; MetaRoCE: its CRC32C),
// never more drops than corrupted packets; no corrupted byte reaches the
// application (the data oracle checked every message at its completion
// and none failed); and status and /metrics show the link's corrupted and
// duplicated packets, each host's corrupt_dropped and dup_received, and
// the oracle's checks in dst's memory, with the lab label. With the NIC's
// ICRC check planted away (softnic receiveTransport's sealer.Check) the
// RoCEv2 case fails: 289 of 2014 messages wrong at completion, 0 ICRC
// drops.
func checkCorruption(t *testing.T, l *Lab, src, dst string) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	links := []string{dst + "-p0", dst + "-p1"}
	for _, k := range links {
		if err := l.Fault(ctx, FaultRequest{Target: "link", Name: k, Action: "impair", Impair: []string{"corrupt", "1%", "duplicate", "1%"}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, kind := range []string{"rocev2", "metaroce"} {
		t.Run(kind, func(t *testing.T) {
			before, err := l.Status(ctx)
			if err != nil {
				t.Fatal(err)
			}
			r, err := l.Perf(ctx, PerfRequest{From: src, To: dst, Op: "write", Transport: kind, Size: 64 << 10, Duration: time.Second, Verify: true})
			if err != nil {
				t.Fatal(err)
			}
			after, err := l.Status(ctx)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: %s, %d messages, verified %v, counters %v (load %s)", kind, r.Status, r.Messages, r.Verified, r.Counters, loadavg())
			if !statusOK(r) || !r.Verified || r.Errors != 0 || r.Counters["messages_checked"] == 0 || r.Counters["check_failures"] != 0 {
				t.Errorf("run under corruption: status %q, verified %v, %d errors, oracle checked %d messages, %d failed (want ok, true, 0, >0, 0)",
					r.Status, r.Verified, r.Errors, r.Counters["messages_checked"], r.Counters["check_failures"])
			}
			nic := func(host, k string) uint64 { return after.Engine.NICs[host][k] - before.Engine.NICs[host][k] }
			var corrupted, duplicated, dropped, icrc, crc, dups uint64
			for i, k := range after.Engine.Links {
				if k.Name != before.Engine.Links[i].Name {
					t.Fatalf("status link %d is %s, was %s", i, k.Name, before.Engine.Links[i].Name)
				}
				corrupted += k.Corrupted - before.Engine.Links[i].Corrupted
				duplicated += k.Duplicated - before.Engine.Links[i].Duplicated
			}
			for host := range after.Engine.NICs {
				dropped += nic(host, "corrupt_dropped")
				icrc += nic(host, "drops_icrc")
				crc += nic(host, "checksum_drops")
				dups += nic(host, "dup_received")
			}
			t.Logf("status: links corrupted %d duplicated %d; NICs corrupt_dropped %d (icrc %d, transport crc %d), dup_received %d", corrupted, duplicated, dropped, icrc, crc, dups)
			if corrupted == 0 || duplicated == 0 || r.Counters["corrupted"] == 0 {
				t.Fatalf("no packet corrupted or duplicated (status %d, %d; run %d): the test tests nothing", corrupted, duplicated, r.Counters["corrupted"])
			}
			// A bit flipped in a header can also end as another drop
			// (an unknown connection or port), never as more checksum
			// drops than corrupted packets.
			if dropped == 0 || dropped > corrupted || dropped != icrc+crc {
				t.Errorf("NICs dropped %d corrupted packets (icrc %d + crc %d) of %d corrupted: want 0 < drops <= corrupted", dropped, icrc, crc, corrupted)
			}
			if kind == "rocev2" && icrc == 0 || kind == "metaroce" && crc == 0 {
				t.Errorf("%s: icrc drops %d, transport crc drops %d: the transport's own check counted none", kind, icrc, crc)
			}
			if dups == 0 {
				t.Errorf("%d packets duplicated, none received again", duplicated)
			}
			if got, want := nic(dst, "oracle_messages_checked"), r.Counters["messages_checked"]; got != want || nic(dst, "oracle_failures") != 0 {
				t.Errorf("%s's status: oracle checked %d messages, %d failed; the run says %d, 0", dst, got, nic(dst, "oracle_failures"), want)
			}
			if v := nic(src, "oracle_messages_checked"); v != 0 {
				t.Errorf("%s (the WRITE's requester) credited with %d oracle checks", src, v)
			}
			m := scrape(t, l.State().Metrics)
			for _, c := range []struct {
				series string
				want   uint64
			}{
				{fmt.Sprintf(`mrlab_nic_oracle_messages_checked_total{host="%s",lab="%s"}`, dst, l.Name()), after.Engine.NICs[dst]["oracle_messages_checked"]},
				{fmt.Sprintf(`mrlab_nic_oracle_failures_total{host="%s",lab="%s"}`, dst, l.Name()), after.Engine.NICs[dst]["oracle_failures"]},
			} {
				if v := metricValue(m, c.series); v != float64(c.want) {
					t.Errorf("/metrics: %s = %v, want %d (status)", c.series, v, c.want)
				}
			}
			var mDropped, mLink float64
			for _, h := range []string{src, dst} {
				mDropped += metricValue(m, fmt.Sprintf(`mrlab_nic_corrupt_dropped_total{host="%s",lab="%s"}`, h, l.Name()))
			}
			for _, k := range links {
				mLink += metricValue(m, fmt.Sprintf(`mrlab_link_corrupted_total{lab="%s",link="%s"}`, l.Name(), k))
			}
			if mDropped < float64(dropped) || mLink < float64(corrupted) {
				t.Errorf("/metrics: corrupt_dropped %v, links' corrupted %v; status counted %d, %d in this run alone", mDropped, mLink, dropped, corrupted)
			}
		})
	}
	// The endpoint with the new series passes Prometheus's own lint.
	promtool := testenv.RequireCommand(t, "promtool")
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(scrape(t, l.State().Metrics))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}
